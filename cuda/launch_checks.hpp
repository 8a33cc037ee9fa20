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

}  // namespace specdec::cuda::detail
