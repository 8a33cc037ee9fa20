// Batched traversal verification: a thin kernel over the host rule's row
// function (row_math::traversal_verification_row on a row_math::FlatTree),
// one thread per tree, and its launcher. Output is bit-identical to the host
// rule's. Each row's path levels and residual rows live in the caller's
// workspace, row b at b * row_bytes.
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <limits>

#include "launch_checks.hpp"
#include "specdec/accept/sequence_row_math.hpp"
#include "specdec/core/rng.hpp"
#include "specdec/cuda/traversal_verification.hpp"

namespace specdec::cuda {
namespace {

// One row's workspace: the path's levels (16-byte aligned), then two vocab-wide
// double rows per level. row_bytes is 0 when it would overflow.
std::size_t level_bytes(std::int32_t max_depth) {
  return ((static_cast<std::size_t>(max_depth) + 1) * sizeof(row_math::TraversalLevel) + 15) / 16 * 16;
}
std::size_t row_bytes(std::int32_t max_depth, std::int64_t vocab) {
  const auto levels = static_cast<std::size_t>(max_depth) + 1;
  const auto v = static_cast<std::size_t>(vocab);
  if (v > std::numeric_limits<std::size_t>::max() / (2 * levels * sizeof(double))) return 0;
  return level_bytes(max_depth) + 2 * levels * v * sizeof(double);
}

// Whether a row's tree is one the row function can walk (see the header).
__device__ bool valid_tree(const std::int32_t* parents, const TokenId* tokens, const std::uint8_t* draws,
                           bool have_draft_rows, std::int32_t nodes, std::int32_t max_depth,
                           std::int64_t vocab) {
  for (std::int32_t j = 0; j < nodes; ++j) {
    if (parents[j] < -1 || parents[j] >= j || tokens[j] < 0 || tokens[j] >= vocab) return false;
    std::int32_t depth = 1;
    for (std::int32_t k = parents[j]; k >= 0; k = parents[k]) ++depth;
    if (depth > max_depth) return false;
    const std::uint8_t draw = draws[parents[j] + 1];  // the slot this node is a child of
    if (draw > 2 || (draw != 0 && !have_draft_rows)) return false;
  }
  return true;
}

__global__ void traversal_verification_kernel(
    const std::int32_t* __restrict__ parents, const TokenId* __restrict__ tokens,
    const std::uint8_t* __restrict__ slot_draws, const float* __restrict__ draft_probs,
    const float* __restrict__ target_probs, const std::int32_t* __restrict__ tree_nodes,
    std::int32_t* __restrict__ accepted_nodes,
    std::int32_t* __restrict__ num_accepted, TokenId* __restrict__ emitted, std::int32_t batch,
    std::int32_t nodes, std::int32_t max_depth, std::int64_t vocab, char* __restrict__ workspace,
    std::size_t stride, std::size_t levels_size, std::uint64_t seed, std::uint64_t offset,
    const PhiloxUniforms* __restrict__ tree_streams) {
  const std::int64_t b =
      static_cast<std::int64_t>(blockIdx.x) * blockDim.x + static_cast<std::int64_t>(threadIdx.x);
  if (b >= batch) return;
  const std::int32_t* par = parents + b * nodes;
  const TokenId* tok = tokens + b * nodes;
  const std::uint8_t* draws = slot_draws + b * (nodes + 1);
  std::int32_t* path = accepted_nodes + b * max_depth;
  std::int32_t k = -1;
  emitted[b] = kNoToken;
  // A tree of n nodes, padded to `nodes`: its rows keep the padded stride.
  const std::int32_t n = tree_nodes == nullptr ? nodes : tree_nodes[b];
  if (n >= 0 && n <= nodes && valid_tree(par, tok, draws, draft_probs != nullptr, n, max_depth, vocab)) {
    const std::int64_t rows = static_cast<std::int64_t>(nodes) + 1;
    const row_math::FlatTree tree{
        par, tok, draws, draft_probs == nullptr ? nullptr : draft_probs + b * rows * vocab, n, vocab};
    char* base = workspace + static_cast<std::size_t>(b) * stride;
    auto* levels = reinterpret_cast<row_math::TraversalLevel*>(base);
    auto* scratch = reinterpret_cast<double*>(base + levels_size);
    k = row_math::traversal_verification_row(
        tree, row_math::StridedRows{target_probs + b * rows * vocab, vocab}, vocab,
        detail::tree_uniforms(tree_streams, seed, b, offset), levels, scratch, path, emitted + b);
  }
  for (std::int32_t j = k < 0 ? 0 : k; j < max_depth; ++j) path[j] = -1;
  num_accepted[b] = k;
}

}  // namespace

std::size_t traversal_verification_workspace_bytes(std::int32_t batch, std::int32_t max_depth,
                                                   std::int64_t vocab) {
  if (batch < 0 || max_depth < 0 || max_depth == std::numeric_limits<std::int32_t>::max() || vocab <= 0)
    return 0;
  const std::size_t row = row_bytes(max_depth, vocab);
  if (row == 0 ||
      (batch > 0 && row > std::numeric_limits<std::size_t>::max() / static_cast<std::size_t>(batch)))
    return 0;
  return row * static_cast<std::size_t>(batch);
}

Status traversal_verification(const std::int32_t* parents, const TokenId* tokens,
                              const std::uint8_t* slot_draws, const float* draft_probs,
                              const float* target_probs, const std::int32_t* tree_nodes,
                              std::int32_t* accepted_nodes,
                              std::int32_t* num_accepted, TokenId* emitted, std::int32_t batch,
                              std::int32_t nodes, std::int32_t max_depth, std::int64_t vocab, void* workspace,
                              std::size_t workspace_bytes, std::uint64_t seed, std::uint64_t offset,
                              void* stream, const PhiloxUniforms* tree_streams) {
  if (batch < 0 || nodes < 0 || nodes == std::numeric_limits<std::int32_t>::max() || max_depth < 0 ||
      max_depth > nodes || vocab <= 0 || vocab > std::numeric_limits<TokenId>::max())
    return Status::kInvalidArgument;
  // batch * (nodes + 1) * vocab elements must be addressable with int64.
  const std::int64_t rows = static_cast<std::int64_t>(batch) * (static_cast<std::int64_t>(nodes) + 1);
  if (rows > 0 && vocab > std::numeric_limits<std::int64_t>::max() / rows) return Status::kInvalidArgument;
  const std::size_t needed = traversal_verification_workspace_bytes(batch, max_depth, vocab);
  if (batch == 0) return Status::kOk;
  if (needed == 0 || workspace_bytes < needed || workspace == nullptr) return Status::kInvalidArgument;
  if (slot_draws == nullptr || target_probs == nullptr || num_accepted == nullptr || emitted == nullptr ||
      (nodes > 0 && (parents == nullptr || tokens == nullptr)) ||
      (max_depth > 0 && accepted_nodes == nullptr))
    return Status::kInvalidArgument;
  traversal_verification_kernel<<<detail::blocks_for(batch), detail::kThreadsPerBlock, 0,
                                  static_cast<cudaStream_t>(stream)>>>(
      parents, tokens, slot_draws, draft_probs, target_probs, tree_nodes, accepted_nodes, num_accepted, emitted,
      batch,
      nodes, max_depth, vocab, static_cast<char*>(workspace), row_bytes(max_depth, vocab),
      level_bytes(max_depth), seed, offset, tree_streams);
  return cudaGetLastError() == cudaSuccess ? Status::kOk : Status::kCudaError;
}

}  // namespace specdec::cuda
