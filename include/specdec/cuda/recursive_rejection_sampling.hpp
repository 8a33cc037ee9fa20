// Batched recursive rejection sampling over token trees on a CUDA device
// (SpecInfer's multi-step speculative sampling, arXiv 2305.09781, §4.3,
// Algorithm 2, generalised per slot to how its children were drafted:
// i.i.d., without replacement (Sequoia, arXiv 2402.12374, §3.2) or
// deterministically). Lossless in every mode, and in mixed trees.
//
// The host rule RecursiveRejectionSampling's walk, draw for draw: tree b
// reads the uniforms philox_uniform(seed, b, offset + j), j = 0, 1, ..., one
// per child tested and one for the emitted token, exactly what the host rule
// draws from RandomStream(seed, b, offset); its row sums are
// bitexact::lane_sum and its draws the fixed-point inverse CDF, summed in
// parallel in the host's shape. So on the same rows the device emits the host
// rule's path and token. One block of 1024 threads per tree.
//
// No CUDA headers needed (link specdec::cuda; a cudaStream_t is passed as void*).
#pragma once

#include <cstdint>

#include "specdec/core/rng.hpp"
#include "specdec/core/status.hpp"
#include "specdec/core/types.hpp"

namespace specdec::cuda {

// Enqueues recursive rejection sampling of `batch` trees on `stream`. Device
// memory, laid out as for cuda::traversal_verification:
//
//   parents         parent of each node, in [-1, i) for node i   [batch, nodes]
//   tokens          each node's token                            [batch, nodes]
//   slot_draws      how each slot's children were drafted (slot s at s + 1,
//                   the root at 0): 0 deterministic, 1 i.i.d. from the slot's
//                   draft row, 2 without replacement from it   [batch, nodes + 1]
//   draft_probs     the draft row of each slot (slot s at s + 1), read for
//                   slots drawn 1 or 2; may be null when every slot is 0
//                                                   [batch, nodes + 1, vocab]
//   target_probs    the target row after each slot, root first
//                                                   [batch, nodes + 1, vocab]
//   tree_nodes      nodes of each tree, in [0, nodes]; the rest is padding.
//                   Null: every tree has `nodes`                   [batch]
//   accepted_nodes  the accepted path, root's child first, then -1 [batch, max_depth]
//   num_accepted    its length; -1 for a tree the kernel refused (a parent out
//                   of order, a token outside [0, vocab), a draw not 0..2, a
//                   sampled slot without draft rows, a tested child with no
//                   draft probability, repeated children drawn without
//                   replacement, more than 64 children at a slot, a path
//                   deeper than max_depth), whose emitted token is kNoToken
//                                                                  [batch]
//   emitted         the token after the path                       [batch]
//   draws_used      uniforms the tree consumed: its next offset is
//                   offset + draws_used                            [batch]
//
// Rows are used as given (validate upstream, as the host rule does).
// Returns kInvalidArgument, before touching the device, when batch < 0, nodes
// < 0, max_depth < 0 or > nodes, vocab <= 0 or > 2^21, the sizes overflow, or
// (for batch > 0) a required pointer is null; kCudaError when the launch
// fails; kOk otherwise.
// With tree_streams (device memory, [batch]), tree b draws from
// tree_streams[b] instead (a request's own RandomStream as seed, stream
// and next offset: RandomStream::take), and `seed` and `offset` are unused.
Status recursive_rejection_sampling(const std::int32_t* parents, const TokenId* tokens,
                                    const std::uint8_t* slot_draws, const float* draft_probs,
                                    const float* target_probs, const std::int32_t* tree_nodes,
                                    std::int32_t* accepted_nodes, std::int32_t* num_accepted,
                                    TokenId* emitted, std::int32_t* draws_used, std::int32_t batch,
                                    std::int32_t nodes, std::int32_t max_depth, std::int64_t vocab,
                                    std::uint64_t seed, std::uint64_t offset, void* stream = nullptr,
                                    const PhiloxUniforms* tree_streams = nullptr);

}  // namespace specdec::cuda
