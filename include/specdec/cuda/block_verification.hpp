// Batched block verification on a CUDA device (Sun et al., arXiv 2403.10444,
// Algorithm 2). Lossless.
//
// Each batch row (one block of 1024 threads) computes what
// row_math::block_verification_row computes, the function the host rule
// BlockVerification runs: the same tests, its vocabulary sums in
// bitexact::lane_sum's shape, the same fixed-point draws and the same Philox
// draws: row b's j-th
// uniform (j in [0, gamma]) is philox_uniform(seed, b, offset + j), what the
// host rule draws from a RandomStream(seed, b, offset). Host and device emit
// identical tokens for identical inputs; the next call's offset is
// offset + gamma + 1.
//
// Arguments, their layout, the flagging of out-of-vocabulary drafts and the
// returned Status are those of cuda::chain_speculative_sampling (vocab up to
// 2^21; rows used as given: validate upstream). No CUDA headers needed.
#pragma once

#include <cstdint>

#include "specdec/core/rng.hpp"
#include "specdec/core/status.hpp"
#include "specdec/core/types.hpp"

namespace specdec::cuda {

// With tree_streams (device memory, [batch]), tree b draws from
// tree_streams[b] instead (a request's own RandomStream as seed, stream
// and next offset: RandomStream::take), and `seed` and `offset` are unused.
Status block_verification(const float* draft_probs,     // [batch, gamma, vocab], or null: one-hot drafts
                          const TokenId* draft_tokens,  // [batch, gamma]
                          const float* target_probs,    // [batch, gamma + 1, vocab]
                          TokenId* output_tokens,       // [batch, gamma + 1]
                          std::int32_t* num_accepted,   // [batch]
                          std::int32_t batch, std::int32_t gamma, std::int64_t vocab, std::uint64_t seed,
                          std::uint64_t offset, void* stream = nullptr,
                          const PhiloxUniforms* tree_streams = nullptr);

// The same rule over chains laid out as FlatTrees, with the arguments,
// draws and refusals of cuda::chain_speculative_sampling_flat: chain b draws
// tree_nodes[b] + 1 uniforms.
Status block_verification_flat(const std::int32_t* parents,     // [batch, nodes]
                               const TokenId* tokens,           // [batch, nodes]
                               const std::uint8_t* slot_draws,  // [batch, nodes + 1]
                               const float* draft_probs,        // [batch, nodes + 1, vocab] or null
                               const float* target_probs,       // [batch, nodes + 1, vocab]
                               const std::int32_t* tree_nodes,  // [batch] or null
                               std::int32_t* accepted_nodes,    // [batch, max_depth]
                               std::int32_t* num_accepted,      // [batch]
                               TokenId* emitted,                // [batch]
                               std::int32_t batch, std::int32_t nodes, std::int32_t max_depth, std::int64_t vocab,
                               std::uint64_t seed, std::uint64_t offset, void* stream = nullptr,
                               const PhiloxUniforms* tree_streams = nullptr);

}  // namespace specdec::cuda
