// Batched chain speculative sampling on a CUDA device (Leviathan et al., arXiv
// 2211.17192, Algorithm 1; Chen et al., arXiv 2302.01318, Algorithm 2).
// Lossless.
//
// Each batch row (one block of threads) computes what
// row_math::chain_speculative_sampling_row computes, the function the host
// rule SpeculativeSampling runs: the same acceptance tests and the same
// fixed-point inverse-CDF draw, summed in parallel (exact in any order). It
// uses the same Philox draws: batch row b draws from Philox stream b starting
// at `offset`, i.e. its j-th uniform
// (j in [0, gamma]) is philox_uniform(seed, b, offset + j), exactly what the
// host rule draws from a RandomStream(seed, b, offset). Host and device
// therefore emit identical tokens for identical inputs. Every row consumes
// gamma + 1 uniforms whatever it accepts, so the next call's offset is
// offset + gamma + 1.
//
// This header declares host launchers only and needs no CUDA headers (link
// specdec::cuda; a cudaStream_t is passed as void*).
#pragma once

#include <cstddef>
#include <cstdint>

#include "specdec/core/rng.hpp"
#include "specdec/core/status.hpp"
#include "specdec/core/types.hpp"

namespace specdec::cuda {

// Enqueues chain speculative sampling of `batch` independent sequences on
// `stream` (null: the legacy default stream) and returns without waiting.
// Every pointer is device memory, rows densely packed (row stride = vocab).
//
//   draft_probs    q_i: the distribution each drafted token was drawn from,
//                  or null when every draft was chosen deterministically
//                  (q_i = one-hot at the drafted token)
//   draft_tokens   x_1..x_gamma of each row
//   target_probs   p_0..p_gamma of each row (p_gamma: the bonus row)
//   output_tokens  the accepted drafts, then the one emitted token (the
//                  residual draw or the bonus), then kNoToken padding
//   num_accepted   accepted drafts per row, in [0, gamma]
//
// Rows are used as given: like the row function, the kernel does not check
// that they are distributions (the host rule does; validate upstream). It
// does check each drafted token: a row with a token outside [0, vocab) is not
// sampled, its output is all kNoToken and its num_accepted is -1. A target
// row with no mass at the emitted position yields kNoToken there.
//
// Returns kInvalidArgument, before touching the device, when batch < 0,
// gamma < 0, vocab <= 0, vocab > 2^21, batch * (gamma + 1) *
// vocab overflows int64, or (for batch > 0) target_probs, output_tokens,
// num_accepted or (for gamma > 0) draft_tokens is null; kCudaError when the
// launch fails (the kernel's own faults surface at the next synchronisation,
// as for any asynchronous launch); kOk otherwise. batch == 0 launches nothing.
// With tree_streams (device memory, [batch]), tree b draws from
// tree_streams[b] instead (a request's own RandomStream as seed, stream
// and next offset: RandomStream::take), and `seed` and `offset` are unused.
Status chain_speculative_sampling(const float* draft_probs,     // [batch, gamma, vocab]
                                  const TokenId* draft_tokens,  // [batch, gamma]
                                  const float* target_probs,    // [batch, gamma + 1, vocab]
                                  TokenId* output_tokens,       // [batch, gamma + 1]
                                  std::int32_t* num_accepted,   // [batch]
                                  std::int32_t batch, std::int32_t gamma, std::int64_t vocab,
                                  std::uint64_t seed, std::uint64_t offset, void* stream = nullptr,
                                  const PhiloxUniforms* tree_streams = nullptr);

// The same rule over chains laid out as FlatTrees (the device round's
// layout, cuda::recursive_rejection_sampling's arguments): tree b holds a
// chain of tree_nodes[b] drafts (null: `nodes` each), node i the child of
// node i - 1, padded to `nodes`; x_i's draft row is its parent slot's (row i
// of the tree's [nodes + 1, vocab] rows), read where slot_draws[i] != 0 and
// one-hot where it is 0, as the host rule reads a tree's recorded children.
// Chain b draws tree_nodes[b] + 1 uniforms. The outcome is written as the
// tree kernels write it (accepted_nodes: 0, 1, ..., then -1; num_accepted;
// emitted); num_accepted is -1 and emitted kNoToken for a tree the kernel
// refused (not a chain, a token outside [0, vocab), a draw not 0..2, a
// sampled slot without draft rows, longer than max_depth). Returns
// kInvalidArgument, before touching the device, as for traversal
// verification's arguments (vocab up to 2^21).
Status chain_speculative_sampling_flat(const std::int32_t* parents,     // [batch, nodes]
                                       const TokenId* tokens,           // [batch, nodes]
                                       const std::uint8_t* slot_draws,  // [batch, nodes + 1]
                                       const float* draft_probs,        // [batch, nodes + 1, vocab] or null
                                       const float* target_probs,       // [batch, nodes + 1, vocab]
                                       const std::int32_t* tree_nodes,  // [batch] or null
                                       std::int32_t* accepted_nodes,    // [batch, max_depth]
                                       std::int32_t* num_accepted,      // [batch]
                                       TokenId* emitted,                // [batch]
                                       std::int32_t batch, std::int32_t nodes, std::int32_t max_depth,
                                       std::int64_t vocab, std::uint64_t seed, std::uint64_t offset,
                                       void* stream = nullptr, const PhiloxUniforms* tree_streams = nullptr);

// Chain speculative sampling straight from the target's logits: what
// warp_rows at each request's temperature (no top-k, no top-p) followed by
// chain_speculative_sampling computes, token for token, without writing the
// warped rows. Two launches read the logits once, split into chunks of 8192
// over every SM (bitexact.hpp's chunked softmax): one computes each chunk's
// softmax statistics and, in the last block of a request, its acceptance
// tests; the other draws the emitted token from the row it stopped at.
//
//   draft_probs    q_i, warped (as for chain_speculative_sampling), or null
//   draft_tokens   x_1..x_gamma of each request                [batch, gamma]
//   target_logits  the target's logits, rows 0..gamma   [batch, gamma + 1, vocab]
//   temperatures   each request's temperature; 0: greedy (one-hot rows) [batch]
//   output_tokens, num_accepted   as for chain_speculative_sampling
//   workspace      at least chain_from_logits_workspace_bytes(batch, gamma,
//                  vocab) bytes of device memory, 16-byte aligned, zeroed
//                  once after allocation: the kernels return its counters to
//                  zero, so launches of any shape it is large enough for may
//                  reuse it, one at a time (about 0.5 MB of counters, then
//                  the launch's statistics).
//
// Request b draws from Philox stream b at `offset`, gamma + 1 uniforms, as in
// chain_speculative_sampling. A request is flagged (all kNoToken, num_accepted
// -1) when a drafted token is outside the vocabulary, its temperature is not
// finite or is negative, or any of its target rows holds a NaN or +inf logit
// or has no finite logit (where warp_rows reports a row status).
//
// Returns kInvalidArgument, before touching the device, for the arguments
// chain_speculative_sampling refuses, and when gamma > 31, vocab > 2^18,
// batch * (gamma + 1) > 65535, (for batch > 0) temperatures or workspace is
// null or workspace is misaligned, or workspace_bytes is short; kCudaError when a launch
// fails; kOk otherwise.
// With tree_streams (device memory, [batch]), tree b draws from
// tree_streams[b] instead (a request's own RandomStream as seed, stream
// and next offset: RandomStream::take), and `seed` and `offset` are unused.
Status chain_speculative_sampling_from_logits(const float* draft_probs,     // [batch, gamma, vocab]
                                              const TokenId* draft_tokens,  // [batch, gamma]
                                              const float* target_logits,   // [batch, gamma + 1, vocab]
                                              const float* temperatures,    // [batch]
                                              TokenId* output_tokens,       // [batch, gamma + 1]
                                              std::int32_t* num_accepted,   // [batch]
                                              std::int32_t batch, std::int32_t gamma, std::int64_t vocab,
                                              std::uint64_t seed, std::uint64_t offset, void* workspace,
                                              std::size_t workspace_bytes, void* stream = nullptr,
                                              const PhiloxUniforms* tree_streams = nullptr);

// The workspace chain_speculative_sampling_from_logits needs; 0 for shapes it
// refuses.
std::size_t chain_from_logits_workspace_bytes(std::int32_t batch, std::int32_t gamma, std::int64_t vocab);

// The number of CUDA devices visible to this process, for callers (tests)
// that must know whether one exists without including CUDA headers. On
// failure (no driver, no device, ...) sets *count to 0 and returns kCudaError;
// kInvalidArgument when count is null.
Status cuda_device_count(int* count);

}  // namespace specdec::cuda
