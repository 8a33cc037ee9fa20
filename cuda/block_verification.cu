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

struct ChainOutcome {
  std::int32_t accepted;
  TokenId emitted;
};

// One chain, on one block. The tests run from the last draft back; every
// thread computes the same scalars (the sums are returned to all), so control
// flow stays uniform. draft_row(i): q_i, or null for a deterministic draft.
template <class DraftRows>
__device__ ChainOutcome block_verification_chain(DraftRows draft_row, const TokenId* tokens,
                                                 const float* target_probs, std::int32_t gamma, std::int64_t vocab,
                                                 PhiloxUniforms uniforms, detail::BlockScratch& sh) {
  const row_math::StridedRows target_row{target_probs, vocab};
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
  return {tau, y};
}

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
  const ChainOutcome o =
      block_verification_chain(draft_row, tokens, target_probs + b * (gamma + 1) * vocab, gamma, vocab,
                               detail::tree_uniforms(tree_streams, seed, b, offset), sh);
  if (threadIdx.x == 0) {
    for (std::int32_t i = 0; i < o.accepted; ++i) out[i] = tokens[i];
    out[o.accepted] = o.emitted;
    for (std::int32_t j = o.accepted + 1; j <= gamma; ++j) out[j] = kNoToken;
    num_accepted[b] = o.accepted;
  }
}

// The same rule over chains in a FlatTrees layout (one block per chain).
__global__ void __launch_bounds__(kBlock) block_verification_flat_kernel(
    const std::int32_t* __restrict__ parents, const TokenId* __restrict__ tokens,
    const std::uint8_t* __restrict__ slot_draws, const float* __restrict__ draft_probs,
    const float* __restrict__ target_probs, const std::int32_t* __restrict__ tree_nodes,
    std::int32_t* __restrict__ accepted_nodes, std::int32_t* __restrict__ num_accepted,
    TokenId* __restrict__ emitted, std::int32_t nodes, std::int32_t max_depth, std::int64_t vocab,
    std::uint64_t seed, std::uint64_t offset, const PhiloxUniforms* __restrict__ tree_streams) {
  __shared__ detail::BlockScratch sh;
  const std::int64_t b = blockIdx.x;
  const std::int32_t n = tree_nodes == nullptr ? nodes : tree_nodes[b];
  const std::int64_t rows = static_cast<std::int64_t>(nodes) + 1;
  const std::int32_t* par = parents + b * nodes;
  const TokenId* tok = tokens + b * nodes;
  const std::uint8_t* draws = slot_draws + b * rows;
  if (!detail::valid_flat_chain(par, tok, draws, draft_probs != nullptr, n, nodes, max_depth, vocab)) {
    if (threadIdx.x == 0)
      detail::write_flat_chain(-1, kNoToken, max_depth, accepted_nodes + b * max_depth, num_accepted + b,
                               emitted + b);
    return;
  }
  const detail::FlatChainDraftRows draft_row{
      draft_probs == nullptr ? nullptr : draft_probs + b * rows * vocab, draws, vocab};
  const ChainOutcome o = block_verification_chain(draft_row, tok, target_probs + b * rows * vocab, n, vocab,
                                                  detail::tree_uniforms(tree_streams, seed, b, offset), sh);
  if (threadIdx.x == 0)
    detail::write_flat_chain(o.accepted, o.emitted, max_depth, accepted_nodes + b * max_depth, num_accepted + b,
                             emitted + b);
}

}  // namespace

Status block_verification(const float* draft_probs, const TokenId* draft_tokens, const float* target_probs,
                          TokenId* output_tokens, std::int32_t* num_accepted, std::int32_t batch,
                          std::int32_t gamma, std::int64_t vocab, std::uint64_t seed, std::uint64_t offset,
                          void* stream, const PhiloxUniforms* tree_streams) {
  if (!detail::valid_chain_arguments(draft_tokens, target_probs, output_tokens, num_accepted, batch, gamma,
                                     vocab))
    return Status::kInvalidArgument;
  if (vocab > detail::kMaxBlockVocab) return Status::kInvalidArgument;
  if (batch == 0) return Status::kOk;
  block_verification_kernel<<<static_cast<unsigned>(batch), kBlock, 0, static_cast<cudaStream_t>(stream)>>>(
      draft_probs, draft_tokens, target_probs, output_tokens, num_accepted, gamma, vocab, seed, offset, tree_streams);
  return cudaGetLastError() == cudaSuccess ? Status::kOk : Status::kCudaError;
}

Status block_verification_flat(const std::int32_t* parents, const TokenId* tokens, const std::uint8_t* slot_draws,
                               const float* draft_probs, const float* target_probs, const std::int32_t* tree_nodes,
                               std::int32_t* accepted_nodes, std::int32_t* num_accepted, TokenId* emitted,
                               std::int32_t batch, std::int32_t nodes, std::int32_t max_depth, std::int64_t vocab,
                               std::uint64_t seed, std::uint64_t offset, void* stream,
                               const PhiloxUniforms* tree_streams) {
  if (!detail::valid_flat_arguments(parents, tokens, slot_draws, target_probs, accepted_nodes, num_accepted,
                                    emitted, batch, nodes, max_depth, vocab))
    return Status::kInvalidArgument;
  if (vocab > detail::kMaxBlockVocab) return Status::kInvalidArgument;
  if (batch == 0) return Status::kOk;
  block_verification_flat_kernel<<<static_cast<unsigned>(batch), kBlock, 0, static_cast<cudaStream_t>(stream)>>>(
      parents, tokens, slot_draws, draft_probs, target_probs, tree_nodes, accepted_nodes, num_accepted, emitted,
      nodes, max_depth, vocab, seed, offset, tree_streams);
  return cudaGetLastError() == cudaSuccess ? Status::kOk : Status::kCudaError;
}

}  // namespace specdec::cuda
