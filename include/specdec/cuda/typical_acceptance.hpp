// Batched typical acceptance over token trees on a CUDA device (Medusa, Cai
// et al., arXiv 2401.10774, §2.3.1). LOSSY: the output is not distributed as
// the target's (the host rule TypicalAcceptance says how it decides).
//
// The host rule's decisions, to the bit: a node is accepted when its parent
// is and its target probability exceeds min(posterior_threshold,
// posterior_alpha * exp(-H(P))), with the entropy's logarithms, row sum and
// exponential from bitexact.hpp; the deepest accepted node wins, ties to the
// larger sum of log P on its path, then to the lower index; the bonus token
// is a draw from the row after it with uniform philox_uniform(seed, b,
// offset), the one uniform tree b uses. One block of 1024 threads per tree.
//
// No CUDA headers needed (link specdec::cuda; a cudaStream_t is passed as void*).
#pragma once

#include <cstdint>

#include "specdec/core/rng.hpp"
#include "specdec/core/status.hpp"
#include "specdec/core/types.hpp"

namespace specdec::cuda {

// Device memory, laid out as for cuda::greedy_verification (cuda::FlatTrees):
// parents, tokens [batch, nodes]; tree_nodes [batch] or null; target_probs
// [batch, nodes + 1, vocab] (probabilities, used as given); accepted_nodes
// [batch, max_depth]; num_accepted [batch] (-1 for a tree the kernel refused:
// a parent out of order, a token outside [0, vocab), more than 256 nodes, a
// path deeper than max_depth); emitted [batch].
//
// Returns kInvalidArgument, before touching the device, when batch < 0, nodes
// < 0, max_depth < 0 or > nodes, vocab <= 0 or > 2^21, posterior_threshold
// outside (0, 1], posterior_alpha not finite and > 0, the sizes overflow, or
// (for batch > 0) a required pointer is null; kCudaError when the launch
// fails; kOk otherwise.
// With tree_streams (device memory, [batch]), tree b draws from
// tree_streams[b] instead (a request's own RandomStream as seed, stream
// and next offset: RandomStream::take), and `seed` and `offset` are unused.
Status typical_acceptance(const std::int32_t* parents, const TokenId* tokens, const float* target_probs,
                          const std::int32_t* tree_nodes, std::int32_t* accepted_nodes,
                          std::int32_t* num_accepted, TokenId* emitted, std::int32_t batch,
                          std::int32_t nodes, std::int32_t max_depth, std::int64_t vocab,
                          float posterior_threshold, float posterior_alpha, std::uint64_t seed,
                          std::uint64_t offset, void* stream = nullptr,
                          const PhiloxUniforms* tree_streams = nullptr);

}  // namespace specdec::cuda
