// What a feature-level draft head offers the drafters built on it
// (LyannaDrafter, EagleHeadDrafter): one transformer layer over target hidden
// states with its own cache, read out through the target's LM head. Host
// float spans in and out, so the drafters stay backend-free; the libtorch
// DraftHead (torch/draft_head.hpp) is the real one, tests use host fakes.
//
//   reset()                                     empty cache
//   advance(features, tokens, first_position, out)
//       commits one entry per token: fuse(features row i, E(tokens[i])) at
//       first_position + i; out = the last entry's output [hidden]
//   chain(h1, steps, position, out)            Lyanna: [h_1; ...; h_steps], h_{i+1} = Layer(h_i), staged
//   extend(parent_features, tokens, positions, mask, out)
//                                               EAGLE: one tree level, staged
//   logits(hidden rows, out)                    one GEMM over all rows
//   token_info()                                the collapsed token-info table (may be empty)
#pragma once

#include <chrono>
#include <concepts>
#include <cstdint>
#include <span>
#include <vector>

#include <fmt/format.h>

#include "specdec/core/bit_matrix.hpp"
#include "specdec/core/error.hpp"
#include "specdec/core/target_features.hpp"
#include "specdec/core/types.hpp"
#include "specdec/draft/token_info_table.hpp"

namespace specdec {

template <class H>
concept FeatureHead = requires(H& h, const H& ch, std::span<const float> in, std::span<const TokenId> tokens,
                               std::span<const std::int64_t> positions, const BitMatrix* mask, std::span<float> out,
                               std::int64_t n) {
  { ch.vocab_size() } -> std::convertible_to<std::int64_t>;
  { ch.hidden_size() } -> std::convertible_to<std::int64_t>;
  h.reset();
  h.advance(in, tokens, n, out);
  h.chain(in, n, n, out);
  h.extend(in, tokens, positions, mask, out);
  h.logits(in, out);
  { ch.token_info() } -> std::same_as<const TokenInfoTable&>;
};

namespace detail {

// What both feature drafters do on begin / commit: commit `tokens` to the head
// with the target's states of the tokens before them (one row each, from the
// verifier's feature sink); `out` gets the last entry's output. Returns the
// seconds it took (the commit share of the draft-time breakdown).
template <FeatureHead H>
double commit_to_head(H& head, const TargetFeatures& features, std::span<const TokenId> tokens,
                      std::int64_t first_position, std::vector<float>& out, const char* who) {
  const auto start = std::chrono::steady_clock::now();
  const auto d = head.hidden_size();
  if (features.rows() != static_cast<std::int64_t>(tokens.size()) || features.dim() != d)
    throw ShapeError(fmt::format("{}: {} committed tokens but {} target hidden rows of width {} (the verifier needs "
                                 "a feature sink)",
                                 who, tokens.size(), features.rows(), features.dim()));
  out.resize(static_cast<std::size_t>(d));
  head.advance(features.all(), tokens, first_position, out);
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
}

}  // namespace detail

}  // namespace specdec
