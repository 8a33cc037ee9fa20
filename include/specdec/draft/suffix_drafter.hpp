// SuffixDecoding's drafter (Oliaro et al., arXiv 2411.04975, §3): no model;
// drafts come from two suffix indexes (draft/suffix_index.hpp):
//   - the request's own, over its prompt and everything it generated;
//   - a global one (SuffixCache), shared by the requests of a method, over the
//     outputs of earlier and concurrent requests, bounded by a number of
//     cached responses and evicted oldest first.
// A round speculates from both with the context's last tokens as the pattern
// and keeps the draft with the higher score (§3.2). Children are chosen by
// frequency, never drawn: every slot is deterministic (mode (c) of
// docs/methods.md), so any lossless rule keeps the target's law. The
// request's output is added to the global index as it is committed, so a
// request benefits from a concurrent one's text too.
#pragma once

#include <algorithm>
#include <cstdint>
#include <deque>
#include <span>
#include <unordered_set>
#include <vector>

#include <fmt/format.h>

#include "specdec/core/draft_tree.hpp"
#include "specdec/core/error.hpp"
#include "specdec/core/prob_matrix.hpp"
#include "specdec/core/round.hpp"
#include "specdec/core/sampling_params.hpp"
#include "specdec/draft/suffix_index.hpp"

namespace specdec {

// The global index of earlier outputs. Not thread-safe: the requests of one
// engine draft on one thread.
class SuffixCache {
 public:
  // max_cached: responses kept; the oldest is evicted beyond it (-1: no bound).
  explicit SuffixCache(std::int32_t max_depth = 32, std::int64_t max_cached = 256)
      : index_(max_depth), max_cached_(max_cached) {
    if (max_cached < -1)
      throw InvalidArgumentError(fmt::format("SuffixCache: max_cached must be >= -1, got {}", max_cached));
  }

  const SuffixIndex& index() const { return index_; }
  // A new response's slot, evicting the oldest beyond the bound; -1 when
  // nothing is cached (max_cached 0).
  std::int32_t start_response() {
    if (max_cached_ == 0) return -1;
    const std::int32_t id = next_id_++;
    order_.push_back(id);
    live_.insert(id);
    while (max_cached_ > 0 && static_cast<std::int64_t>(order_.size()) > max_cached_) {
      if (index_.holds(order_.front())) index_.remove(order_.front());
      live_.erase(order_.front());
      order_.pop_front();
    }
    return id;
  }
  // Appends to response `id` (ignored once evicted, or for -1).
  void append(std::int32_t id, std::span<const TokenId> tokens) {
    if (!live_.contains(id)) return;
    index_.extend(id, tokens);
  }

 private:
  SuffixIndex index_;
  std::int64_t max_cached_;
  std::deque<std::int32_t> order_;  // oldest first
  std::unordered_set<std::int32_t> live_;
  std::int32_t next_id_ = 0;
};

class SuffixDrafter {
 public:
  static constexpr bool kProvidesProbs =
      false;  // frequency estimates, not a distribution drafts are drawn from

  // cache: the method's global index (null: the request's own alone).
  SuffixDrafter(std::int64_t vocab_size, SuffixCache* cache, std::int32_t max_depth = 32,
                SuffixSpeculation speculation = {})
      : vocab_(vocab_size), cache_(cache), local_(max_depth), speculation_(speculation) {
    if (vocab_size < 1) throw InvalidArgumentError("SuffixDrafter: vocabulary size must be >= 1");
    speculation_.validate();
    if (max_depth <= speculation_.max_tokens)
      throw InvalidArgumentError(fmt::format(
          "SuffixDrafter: the index depth ({}) must exceed the drafted tokens ({}): {}", max_depth,
          speculation_.max_tokens, "a match of p tokens leaves depth - p levels for the draft"));
  }

  std::int64_t vocab_size() const { return vocab_; }
  const SuffixSpeculation& speculation() const { return speculation_; }
  const SuffixIndex& local() const { return local_; }
  std::span<const TokenId> context() const { return context_; }

