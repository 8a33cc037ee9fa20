// Batched chain speculative sampling: one block of 1024 threads per batch row,
// and its launcher. Every thread walks the acceptance tests (a few loads of
// p(x) and q(x), identical in each thread); then the block draws the emitted
// token from the residual or the bonus row with block_draw, which finds the
// token row_math::sample_weights finds. So the output is bit-identical to the
// host rule's (row_math::chain_speculative_sampling_row).
#include <cuda_runtime.h>

#include <cstdint>

#include "block_math.cuh"
#include "launch_checks.hpp"
#include "specdec/accept/row_math.hpp"
#include "specdec/core/rng.hpp"
#include "specdec/cuda/chain_speculative_sampling.hpp"

namespace specdec::cuda {
namespace {

using detail::kBlock;

__global__ void __launch_bounds__(kBlock) chain_speculative_sampling_kernel(
    const float* __restrict__ draft_probs,     // [batch, gamma, vocab]
    const TokenId* __restrict__ draft_tokens,  // [batch, gamma]
    const float* __restrict__ target_probs,    // [batch, gamma + 1, vocab]
    TokenId* __restrict__ output_tokens,       // [batch, gamma + 1]
    std::int32_t* __restrict__ num_accepted,   // [batch]
    std::int32_t gamma, std::int64_t vocab, std::uint64_t seed, std::uint64_t offset,
    const PhiloxUniforms* __restrict__ tree_streams) {
  __shared__ detail::BlockScratch sh;
  const std::int64_t b = blockIdx.x;
  const TokenId* tokens = draft_tokens + b * gamma;
  TokenId* out = output_tokens + b * (gamma + 1);
  const int t = threadIdx.x;

  bool bad = false;
  for (std::int32_t i = 0; i < gamma; ++i) bad |= tokens[i] < 0 || tokens[i] >= vocab;
  if (bad) {
    if (t == 0) detail::flag_bad_chain(tokens, gamma, vocab, out, num_accepted + b);
    return;
  }
  const float* q_base = draft_probs == nullptr ? nullptr : draft_probs + b * gamma * vocab;
  const float* p_base = target_probs + b * (gamma + 1) * vocab;
  // Row b draws from Philox stream b: the host rule's RandomStream(seed, b, offset).
  const PhiloxUniforms uniforms = detail::tree_uniforms(tree_streams, seed, b, offset);
  std::int32_t i = 0;
  for (; i < gamma; ++i) {
    const TokenId x = tokens[i];
    const float q_x = q_base == nullptr ? 1.0f : q_base[i * vocab + x];
    if (!row_math::accept_draft(p_base[i * vocab + x], q_x, uniforms[static_cast<std::uint64_t>(i)])) break;
  }
  const double u = uniforms[static_cast<std::uint64_t>(gamma)];
  const float* p = p_base + i * vocab;
  TokenId y = kNoToken;
  if (i < gamma) {  // the residual norm(max(0, p - q)), or p without x for a one-hot q
    const TokenId x = tokens[i];
    if (q_base != nullptr) {
      const float* q = q_base + i * vocab;
      y = detail::block_draw(
          [p, q](std::int64_t k) { return static_cast<double>(p[k]) - static_cast<double>(q[k]); }, vocab, u,
          sh);
    } else {
      y = detail::block_draw([p, x](std::int64_t k) { return k == x ? 0.0 : static_cast<double>(p[k]); },
                             vocab, u, sh);
    }
  }
  // The bonus; or p itself if rounding left the residual empty.
  if (y == kNoToken) y = detail::block_draw([p](std::int64_t k) { return static_cast<double>(p[k]); }, vocab, u, sh);
  if (t == 0) {
    for (std::int32_t j = 0; j < i; ++j) out[j] = tokens[j];
    out[i] = y;
    for (std::int32_t j = i + 1; j <= gamma; ++j) out[j] = kNoToken;
    num_accepted[b] = i;
  }
}

}  // namespace

Status chain_speculative_sampling(const float* draft_probs,     // [batch, gamma, vocab]
                                  const TokenId* draft_tokens,  // [batch, gamma]
                                  const float* target_probs,    // [batch, gamma + 1, vocab]
                                  TokenId* output_tokens,       // [batch, gamma + 1]
                                  std::int32_t* num_accepted,   // [batch]
                                  std::int32_t batch, std::int32_t gamma, std::int64_t vocab,
                                  std::uint64_t seed, std::uint64_t offset, void* stream,
    const PhiloxUniforms* tree_streams) {
  // Validate before any CUDA call, so bad arguments never touch the device.
  if (!detail::valid_chain_arguments(draft_tokens, target_probs, output_tokens, num_accepted, batch, gamma,
                                     vocab))
    return Status::kInvalidArgument;
  if (vocab > detail::kMaxBlockVocab) return Status::kInvalidArgument;
  if (batch == 0) return Status::kOk;

  chain_speculative_sampling_kernel<<<static_cast<unsigned>(batch), kBlock, 0,
                                      static_cast<cudaStream_t>(stream)>>>(
      draft_probs, draft_tokens, target_probs, output_tokens, num_accepted, gamma, vocab, seed, offset, tree_streams);
  return cudaGetLastError() == cudaSuccess ? Status::kOk : Status::kCudaError;
}

namespace detail {
int multiprocessors() {
  int device = 0, count = 0;
  if (cudaGetDevice(&device) != cudaSuccess ||
      cudaDeviceGetAttribute(&count, cudaDevAttrMultiProcessorCount, device) != cudaSuccess || count <= 0) {
    (void)cudaGetLastError();  // clear it, so it does not surface at an unrelated later call
    return 132;
  }
  return count;
}
}  // namespace detail

Status cuda_device_count(int* count) {
  if (count == nullptr) return Status::kInvalidArgument;
  *count = 0;
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    (void)cudaGetLastError();  // clear it, so it does not surface at an unrelated later call
    return Status::kCudaError;
  }
  *count = n;
  return Status::kOk;
}

}  // namespace specdec::cuda
