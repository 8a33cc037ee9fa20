// A host FeatureHead (draft/feature_head.hpp) over HashedContextModel targets,
// for engine tests of the Lyanna and EAGLE-head drafters: a "hidden state" is
// the last two tokens of a position's context (what HashedContextModel
// returns as its hidden state), so
//   advance: [h_prev[1], token]                 exact, like a perfect fuse
//   chain:   h_{i+1} = [h_i[1], argmax(draft logits of h_i)]   no drafted token enters
//   extend:  [parent[1], token]                 EAGLE: token-based
//   logits:  a noisy copy of the target's logits after the two tokens
// and a token-info table over a few hot tokens. advance() checks that row i
// of the target's states belongs to the token before tokens[i] (the verifier
// and the drafter must hand over aligned rows), and the positions it is given.
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>
#include <vector>

#include <fmt/format.h>

#include "specdec/core/bit_matrix.hpp"
#include "specdec/core/error.hpp"
#include "specdec/core/rng.hpp"
#include "specdec/core/warp.hpp"
#include "specdec/draft/token_info_table.hpp"
#include "specdec/testing/hashed_context_model.hpp"

namespace specdec::testing {

class FakeFeatureHead {
 public:
  // `draft`: the noisy copy of the target whose logits the head returns.
  // `layer` >= 0: the head reads target layer outputs, as an EAGLE-3 head
  // does: layers 0 .. layer of HashedContextModel, using layer `layer`.
  FakeFeatureHead(const HashedContextModel& draft, std::vector<TokenId> hot, std::uint64_t seed,
                  std::int32_t layer = -1)
      : draft_(&draft), layer_(layer) {
    const auto h = hot.size();
    std::vector<float> bias(h * h);
    RandomStream r(seed, 5);
    for (auto& b : bias) b = static_cast<float>(2.0 * r.uniform() - 1.0);
    table_ = TokenInfoTable(draft.vocab_size(), std::move(hot), std::move(bias));
  }

  std::int64_t vocab_size() const { return draft_->vocab_size(); }
  std::int64_t hidden_size() const { return 2; }
  std::int32_t feature_layer_first() const { return layer_ < 0 ? -1 : 0; }
  std::int32_t feature_layer_count() const { return layer_ < 0 ? 1 : layer_ + 1; }
  const TokenInfoTable& token_info() const { return table_; }
  std::int64_t advances() const { return advances_; }

  void reset() {
    last_token_ = -2;
    next_position_ = 1;
  }

  void advance(std::span<const float> features, std::span<const TokenId> tokens, std::int64_t first_position,
               std::span<float> out) {
    ++advances_;
    // The read layer's pair of each row, its layer offset removed.
    const auto width = static_cast<std::size_t>(2 * feature_layer_count());
    if (features.size() != width * tokens.size() || out.size() != 2)
      throw ShapeError("FakeFeatureHead::advance: sizes");
    std::vector<float> picked(2 * tokens.size());
    const float offset = static_cast<float>(std::max(layer_, 0)) * HashedContextModel::kLayerOffset;
    for (std::size_t i = 0; i < tokens.size(); ++i) {
      picked[2 * i] = features[i * width + width - 2];
      picked[2 * i + 1] = features[i * width + width - 1] - offset;
    }
    features = picked;
    if (first_position != next_position_)
      throw ShapeError(fmt::format("FakeFeatureHead::advance: position {}, expected {}", first_position, next_position_));
    for (std::size_t i = 0; i < tokens.size(); ++i) {
      const auto before = static_cast<TokenId>(features[2 * i + 1]);
      const auto expected = i == 0 ? last_token_ : tokens[i - 1];
      if (expected != -2 && before != expected)
        throw ShapeError(fmt::format("FakeFeatureHead::advance: state row {} is of token {}, expected {}", i, before,
                                     expected));
    }
    last_token_ = tokens.back();
    next_position_ = first_position + static_cast<std::int64_t>(tokens.size());
    out[0] = features[2 * (tokens.size() - 1) + 1];
    out[1] = static_cast<float>(tokens.back());
  }

  void chain(std::span<const float> h1, std::int64_t steps, std::int64_t /*position*/, std::span<float> out) {
    if (h1.size() != 2 || out.size() != static_cast<std::size_t>(2 * steps)) throw ShapeError("FakeFeatureHead::chain");
    out[0] = h1[0];
    out[1] = h1[1];
    for (std::int64_t i = 1; i < steps; ++i) {
      const auto prev = out.subspan(static_cast<std::size_t>(2 * (i - 1)), 2);
      out[static_cast<std::size_t>(2 * i)] = prev[1];
      out[static_cast<std::size_t>(2 * i + 1)] = static_cast<float>(argmax(logits_of(prev)));
    }
  }

  void extend(std::span<const float> parents, std::span<const TokenId> tokens, std::span<const std::int64_t>,
              const BitMatrix*, std::span<float> out) {
    for (std::size_t i = 0; i < tokens.size(); ++i) {
      out[2 * i] = parents[2 * i + 1];
      out[2 * i + 1] = static_cast<float>(tokens[i]);
    }
  }

  void logits(std::span<const float> h, std::span<float> out) {
    const auto v = static_cast<std::size_t>(vocab_size());
    for (std::size_t r = 0; r < h.size() / 2; ++r) {
      const auto l = logits_of(h.subspan(2 * r, 2));
      std::copy(l.begin(), l.end(), out.begin() + static_cast<std::ptrdiff_t>(r * v));
    }
  }

 private:
  std::vector<float> logits_of(std::span<const float> h) const {
    std::vector<TokenId> ctx;
    if (h[0] >= 0) ctx.push_back(static_cast<TokenId>(h[0]));
    ctx.push_back(static_cast<TokenId>(h[1]));
    return draft_->logits_after(ctx);
  }

  const HashedContextModel* draft_;
  std::int32_t layer_ = -1;
  TokenInfoTable table_;
  TokenId last_token_ = -2;
  std::int64_t next_position_ = 1;
  std::int64_t advances_ = 0;
};

}  // namespace specdec::testing
