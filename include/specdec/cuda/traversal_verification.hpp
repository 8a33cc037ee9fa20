// Batched traversal verification of token trees on a CUDA device (Weng et
// al., arXiv 2505.12398). Lossless.
//
// Each batch row runs row_math::traversal_verification_row over a
// row_math::FlatTree, the function the host rule TraversalVerification runs,
// with the same Philox draws: row b's j-th uniform is philox_uniform(seed, b,
// offset + j), node i's test reading j = i and the emitted token j = n, for a
// tree of n nodes. Host and device emit identical tokens for identical
// inputs; the tree's next offset is offset + n + 1. One block per row: the
// walk is sequential, its vocabulary-wide steps (residuals, their sums in
// double precision, the draw) are spread over the block's threads.
//
// No CUDA headers needed (link specdec::cuda; a cudaStream_t is passed as void*).
#pragma once

#include <cstddef>
#include <cstdint>

#include "specdec/core/rng.hpp"
#include "specdec/core/status.hpp"
#include "specdec/core/types.hpp"

namespace specdec::cuda {

// Device memory the kernel needs for `batch` trees whose deepest node is at
// depth <= max_depth: the path's levels and two vocab-wide double rows per
// level. 0 when an argument is out of range.
std::size_t traversal_verification_workspace_bytes(std::int32_t batch, std::int32_t max_depth,
                                                   std::int64_t vocab);

// Enqueues traversal verification of `batch` trees of `nodes` nodes each on
// `stream` and returns without waiting. Every pointer is device memory:
//
//   parents         parent of each node, in [-1, i) for node i (-1: the root)
//   tokens          each node's token
//   slot_draws      how each slot's children were drafted (slot s at s + 1,
//                   the root at 0): 0 one-hot (deterministic), 1 i.i.d. from
//                   the slot's draft row, 2 without replacement from it
//                   (row_math::SlotDraw)
//   draft_probs     the draft row of each slot (slot s at s + 1), read for
//                   slots drawn 1 or 2; may be null when every slot is 0
//   target_probs    the target row after each slot (root first)
//   tree_nodes      nodes of each tree, in [0, nodes], the rest padding
//                   (its uniforms: j = 0 .. tree_nodes[b]); null: every
//                   tree has `nodes`
//   accepted_nodes  the accepted path, root's child first, then -1 padding
//   num_accepted    its length; -1 for a row the kernel refused
//                   (tree_nodes[b] outside [0, nodes], a parent out of
//                   order, a token outside [0, vocab), a draw not 0..2, a
//                   sampled slot without draft_probs, a node deeper than
//                   max_depth), whose emitted token is kNoToken
//   emitted         the token after the path (its residual draw or the bonus)
//   workspace       traversal_verification_workspace_bytes(batch, max_depth, vocab) bytes
//
// Rows are used as given (validate upstream, as the host rule does).
// Returns kInvalidArgument, before touching the device, when batch < 0, nodes
// < 0 or > 4096, max_depth < 0 or > nodes, vocab <= 0 or > 2^21, the
// sizes overflow, workspace_bytes is short, or (for batch > 0) a required
// pointer is null; kCudaError when the launch fails; kOk otherwise.
// With tree_streams (device memory, [batch]), tree b draws from
// tree_streams[b] instead (a request's own RandomStream as seed, stream
// and next offset: RandomStream::take), and `seed` and `offset` are unused.
Status traversal_verification(const std::int32_t* parents,     // [batch, nodes]
                              const TokenId* tokens,           // [batch, nodes]
                              const std::uint8_t* slot_draws,  // [batch, nodes + 1]
                              const float* draft_probs,        // [batch, nodes + 1, vocab] or null
                              const float* target_probs,       // [batch, nodes + 1, vocab]
                              const std::int32_t* tree_nodes,  // [batch] or null
                              std::int32_t* accepted_nodes,    // [batch, max_depth]
                              std::int32_t* num_accepted,      // [batch]
                              TokenId* emitted,                // [batch]
                              std::int32_t batch, std::int32_t nodes, std::int32_t max_depth,
                              std::int64_t vocab, void* workspace, std::size_t workspace_bytes,
                              std::uint64_t seed, std::uint64_t offset, void* stream = nullptr,
                              const PhiloxUniforms* tree_streams = nullptr);

}  // namespace specdec::cuda
