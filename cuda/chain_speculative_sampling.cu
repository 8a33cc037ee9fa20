// Batched chain speculative sampling: one block of 1024 threads per batch row,
// and its launcher. Every thread walks the acceptance tests (a few loads of
// p(x) and q(x), identical in each thread); then the block draws the emitted
// token from the residual or the bonus row with block_draw, which finds the
// token row_math::sample_weights finds. So the output is bit-identical to the
// host rule's (row_math::chain_speculative_sampling_row).
#include <cuda_runtime.h>

#include <cstdint>

#include "block_math.cuh"
#include "chain_rule.cuh"
#include "launch_checks.hpp"
#include "specdec/accept/row_math.hpp"
#include "specdec/core/rng.hpp"
#include "specdec/cuda/chain_speculative_sampling.hpp"

namespace specdec::cuda {
namespace {

using detail::kBlock;

using detail::ChainOutcome;

// One chain, on one block: the acceptance tests (a few loads of p(x) and
// q(x), identical in each thread), then the emitted token drawn by the whole
// block. draft_row(i): q_i, or null for a deterministic draft (one-hot).
struct SpeculativeSamplingChain {
  template <class DraftRows>
  __device__ ChainOutcome operator()(DraftRows draft_row, const TokenId* tokens, const float* p_base,
                                     std::int32_t gamma, std::int64_t vocab, PhiloxUniforms uniforms,
                                     detail::BlockScratch& sh) const {
    std::int32_t i = 0;
    for (; i < gamma; ++i) {
      const TokenId x = tokens[i];
      const float* q = draft_row(i);
      const float q_x = q == nullptr ? 1.0f : q[x];
      if (!row_math::accept_draft(p_base[i * vocab + x], q_x, uniforms[static_cast<std::uint64_t>(i)])) break;
    }
    const double u = uniforms[static_cast<std::uint64_t>(gamma)];
    const float* p = p_base + i * vocab;
    TokenId y = kNoToken;
    if (i < gamma) {  // the residual norm(max(0, p - q)), or p without x for a one-hot q
      const TokenId x = tokens[i];
      const float* q = draft_row(i);
      if (q != nullptr) {
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
    return {i, y};
  }
};


}  // namespace

Status chain_speculative_sampling(const float* draft_probs,     // [batch, gamma, vocab]
                                  const TokenId* draft_tokens,  // [batch, gamma]
                                  const float* target_probs,    // [batch, gamma + 1, vocab]
                                  TokenId* output_tokens,       // [batch, gamma + 1]
                                  std::int32_t* num_accepted,   // [batch]
                                  std::int32_t batch, std::int32_t gamma, std::int64_t vocab,
                                  std::uint64_t seed, std::uint64_t offset, void* stream,
                                  const PhiloxUniforms* tree_streams) {
  return detail::launch_dense_chain<SpeculativeSamplingChain>(
      draft_probs, draft_tokens, target_probs, output_tokens, num_accepted, batch, gamma, vocab, seed, offset, stream,
      tree_streams);
}

Status chain_speculative_sampling_flat(const std::int32_t* parents, const TokenId* tokens,
                                       const std::uint8_t* slot_draws, const float* draft_probs,
                                       const float* target_probs, const std::int32_t* tree_nodes,
                                       std::int32_t* accepted_nodes, std::int32_t* num_accepted, TokenId* emitted,
                                       std::int32_t batch, std::int32_t nodes, std::int32_t max_depth,
                                       std::int64_t vocab, std::uint64_t seed, std::uint64_t offset, void* stream,
                                       const PhiloxUniforms* tree_streams) {
  return detail::launch_flat_chain<SpeculativeSamplingChain>(
      parents, tokens, slot_draws, draft_probs, target_probs, tree_nodes, accepted_nodes, num_accepted, emitted,
      batch, nodes, max_depth, vocab, seed, offset, stream, tree_streams);
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