  void begin(std::span<const TokenId> prompt, const SamplingParams& /*sampling*/ = {}) {
    check("begin", prompt);
    const std::vector<TokenId> copy(prompt.begin(), prompt.end());  // prompt may be context()
    end();
    local_.extend(0, copy);
    context_ = copy;
    response_ = cache_ != nullptr ? cache_->start_response() : -1;
  }

  void commit(std::span<const TokenId> tokens) {
    check("commit", tokens);
    const std::vector<TokenId> copy(tokens.begin(), tokens.end());
    local_.extend(0, copy);
    context_.insert(context_.end(), copy.begin(), copy.end());
    if (cache_ != nullptr) cache_->append(response_, copy);
  }

  // The request is over; its response stays in the global index.
  void end() {
    local_ = SuffixIndex(local_.max_depth());
    context_.clear();
    response_ = -1;
  }

  // The better of the two indexes' speculation trees below the committed
  // context, within `max_tokens` nodes (and the speculation's own bounds).
  SuffixDraft speculate(std::int32_t max_tokens) const {
    SuffixSpeculation o = speculation_;
    o.max_tokens = std::min(o.max_tokens, max_tokens);
    const std::span<const TokenId> pattern = tail(context_);
    SuffixDraft best = local_.speculate(pattern, o);
    if (cache_ != nullptr) {
      SuffixDraft global = cache_->index().speculate(pattern, o);
      if (global.score > best.score) best = std::move(global);
    }
    return best;
  }

  // The Drafter face: for each frontier slot, the continuations of the
  // committed context + the slot's path, with their frequency estimates (the
  // index with the longer match; ties to the request's own). A zero row: no
  // proposal.
  void propose(const DraftRequest& request, ProbMatrix& rows) {
    if (request.tree == nullptr) throw InvalidArgumentError("SuffixDrafter::propose: request has no tree");
    if (rows.num_rows() == 0 && rows.vocab() != vocab_) rows.resize(0, vocab_);
    std::vector<TokenId> pattern;
    for (const std::int32_t slot : request.frontier) {
      // The context's last depth tokens are all a pattern can use.
      const auto keep = std::min<std::size_t>(context_.size(), static_cast<std::size_t>(local_.max_depth()));
      pattern.assign(context_.end() - static_cast<std::ptrdiff_t>(keep), context_.end());
      for (const std::int32_t n : request.tree->path_to(slot)) pattern.push_back(request.tree->token(n));
      const auto p = tail(pattern);
      auto continuations = local_.continuations(p);
      if (cache_ != nullptr && cache_->index().match(p).second > local_.match(p).second)
        continuations = cache_->index().continuations(p);
      auto row = rows.append_row();
      for (const auto& [t, prob] : continuations) {
        if (t >= vocab_)
          throw ShapeError(
              fmt::format("SuffixDrafter: an index holds token {}, outside the vocabulary of {}", t, vocab_));
        row[static_cast<std::size_t>(t)] = prob;
      }
    }
  }

 private:
  // The pattern: the last depth - max_tokens tokens (at least one). A match
  // of p tokens leaves depth - p levels of the index to continue it, so a
  // longer pattern would match deeper and leave no room for the draft.
  std::span<const TokenId> tail(std::span<const TokenId> s) const {
    const auto longest = std::max(1, local_.max_depth() - speculation_.max_tokens);
    const auto n = std::min<std::size_t>(s.size(), static_cast<std::size_t>(longest));
    return s.subspan(s.size() - n);
  }
  void check(const char* who, std::span<const TokenId> tokens) const {
    for (const TokenId t : tokens)
      if (t < 0 || t >= vocab_)
        throw InvalidArgumentError(
            fmt::format("SuffixDrafter::{}: token {} outside the vocabulary of {}", who, t, vocab_));
  }

  std::int64_t vocab_;
  SuffixCache* cache_;
  SuffixIndex local_;
  SuffixSpeculation speculation_;
  std::vector<TokenId> context_;
  std::int32_t response_ = -1;
};

}  // namespace specdec
