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

struct ChainOutcome {
  std::int32_t accepted;
  TokenId emitted;
};

// One chain, on one block: the acceptance tests (a few loads of p(x) and
// q(x), identical in each thread), then the emitted token drawn by the whole
// block. draft_row(i): q_i, or null for a deterministic draft (one-hot).
template <class DraftRows>
__device__ ChainOutcome speculative_sampling_chain(DraftRows draft_row, const TokenId* tokens,
                                                   const float* p_base, std::int32_t gamma, std::int64_t vocab,
                                                   PhiloxUniforms uniforms, detail::BlockScratch& sh) {
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

  bool bad = false;
  for (std::int32_t i = 0; i < gamma; ++i) bad |= tokens[i] < 0 || tokens[i] >= vocab;
  if (bad) {
    if (threadIdx.x == 0) detail::flag_bad_chain(tokens, gamma, vocab, out, num_accepted + b);
    return;
  }
  const row_math::StridedRows draft_row{draft_probs == nullptr ? nullptr : draft_probs + b * gamma * vocab,
                                        vocab};
  // Row b draws from Philox stream b: the host rule's RandomStream(seed, b, offset).
  const ChainOutcome o =
      speculative_sampling_chain(draft_row, tokens, target_probs + b * (gamma + 1) * vocab, gamma, vocab,
                                 detail::tree_uniforms(tree_streams, seed, b, offset), sh);
  if (threadIdx.x == 0) {
    for (std::int32_t j = 0; j < o.accepted; ++j) out[j] = tokens[j];
    out[o.accepted] = o.emitted;
    for (std::int32_t j = o.accepted + 1; j <= gamma; ++j) out[j] = kNoToken;
    num_accepted[b] = o.accepted;
  }
}

// The same rule over chains in a FlatTrees layout (one block per chain).
__global__ void __launch_bounds__(kBlock) chain_speculative_sampling_flat_kernel(
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
  const ChainOutcome o = speculative_sampling_chain(draft_row, tok, target_probs + b * rows * vocab, n, vocab,
                                                    detail::tree_uniforms(tree_streams, seed, b, offset), sh);
  if (threadIdx.x == 0)
    detail::write_flat_chain(o.accepted, o.emitted, max_depth, accepted_nodes + b * max_depth, num_accepted + b,
                             emitted + b);
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

Status chain_speculative_sampling_flat(const std::int32_t* parents, const TokenId* tokens,
                                       const std::uint8_t* slot_draws, const float* draft_probs,
                                       const float* target_probs, const std::int32_t* tree_nodes,
                                       std::int32_t* accepted_nodes, std::int32_t* num_accepted, TokenId* emitted,
                                       std::int32_t batch, std::int32_t nodes, std::int32_t max_depth,
                                       std::int64_t vocab, std::uint64_t seed, std::uint64_t offset, void* stream,
                                       const PhiloxUniforms* tree_streams) {
  if (!detail::valid_flat_arguments(parents, tokens, slot_draws, target_probs, accepted_nodes, num_accepted,
                                    emitted, batch, nodes, max_depth, vocab))
    return Status::kInvalidArgument;
  if (vocab > detail::kMaxBlockVocab) return Status::kInvalidArgument;
  if (batch == 0) return Status::kOk;
  chain_speculative_sampling_flat_kernel<<<static_cast<unsigned>(batch), kBlock, 0,
                                           static_cast<cudaStream_t>(stream)>>>(
      parents, tokens, slot_draws, draft_probs, target_probs, tree_nodes, accepted_nodes, num_accepted, emitted,
      nodes, max_depth, vocab, seed, offset, tree_streams);
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
