// Batched chain speculative sampling: a thin kernel over the host rule's row
// function (row_math::chain_speculative_sampling_row), and its launcher.
//
// One thread per batch row. The row function is sequential over the vocabulary
// (an exact double-precision inverse-CDF draw), so this is a correctness-first
// kernel whose output is bit-identical to the host rule's; a block-per-row
// kernel with a parallel prefix sum must reproduce the same sums to keep that
// property.
#include <cuda_runtime.h>

#include <cstdint>

#include "specdec/accept/row_math.hpp"
#include "specdec/core/rng.hpp"
#include "specdec/cuda/chain_speculative_sampling.hpp"
#include "launch_checks.hpp"

namespace specdec::cuda {
namespace {

__global__ void chain_speculative_sampling_kernel(
    const float* __restrict__ draft_probs,     // [batch, gamma, vocab]
    const TokenId* __restrict__ draft_tokens,  // [batch, gamma]
    const float* __restrict__ target_probs,    // [batch, gamma + 1, vocab]
    TokenId* __restrict__ output_tokens,       // [batch, gamma + 1]
    std::int32_t* __restrict__ num_accepted,   // [batch]
    std::int32_t batch, std::int32_t gamma, std::int64_t vocab, std::uint64_t seed,
    std::uint64_t offset) {
  const std::int64_t b =
      static_cast<std::int64_t>(blockIdx.x) * blockDim.x + static_cast<std::int64_t>(threadIdx.x);
  if (b >= batch) return;
  const TokenId* tokens = draft_tokens + b * gamma;
  TokenId* out = output_tokens + b * (gamma + 1);

  if (detail::flag_bad_chain(tokens, gamma, vocab, out, num_accepted + b)) return;

  const row_math::StridedRows draft_rows{
      draft_probs == nullptr ? nullptr : draft_probs + b * gamma * vocab, vocab};
  const row_math::StridedRows target_rows{target_probs + b * (gamma + 1) * vocab, vocab};
  // Row b draws from Philox stream b: the host rule's RandomStream(seed, b, offset).
  num_accepted[b] = row_math::chain_speculative_sampling_row(
      draft_rows, tokens, target_rows, gamma, vocab,
      PhiloxUniforms{seed, static_cast<std::uint64_t>(b), offset}, out);
}

}  // namespace

Status chain_speculative_sampling(const float* draft_probs,     // [batch, gamma, vocab]
                                  const TokenId* draft_tokens,  // [batch, gamma]
                                  const float* target_probs,    // [batch, gamma + 1, vocab]
                                  TokenId* output_tokens,       // [batch, gamma + 1]
                                  std::int32_t* num_accepted,   // [batch]
                                  std::int32_t batch, std::int32_t gamma, std::int64_t vocab,
                                  std::uint64_t seed, std::uint64_t offset, void* stream) {
  // Validate before any CUDA call, so bad arguments never touch the device.
  if (!detail::valid_chain_arguments(draft_tokens, target_probs, output_tokens, num_accepted, batch, gamma,
                                     vocab))
    return Status::kInvalidArgument;
  if (batch == 0) return Status::kOk;

  chain_speculative_sampling_kernel<<<detail::blocks_for(batch), detail::kThreadsPerBlock, 0,
                                      static_cast<cudaStream_t>(stream)>>>(
      draft_probs, draft_tokens, target_probs, output_tokens, num_accepted, batch, gamma, vocab,
      seed, offset);
  return cudaGetLastError() == cudaSuccess ? Status::kOk : Status::kCudaError;
}

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
