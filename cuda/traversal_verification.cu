// Batched traversal verification: one block per tree walks it as the host
// rule's row function (row_math::traversal_verification_row on a
// row_math::FlatTree) does, the vocabulary-wide steps spread over the block,
// and its launcher. Output is bit-identical to the host rule's. Each row's
// path levels and residual rows live in the caller's workspace, row b at
// b * row_bytes.
#include <cuda_runtime.h>

#include <cstddef>
#include <cstdint>
#include <limits>

#include "block_math.cuh"
#include "launch_checks.hpp"
#include "specdec/accept/sequence_row_math.hpp"
#include "specdec/core/rng.hpp"
#include "specdec/cuda/traversal_verification.hpp"

namespace specdec::cuda {
namespace {

using detail::BlockScratch;
using detail::kBlock;
// The most nodes a tree may have: a slot's children's tokens are kept in
// shared memory beside BlockScratch.
constexpr std::int32_t kMaxNodes = 4096;

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

using row_math::TraversalLevel;

// Thread 0 stores `value` as level d, once every thread has read the old
// record; every thread reads the new one after this.
__device__ void store_level(TraversalLevel* levels, std::int32_t d, const TraversalLevel& value) {
  __syncthreads();
  if (threadIdx.x == 0) levels[d] = value;
  __syncthreads();
}

// row_math::detail::reject_sampled spread over the block: thread t owns the
// tokens t, t + kBlock, ... (block_lane_sum's lanes), so it reads and writes
// only its own entries of b and s; the sums are the host's bits.
__device__ void block_reject_sampled(TraversalLevel& l, const float* row, const float* q, bool without_replacement,
                                     TokenId x, double* b, double* s, std::int64_t vocab, BlockScratch& sh) {
  const TraversalLevel old = l;
  const auto owed = [&](std::int64_t y) {
    const double b_y = old.b_scratch ? b[y] / old.b_total : static_cast<double>(row[y]);
    return row_math::residual_weight(old.p, b_y, row_math::detail::level_s(old, q, s, y));
  };
  const double z = detail::block_lane_sum(owed, vocab, sh);
  if (z > 0.0) {
    for (std::int64_t y = threadIdx.x; y < vocab; y += kBlock) b[y] = owed(y);
    l.b_total = z;
    l.b_scratch = true;
  }
  l.p = row_math::weight_after_rejection(old.p, z);
  if (without_replacement) {
    for (std::int64_t y = threadIdx.x; y < vocab; y += kBlock)
      s[y] = y == x ? 0.0 : row_math::detail::level_s(old, q, s, y);
    __syncthreads();
    l.s_total = detail::block_lane_sum([s](std::int64_t y) { return s[y]; }, vocab, sh);
    l.s_scratch = true;
  }
}

// row_math::traversal_verification_row with one block per tree: the same
// walk, step for step, run by every thread on the same values (thread 0
// keeps the level records in the workspace, between barriers); the
// vocabulary-wide steps (a rejected child's residual and its mass, a row's
// mass, the draw) spread over the threads with block_math.cuh's sum and draw,
// which compute the host loops' bits. `child_tokens`: shared memory for a
// slot's children's tokens, [nodes].
__device__ std::int32_t block_traversal_row(const row_math::FlatTree& tree, row_math::StridedRows target_row,
                                            std::int64_t vocab, PhiloxUniforms uniforms, TraversalLevel* levels,
                                            double* scratch, std::int32_t* path, TokenId* emitted,
                                            TokenId* child_tokens, BlockScratch& sh) {
  __shared__ std::int32_t child_count;
  const std::int32_t n = tree.size();
  std::int32_t depth = 0;
  {
    TraversalLevel root{};
    root.next_child = tree.first_child(-1);
    store_level(levels, 0, root);
  }
  while (true) {
    TraversalLevel l = levels[depth];
    const std::int32_t slot = l.node;
    double* b_scratch = scratch + static_cast<std::int64_t>(depth) * 2 * vocab;
    const float* b_row = target_row(slot + 1);

    std::int32_t rejected = -1;  // a child of this level that fails
    if (l.next_child >= 0) {
      const std::int32_t c = l.next_child;
      l.next_child = tree.next_sibling(c);
      const TokenId x = tree.token(c);
      const float* q = tree.draft_row(slot);
      const double s_x = q == nullptr ? 1.0 : row_math::detail::level_s(l, q, b_scratch + vocab, x);
      const double p_c =
          row_math::child_weight(l.p, row_math::detail::level_b(tree, l, b_row, b_scratch, c, x), s_x);
      store_level(levels, depth, l);
      if (p_c > 0.0) {  // descend
        TraversalLevel next{};
        next.node = c;
        next.p = p_c;
        next.next_child = tree.first_child(c);
        store_level(levels, ++depth, next);
        continue;
      }
      rejected = c;
    } else if (depth == 0 || uniforms[static_cast<std::uint64_t>(l.node)] < l.p) {
      // The node holds: its path, then the token it emits.
      if (threadIdx.x == 0)
        for (std::int32_t d = 1; d <= depth; ++d) path[d - 1] = levels[d].node;
      const double u = uniforms[static_cast<std::uint64_t>(n)];
      TokenId y = kNoToken;
      if (l.b_scratch) {
        y = detail::block_draw([b_scratch](std::int64_t k) { return b_scratch[k]; }, vocab, u, sh);
      } else if (l.excludes) {  // the row without the children's tokens (all rejected)
        if (threadIdx.x == 0) {
          std::int32_t count = 0;
          for (std::int32_t c = tree.first_child(slot); c >= 0; c = tree.next_sibling(c))
            child_tokens[count++] = tree.token(c);
          child_count = count;
        }
        __syncthreads();
        const std::int32_t count = child_count;
        y = detail::block_draw(
            [=](std::int64_t k) {
              for (std::int32_t j = 0; j < count; ++j)
                if (child_tokens[j] == k) return 0.0;
              return static_cast<double>(b_row[k]);
            },
            vocab, u, sh);
      }
      if (y == kNoToken)
        y = detail::block_draw([b_row](std::int64_t k) { return static_cast<double>(b_row[k]); }, vocab, u, sh);
      if (threadIdx.x == 0) *emitted = y;
      return depth;
    } else {
      rejected = l.node;  // the node fails: its parent takes the rejection
      --depth;
    }

    // A child `rejected` of levels[depth] failed: update that level's laws.
    TraversalLevel up = levels[depth];
    const float* u_row = target_row(up.node + 1);
    const float* uq = tree.draft_row(up.node);
    const TokenId x = tree.token(rejected);
    double* ub = scratch + static_cast<std::int64_t>(depth) * 2 * vocab;
    if (uq == nullptr) {
      const bool gone = up.excludes && row_math::detail::rejected_child_token(tree, up.node, rejected, x);
      if (up.remaining < 0.0)  // the row's mass, as row_math::row_mass sums it
        up.remaining =
            detail::block_lane_sum([u_row](std::int64_t k) { return static_cast<double>(u_row[k]); }, vocab, sh);
      row_math::detail::reject_onehot(up, u_row, gone ? 0.0 : static_cast<double>(u_row[x]), vocab);
    } else {
      block_reject_sampled(up, u_row, uq, tree.draw(up.node) == row_math::SlotDraw::kWithoutReplacement, x, ub,
                           ub + vocab, vocab, sh);
    }
    store_level(levels, depth, up);
  }
}

// Block b verifies tree b.
__global__ void __launch_bounds__(kBlock) traversal_verification_kernel(
    const std::int32_t* __restrict__ parents, const TokenId* __restrict__ tokens,
    const std::uint8_t* __restrict__ slot_draws, const float* __restrict__ draft_probs,
    const float* __restrict__ target_probs, const std::int32_t* __restrict__ tree_nodes,
    std::int32_t* __restrict__ accepted_nodes, std::int32_t* __restrict__ num_accepted, TokenId* __restrict__ emitted,
    std::int32_t nodes, std::int32_t max_depth, std::int64_t vocab, char* __restrict__ workspace,
    std::size_t stride, std::size_t levels_size, std::uint64_t seed, std::uint64_t offset,
    const PhiloxUniforms* __restrict__ tree_streams) {
  __shared__ BlockScratch sh;
  extern __shared__ TokenId child_tokens[];
  const std::int64_t b = blockIdx.x;
  const std::int32_t* par = parents + b * nodes;
  const TokenId* tok = tokens + b * nodes;
  const std::uint8_t* draws = slot_draws + b * (nodes + 1);
  std::int32_t* path = accepted_nodes + b * max_depth;
  std::int32_t k = -1;
  if (threadIdx.x == 0) emitted[b] = kNoToken;
  // A tree of n nodes, padded to `nodes`: its rows keep the padded stride.
  const std::int32_t n = tree_nodes == nullptr ? nodes : tree_nodes[b];
  // Every thread checks the tree (the same answer), so that all of them walk it or none.
  if (n >= 0 && n <= nodes && valid_tree(par, tok, draws, draft_probs != nullptr, n, max_depth, vocab)) {
    const std::int64_t rows = static_cast<std::int64_t>(nodes) + 1;
    const row_math::FlatTree tree{
        par, tok, draws, draft_probs == nullptr ? nullptr : draft_probs + b * rows * vocab, n, vocab};
    char* base = workspace + static_cast<std::size_t>(b) * stride;
    k = block_traversal_row(tree, row_math::StridedRows{target_probs + b * rows * vocab, vocab}, vocab,
                            detail::tree_uniforms(tree_streams, seed, b, offset),
                            reinterpret_cast<TraversalLevel*>(base), reinterpret_cast<double*>(base + levels_size),
                            path, emitted + b, child_tokens, sh);
  }
  if (threadIdx.x != 0) return;
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
      max_depth > nodes || nodes > kMaxNodes || vocab <= 0 || vocab > detail::kMaxBlockVocab)
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
  traversal_verification_kernel<<<static_cast<unsigned>(batch), kBlock,
                                  static_cast<std::size_t>(nodes) * sizeof(TokenId),
                                  static_cast<cudaStream_t>(stream)>>>(
      parents, tokens, slot_draws, draft_probs, target_probs, tree_nodes, accepted_nodes, num_accepted, emitted,
      nodes, max_depth, vocab, static_cast<char*>(workspace), row_bytes(max_depth, vocab), level_bytes(max_depth),
      seed, offset, tree_streams);
  return cudaGetLastError() == cudaSuccess ? Status::kOk : Status::kCudaError;
}

}  // namespace specdec::cuda
