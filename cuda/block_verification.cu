// Batched block verification: a thin kernel over the host rule's row function
// (row_math::block_verification_row), one thread per batch row, and its
// launcher. Output is bit-identical to the host rule's.
#include <cuda_runtime.h>

#include <cstdint>

#include "launch_checks.hpp"
#include "specdec/accept/sequence_row_math.hpp"
#include "specdec/core/rng.hpp"
#include "specdec/cuda/block_verification.hpp"

namespace specdec::cuda {
namespace {

__global__ void block_verification_kernel(const float* __restrict__ draft_probs,
                                          const TokenId* __restrict__ draft_tokens,
                                          const float* __restrict__ target_probs,
                                          TokenId* __restrict__ output_tokens,
                                          std::int32_t* __restrict__ num_accepted, std::int32_t batch,
                                          std::int32_t gamma, std::int64_t vocab, std::uint64_t seed,
                                          std::uint64_t offset) {
  const std::int64_t b =
      static_cast<std::int64_t>(blockIdx.x) * blockDim.x + static_cast<std::int64_t>(threadIdx.x);
  if (b >= batch) return;
  const TokenId* tokens = draft_tokens + b * gamma;
  TokenId* out = output_tokens + b * (gamma + 1);
  if (detail::flag_bad_chain(tokens, gamma, vocab, out, num_accepted + b)) return;
  const row_math::StridedRows draft_rows{draft_probs == nullptr ? nullptr : draft_probs + b * gamma * vocab,
                                         vocab};
  const row_math::StridedRows target_rows{target_probs + b * (gamma + 1) * vocab, vocab};
  num_accepted[b] =
      row_math::block_verification_row(draft_rows, tokens, target_rows, gamma, vocab,
                                       PhiloxUniforms{seed, static_cast<std::uint64_t>(b), offset}, out);
}

}  // namespace

Status block_verification(const float* draft_probs, const TokenId* draft_tokens, const float* target_probs,
                          TokenId* output_tokens, std::int32_t* num_accepted, std::int32_t batch,
                          std::int32_t gamma, std::int64_t vocab, std::uint64_t seed, std::uint64_t offset,
                          void* stream) {
  if (!detail::valid_chain_arguments(draft_tokens, target_probs, output_tokens, num_accepted, batch, gamma,
                                     vocab))
    return Status::kInvalidArgument;
  if (batch == 0) return Status::kOk;
  block_verification_kernel<<<detail::blocks_for(batch), detail::kThreadsPerBlock, 0,
                              static_cast<cudaStream_t>(stream)>>>(draft_probs, draft_tokens, target_probs,
                                                                   output_tokens, num_accepted, batch, gamma,
                                                                   vocab, seed, offset);
  return cudaGetLastError() == cudaSuccess ? Status::kOk : Status::kCudaError;
}

}  // namespace specdec::cuda
