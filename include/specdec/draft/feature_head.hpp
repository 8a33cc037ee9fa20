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

#include <concepts>
#include <cstdint>
#include <span>

#include "specdec/core/bit_matrix.hpp"
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

}  // namespace specdec
