// Argument checks and grid sizes shared by the kernels' launchers (the chain
// rules take the same inputs). Internal to specdec::cuda; needs no CUDA
// headers.
#pragma once

#include <cstdint>
#include <limits>

#include "specdec/core/macros.hpp"
#include "specdec/core/rng.hpp"
#include "specdec/core/types.hpp"

namespace specdec::cuda::detail {

inline constexpr int kThreadsPerBlock = 128;

// The uniforms tree (or chain) b draws: its own stream where the caller gave
// one per tree (tree_streams, device memory: a request's RandomStream as
// seed, stream and next offset), else Philox stream b of `seed` from
// `offset`.
SPECDEC_HOST_DEVICE PhiloxUniforms tree_uniforms(const PhiloxUniforms* tree_streams,
                                                        std::uint64_t seed, std::int64_t b,
                                                        std::uint64_t offset) {
  return tree_streams != nullptr ? tree_streams[b]
                                 : PhiloxUniforms{seed, static_cast<std::uint64_t>(b), offset};
}

// The current device's SM count (132 on an H100 SXM; that when the query
// fails): the launchers that split rows over blocks size their grids by it.
int multiprocessors();

// Chunks per block for kernels that split `rows` rows of `chunks` chunks over
// blocks (two per SM): as few as fill every SM (one at batch 1), as many as
// that allows at large batches (whole rows: fewer blocks, each streaming).
inline std::int64_t chunks_per_block(std::int64_t rows, std::int64_t chunks) {
  const std::int64_t slots = 2 * std::int64_t{multiprocessors()};
  const std::int64_t n = (rows * chunks + slots - 1) / slots;
  return n < 1 ? 1 : n > chunks ? chunks : n;
}

inline unsigned blocks_for(std::int64_t rows) {
  return static_cast<unsigned>((rows + kThreadsPerBlock - 1) / kThreadsPerBlock);
}

// Whether the chain launchers' arguments are usable (draft_probs is optional:
// null means deterministic drafts). See chain_speculative_sampling.hpp.
inline bool valid_chain_arguments(const TokenId* draft_tokens, const float* target_probs,
                                  const TokenId* output_tokens, const std::int32_t* num_accepted,
                                  std::int32_t batch, std::int32_t gamma, std::int64_t vocab) {
  if (batch < 0 || gamma < 0 || vocab <= 0) return false;
  if (gamma == std::numeric_limits<std::int32_t>::max()) return false;  // gamma + 1 rows
  if (vocab > std::numeric_limits<TokenId>::max()) return false;        // ids must fit a TokenId
  // batch * (gamma + 1) * vocab elements must be addressable with int64.
  const std::int64_t rows = static_cast<std::int64_t>(batch) * (static_cast<std::int64_t>(gamma) + 1);
  if (rows > 0 && vocab > std::numeric_limits<std::int64_t>::max() / rows) return false;
  if (batch == 0) return true;
  if (target_probs == nullptr || output_tokens == nullptr || num_accepted == nullptr) return false;
  if (gamma > 0 && draft_tokens == nullptr) return false;
  return true;
}

// A drafted token outside the vocabulary would index outside its rows: the
// row is flagged (all kNoToken, num_accepted -1) instead of sampled; the host
// rules throw there. Returns whether the row was flagged.
SPECDEC_HOST_DEVICE bool flag_bad_chain(const TokenId* tokens, std::int32_t gamma, std::int64_t vocab,
                                        TokenId* out, std::int32_t* num_accepted) {
  for (std::int32_t i = 0; i < gamma; ++i) {
    if (tokens[i] < 0 || tokens[i] >= vocab) {
      for (std::int32_t j = 0; j <= gamma; ++j) out[j] = kNoToken;
      *num_accepted = -1;
      return true;
    }
  }
  return false;
}

// Whether tree b of a FlatTrees layout is a chain the chain kernels can
// verify in place (cuda::chain_speculative_sampling_flat,
// cuda::block_verification_flat): n in [0, nodes] nodes with parents -1, 0,
// 1, ..., tokens in [0, vocab), each slot drawn 0..2 and, if sampled, with
// draft rows, and a path that fits max_depth.
SPECDEC_HOST_DEVICE bool valid_flat_chain(const std::int32_t* parents, const TokenId* tokens,
                                          const std::uint8_t* draws, bool have_draft_rows, std::int32_t n,
                                          std::int32_t nodes, std::int32_t max_depth, std::int64_t vocab) {
  if (n < 0 || n > nodes || n > max_depth) return false;
  for (std::int32_t i = 0; i < n; ++i) {
    if (parents[i] != i - 1 || tokens[i] < 0 || tokens[i] >= vocab) return false;
    if (draws[i] > 2 || (draws[i] != 0 && !have_draft_rows)) return false;  // slot i - 1, x_i's row
  }
  return true;
}

// The draft row of chain token i in a FlatTrees layout: its parent slot's,
// at row i of the tree's [nodes + 1, vocab] rows; null where the slot's child
// was chosen deterministically (q = one-hot), as the host rules read it.
struct FlatChainDraftRows {
  const float* base = nullptr;  // the tree's rows, or null: no draft rows
  const std::uint8_t* draws = nullptr;
  std::int64_t vocab = 0;
  SPECDEC_HOST_DEVICE const float* operator()(std::int64_t i) const {
    return base == nullptr || draws[i] == 0 ? nullptr : base + i * vocab;
  }
};

// Writes a flat chain's outcome as the tree kernels do: the accepted nodes
// 0..accepted-1, then -1 padding to max_depth; -1 accepted for a refused
// chain, whose emitted token is kNoToken.
SPECDEC_HOST_DEVICE void write_flat_chain(std::int32_t accepted, TokenId y, std::int32_t max_depth,
                                          std::int32_t* path, std::int32_t* num_accepted, TokenId* emitted) {
  for (std::int32_t j = 0; j < max_depth; ++j) path[j] = j < accepted ? j : -1;
  *num_accepted = accepted;
  *emitted = accepted < 0 ? kNoToken : y;
}

// Whether the flat chain launchers' arguments are usable (see
// chain_speculative_sampling_flat).
inline bool valid_flat_arguments(const std::int32_t* parents, const TokenId* tokens, const std::uint8_t* draws,
                                 const float* target_probs, const std::int32_t* accepted_nodes,
                                 const std::int32_t* num_accepted, const TokenId* emitted, std::int32_t batch,
                                 std::int32_t nodes, std::int32_t max_depth, std::int64_t vocab) {
  if (batch < 0 || nodes < 0 || nodes == std::numeric_limits<std::int32_t>::max() || max_depth < 0 ||
      max_depth > nodes || vocab <= 0 || vocab > std::numeric_limits<TokenId>::max())
    return false;
  const std::int64_t rows = static_cast<std::int64_t>(batch) * (static_cast<std::int64_t>(nodes) + 1);
  if (rows > 0 && vocab > std::numeric_limits<std::int64_t>::max() / rows) return false;
  if (batch == 0) return true;
  if (draws == nullptr || target_probs == nullptr || num_accepted == nullptr || emitted == nullptr) return false;
  if (nodes > 0 && (parents == nullptr || tokens == nullptr)) return false;
  if (max_depth > 0 && accepted_nodes == nullptr) return false;
  return true;
}

}  // namespace specdec::cuda::detail
