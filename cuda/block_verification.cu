// Batched block verification (Sun et al., arXiv 2403.10444, Algorithm 2):
// one block of 1024 threads per chain, and its launcher. The steps of the
// host row function (row_math::block_verification_row) with its vocabulary
// sums and draws spread over the block: block_lane_sum reproduces
// bitexact::lane_sum, the shape row_mass and sampled_residual_mass sum in,
// and block_draw the fixed-point draw. Output is bit-identical to the host
// rule's.
#include <cuda_runtime.h>

#include <cstdint>

#include "block_math.cuh"
#include "launch_checks.hpp"
#include "specdec/accept/sequence_row_math.hpp"
#include "specdec/core/rng.hpp"
#include "specdec/cuda/block_verification.hpp"

namespace specdec::cuda {
namespace {

using detail::kBlock;

__global__ void __launch_bounds__(kBlock) block_verification_kernel(
    const float* __restrict__ draft_probs, const TokenId* __restrict__ draft_tokens,
    const float* __restrict__ target_probs, TokenId* __restrict__ output_tokens,
    std::int32_t* __restrict__ num_accepted, std::int32_t gamma, std::int64_t vocab, std::uint64_t seed,
    std::uint64_t offset, const PhiloxUniforms* __restrict__ tree_streams) {
  __shared__ detail::BlockScratch sh;
  const std::int64_t b = blockIdx.x;
  const TokenId* tokens = draft_tokens + b * gamma;
  TokenId* out = output_tokens + b * (gamma + 1);
  bool bad = false;
  for (std::int32_t i = 0; i < gamma; ++i) bad |= tokens[i] < 0 || tokens[i] >= vocab;
  if (bad) {
    if (threadIdx.x == 0) detail::flag_bad_chain(tokens, gamma, vocab, out, num_accepted + b);
    return;
  }
  const row_math::StridedRows draft_row{draft_probs == nullptr ? nullptr : draft_probs + b * gamma * vocab,
                                        vocab};
  const row_math::StridedRows target_row{target_probs + b * (gamma + 1) * vocab, vocab};
  const PhiloxUniforms uniforms = detail::tree_uniforms(tree_streams, seed, b, offset);
  // The tests from the last draft back; every thread computes the same
  // scalars (the sums are returned to all), so control flow stays uniform.
  std::int32_t tau = 0;
  double p_tau = 1.0;
  for (std::int32_t i = gamma; i >= 1; --i) {
    const double p = row_math::block_weight(draft_row, tokens, target_row, i);
    if (!(p > 0.0)) continue;
    double h = p;
    if (i < gamma) {
      const float* row = target_row(i);
      const float* q = draft_row(i);
      const double z =
          q != nullptr
              ? detail::block_lane_sum(
                    [=](std::int64_t y) {
                      return row_math::residual_weight(p, static_cast<double>(row[y]), static_cast<double>(q[y]));
                    },
                    vocab, sh)
              : row_math::onehot_residual_mass(
                    p, detail::block_lane_sum([=](std::int64_t y) { return static_cast<double>(row[y]); }, vocab, sh),
                    static_cast<double>(row[tokens[i]]), 1.0);
      h = row_math::weight_after_rejection(p, z);
    }
    if (uniforms[static_cast<std::uint64_t>(i - 1)] < h) {
      tau = i;
      p_tau = p;
      break;
    }
  }
  const double u = uniforms[static_cast<std::uint64_t>(gamma)];
  const float* row = target_row(tau);
  TokenId y = kNoToken;
  if (tau < gamma) {
    const float* q = draft_row(tau);
    const TokenId x = tokens[tau];
    y = q != nullptr ? detail::block_draw(
                           [=](std::int64_t k) {
                             return row_math::residual_weight(p_tau, static_cast<double>(row[k]),
                                                              static_cast<double>(q[k]));
                           },
                           vocab, u, sh)
                     : detail::block_draw([=](std::int64_t k) { return k == x ? 0.0 : static_cast<double>(row[k]); },
                                          vocab, u, sh);  // the row without x
  }
  // The bonus; or, if rounding left the residual empty, the target row itself.
  if (y == kNoToken) y = detail::block_draw([=](std::int64_t k) { return static_cast<double>(row[k]); }, vocab, u, sh);
  if (threadIdx.x == 0) {
    for (std::int32_t i = 0; i < tau; ++i) out[i] = tokens[i];
    out[tau] = y;
    for (std::int32_t j = tau + 1; j <= gamma; ++j) out[j] = kNoToken;
    num_accepted[b] = tau;
  }
}

}  // namespace

Status block_verification(const float* draft_probs, const TokenId* draft_tokens, const float* target_probs,
                          TokenId* output_tokens, std::int32_t* num_accepted, std::int32_t batch,
                          std::int32_t gamma, std::int64_t vocab, std::uint64_t seed, std::uint64_t offset,
                          void* stream,
    const PhiloxUniforms* tree_streams) {
  if (!detail::valid_chain_arguments(draft_tokens, target_probs, output_tokens, num_accepted, batch, gamma,
                                     vocab))
    return Status::kInvalidArgument;
  if (vocab > detail::kMaxBlockVocab) return Status::kInvalidArgument;
  if (batch == 0) return Status::kOk;
  block_verification_kernel<<<static_cast<unsigned>(batch), kBlock, 0, static_cast<cudaStream_t>(stream)>>>(
      draft_probs, draft_tokens, target_probs, output_tokens, num_accepted, gamma, vocab, seed, offset, tree_streams);
  return cudaGetLastError() == cudaSuccess ? Status::kOk : Status::kCudaError;
}

}  // namespace specdec::cuda
