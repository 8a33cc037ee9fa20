// Batched greedy verification of token trees on a CUDA device (SpecInfer's
// VerifyGreedy, arXiv 2305.09781, §4.3, Algorithm 2; a chain is the one-path
// tree). Lossless for greedy decoding.
//
// The host rule GreedyAcceptance's semantics: from the root, descend into the
// first child (lowest node index) whose token is the argmax of the target row
// after its slot (ties to the lowest token id); the emitted token is the
// argmax after the last accepted node. Rows are read only for their argmax,
// so they may be logits or probabilities. One launch: blocks of 1024 threads
// each find the argmax of a segment of one row (a chunk of 8192 tokens at
// small batches, so that every SM has work); the last block of a tree to
// finish walks it.
//
// No CUDA headers needed (link specdec::cuda; a cudaStream_t is passed as void*).
#pragma once

#include <cstddef>
#include <cstdint>

#include "specdec/core/status.hpp"
#include "specdec/core/types.hpp"

namespace specdec::cuda {

// Enqueues greedy verification of `batch` trees on `stream`. Device memory:
//
//   target_rows     the row after each slot, root first     [batch, nodes + 1, vocab]
//   parents         parent of each node, in [-1, i) for node i   [batch, nodes]
//   tokens          each node's token                            [batch, nodes]
//   tree_nodes      nodes of each tree, in [0, nodes]; the rest is padding,
//                   whose rows are not read. Null: every tree has `nodes`  [batch]
//   accepted_nodes  the accepted path, root's child first, then -1 [batch, max_depth]
//   num_accepted    its length; -1 for a tree the kernel refused (a parent out
//                   of order, a token outside [0, vocab), a path deeper than
//                   max_depth, a NaN or +inf in a row on the path) [batch]
//   emitted         the argmax after the path; kNoToken when refused [batch]
//   workspace       greedy_verification_workspace_bytes(batch, nodes) bytes
//                   or more, 16-byte aligned, zeroed once after allocation:
//                   the kernel returns it to zero, so launches of any shape
//                   it is large enough for may reuse it, one at a time.
//
// Returns kInvalidArgument, before touching the device, when batch < 0 or
// > 65535, nodes < 0, batch * (nodes + 1) > 65535, max_depth < 0 or > nodes,
// vocab <= 0 or > the largest TokenId, or (for batch > 0) a required pointer
// is null, the workspace is misaligned or short; kCudaError when the launch
// fails; kOk otherwise.
Status greedy_verification(const float* target_rows, const std::int32_t* parents, const TokenId* tokens,
                           const std::int32_t* tree_nodes, std::int32_t* accepted_nodes,
                           std::int32_t* num_accepted, TokenId* emitted, std::int32_t batch,
                           std::int32_t nodes, std::int32_t max_depth, std::int64_t vocab, void* workspace,
                           std::size_t workspace_bytes, void* stream = nullptr);

// The workspace greedy_verification needs (0 for shapes it refuses): 256 KiB
// of counters, then 8 bytes per row.
std::size_t greedy_verification_workspace_bytes(std::int32_t batch, std::int32_t nodes);

}  // namespace specdec::cuda
