// Lyanna's token-info table (arXiv 2602.21224, §5.1, §6.1): the
// collapsed token-info embedding RMSNorm(E'(t)), a logit bias for the token
// that follows t, looked up instead of computed.
//
// Hot-token sparsity (§6.1): the table keeps rows (conditioning tokens) and
// columns (biased logits) only for the H most frequent tokens, so it holds
// H x H entries instead of |V| x |V|. A cold parent gets no bias, and a cold
// column is never biased. Dense is the special case H = |V| with hot ids
// 0..|V|-1.
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "specdec/core/error.hpp"
#include "specdec/core/types.hpp"

namespace specdec {

class TokenInfoTable {
 public:
  TokenInfoTable() = default;

  // `hot`: the H token ids with token info (distinct, each < vocab); `bias`:
  // H x H row-major, row i = the bias for parent hot[i], column j = the bias
  // of logit hot[j].
  TokenInfoTable(std::int64_t vocab, std::vector<TokenId> hot, std::vector<float> bias)
      : vocab_(vocab), hot_(std::move(hot)), bias_(std::move(bias)), index_(static_cast<std::size_t>(vocab), -1) {
    const auto h = static_cast<std::int64_t>(hot_.size());
    if (vocab <= 0) throw InvalidArgumentError(fmt::format("TokenInfoTable: vocabulary size {} must be > 0", vocab));
    if (static_cast<std::int64_t>(bias_.size()) != h * h)
      throw ShapeError(fmt::format("TokenInfoTable: {} hot tokens need a {}x{} table, got {} entries", h, h, h,
                                   bias_.size()));
    for (std::int64_t i = 0; i < h; ++i) {
      const auto t = hot_[static_cast<std::size_t>(i)];
      if (t < 0 || t >= vocab)
        throw InvalidArgumentError(fmt::format("TokenInfoTable: hot token {} is outside the vocabulary of {}", t, vocab));
      auto& slot = index_[static_cast<std::size_t>(t)];
      if (slot >= 0) throw InvalidArgumentError(fmt::format("TokenInfoTable: hot token {} is listed twice", t));
      slot = static_cast<std::int32_t>(i);
    }
  }

  bool empty() const { return hot_.empty(); }
  std::int64_t vocab() const { return vocab_; }
  std::int64_t num_hot() const { return static_cast<std::int64_t>(hot_.size()); }
  bool dense() const { return num_hot() == vocab_; }
  std::span<const TokenId> hot_tokens() const { return hot_; }
  // Row of `token` in the table, -1 for a cold token.
  std::int32_t hot_index(TokenId token) const {
    return token >= 0 && token < vocab_ ? index_[static_cast<std::size_t>(token)] : -1;
  }
  // The bias over the hot columns for parent `token`; empty for a cold parent.
  std::span<const float> bias(TokenId token) const {
    const auto i = hot_index(token);
    if (i < 0) return {};
    const auto h = static_cast<std::size_t>(num_hot());
    return std::span(bias_).subspan(static_cast<std::size_t>(i) * h, h);
  }
  // l += bias(parent) on the hot columns of a full-vocabulary logit row (an
  // empty table, no token info, adds nothing).
  void add_to(TokenId parent, std::span<float> logits) const {
    if (empty()) return;
    if (static_cast<std::int64_t>(logits.size()) != vocab_)
      throw ShapeError(fmt::format("TokenInfoTable: logit row of {} entries, vocabulary {}", logits.size(), vocab_));
    const auto b = bias(parent);
    for (std::size_t j = 0; j < b.size(); ++j) logits[static_cast<std::size_t>(hot_[j])] += b[j];
  }

  // Bytes of the table as stored here (float32), and of the dense |V| x |V|
  // table it replaces.
  std::int64_t memory_bytes() const { return num_hot() * num_hot() * 4; }
  std::int64_t dense_memory_bytes() const { return vocab_ * vocab_ * 4; }

 private:
  std::int64_t vocab_ = 0;
  std::vector<TokenId> hot_;
  std::vector<float> bias_;
  std::vector<std::int32_t> index_;  // token -> row, -1 = cold
};

// Token counts of a corpus, and the H most frequent ids (ties: smaller id
// first): the hot set of §6.1.
inline std::vector<std::int64_t> count_tokens(std::span<const std::uint16_t> tokens, std::int64_t vocab) {
  std::vector<std::int64_t> counts(static_cast<std::size_t>(vocab), 0);
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    if (tokens[i] >= vocab)
      throw InvalidArgumentError(
          fmt::format("count_tokens: token {} at position {} is outside the vocabulary of {}", tokens[i], i, vocab));
    ++counts[tokens[i]];
  }
  return counts;
}

inline std::vector<TokenId> most_frequent_tokens(std::span<const std::int64_t> counts, std::int64_t how_many) {
  if (how_many <= 0 || how_many > static_cast<std::int64_t>(counts.size()))
    throw InvalidArgumentError(fmt::format("most_frequent_tokens: asked for {} of a vocabulary of {}", how_many,
                                           counts.size()));
  std::vector<TokenId> ids(counts.size());
  for (std::size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<TokenId>(i);
  std::stable_sort(ids.begin(), ids.end(), [&](TokenId a, TokenId b) {
    return counts[static_cast<std::size_t>(a)] > counts[static_cast<std::size_t>(b)];
  });
  ids.resize(static_cast<std::size_t>(how_many));
  return ids;
}

}  // namespace specdec
