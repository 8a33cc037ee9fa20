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
// A head may also read more of the target than its final-norm hidden state
// (EAGLE-3: several layers' outputs): feature_layer_first() and
// feature_layer_count() then name the span of target layers it reads
// (ModelVerifier::set_feature_layers), and advance()'s rows are that many
// hidden states wide. Without them a head reads the final-norm state alone.
#pragma once

#include <chrono>
#include <concepts>
#include <cstdint>
#include <span>
#include <utility>
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

// The target layers a head reads, as ModelVerifier::set_feature_layers
// takes them: (first, count); (-1, 1) is the final-norm hidden state.
template <FeatureHead H>
std::pair<std::int32_t, std::int32_t> feature_layers_of(const H& head) {
  if constexpr (requires {
                  { head.feature_layer_first() } -> std::convertible_to<std::int32_t>;
                  { head.feature_layer_count() } -> std::convertible_to<std::int32_t>;
                })
    return {head.feature_layer_first(), head.feature_layer_count()};
  else
    return {-1, 1};
}

// Floats of target features per committed token.
template <FeatureHead H>
std::int64_t feature_width_of(const H& head) {
  return static_cast<std::int64_t>(feature_layers_of(head).second) * head.hidden_size();
}

namespace detail {

// What both feature drafters keep between rounds: the head's committed
// entries follow the verified text, and the output of the last one (h_1 for
// Lyanna, the root's feature for EAGLE) starts the next round.
//   begin(prompt):   commits fuse(H_{i-1}, E(x_i)) for i = 1..L-1
//   commit(tokens):  commits the accepted tokens and the bonus, each with the
//                    target's state of the token before it (the verifier's
//                    feature sink: the root and the accepted path)
template <FeatureHead H>
class HeadCursor {
 public:
  HeadCursor(H& head, const char* who) : head_(&head), who_(who) {}

  H& head() const { return *head_; }
  // Where the verifier writes the target's hidden states of each commit.
  TargetFeatures& features() { return features_; }
  bool has_output() const { return has_output_; }
  std::span<const float> output() const { return output_; }
  std::int64_t root_position() const { return root_position_; }
  // Seconds spent committing (the commit share of the draft-time breakdown).
  double commit_seconds() const { return commit_seconds_; }

  void begin(std::span<const TokenId> prompt) {
    if (prompt.empty())
      throw InvalidArgumentError(fmt::format("{}: the prompt is empty (it needs at least one token)", who_));
    head_->reset();
    root_position_ = static_cast<std::int64_t>(prompt.size()) - 1;
    has_output_ = false;
    if (prompt.size() > 1) advance(prompt.subspan(1), 1);
  }

  void commit(std::span<const TokenId> tokens) {
    if (tokens.empty()) return;
    advance(tokens, root_position_ + 1);
    root_position_ += static_cast<std::int64_t>(tokens.size());
  }

 private:
  void advance(std::span<const TokenId> tokens, std::int64_t first_position) {
    const auto start = std::chrono::steady_clock::now();
    const auto width = feature_width_of(*head_);
    if (features_.rows() != static_cast<std::int64_t>(tokens.size()) || features_.dim() != width)
      throw ShapeError(
          fmt::format("{}: {} committed tokens but {} target hidden rows of width {}, {} expected "
                      "(the verifier needs a feature sink, set to the head's layers)",
                      who_, tokens.size(), features_.rows(), features_.dim(), width));
    output_.resize(static_cast<std::size_t>(head_->hidden_size()));
    head_->advance(features_.all(), tokens, first_position, output_);
    has_output_ = true;
    commit_seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  }

  H* head_;
  TargetFeatures features_;
  const char* who_;
  std::int64_t root_position_ = 0;
  bool has_output_ = false;
  std::vector<float> output_;
  double commit_seconds_ = 0.0;
};

}  // namespace detail

}  // namespace specdec
