// N-gram / prompt-lookup drafter (docs/methods.md; HF
// `PromptLookupCandidateGenerator`, apoorvumang/prompt-lookup-decoding): the
// next token of a context is guessed by finding an earlier occurrence of the
// context's last n tokens and copying the token that followed it. No model,
// no probabilities: each proposal is a one-hot row (or an all-zero row when
// nothing matches), so trees built from it are deterministic and verified by
// exact match (greedy verification) or by the target-only rule (mode (c) of
// docs/methods.md).
// Lossless with any lossless acceptance rule: it only changes what is drafted.
//
// Matching, for the context a frontier slot continues:
//   for n = max_ngram down to min_ngram: take the context's last n tokens; if
//   that n-gram occurred earlier, predict the token after its most recent
//   occurrence; the first (longest) n that matches wins.
// Differences from HF, on purpose:
//   * the MOST RECENT occurrence wins (HF takes the first, left to right):
//     locality — recently generated text (a variable name, a repeated line) is
//     the better predictor of what comes next than the prompt's first use;
//   * no linear scan: an index updated on commit maps each n-gram to the end
//     of its latest occurrence that has a following token, so a lookup costs
//     O(max_ngram) hash probes and token compares, whatever the context length.
// Deep slots (a node of the tree): the context is the committed tokens
// followed by the path root -> node. The path's last tokens join the query
// suffix, but the searchable text stays the committed context (and an
// occurrence is only usable if its successor is committed too): the path is
// speculative, and indexing it would mean undoing index entries every round.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <functional>
#include <limits>
#include <optional>
#include <span>
#include <unordered_map>
#include <vector>

#include <fmt/format.h>

#include "specdec/core/draft_tree.hpp"
#include "specdec/core/error.hpp"
#include "specdec/core/prob_matrix.hpp"
#include "specdec/core/round.hpp"
#include "specdec/core/types.hpp"

namespace specdec {

// Folds one token into an n-gram hash. N-grams are hashed from their last
// token backwards, so the hashes of every n in [1, max] ending at one position
// come out of one pass. Only a hint: lookups compare the actual tokens.
struct NgramHash {
  std::uint64_t operator()(std::uint64_t h, TokenId token) const {
    // splitmix64's finalizer over the previous hash and the token.
    std::uint64_t x =
        h ^ (static_cast<std::uint64_t>(static_cast<std::uint32_t>(token)) + 0x9E3779B97F4A7C15ull);
    x ^= x >> 30;
    x *= 0xBF58476D1CE4E5B9ull;
    x ^= x >> 27;
    x *= 0x94D049BB133111EBull;
    x ^= x >> 31;
    return x;
  }
};

// Where a lookup matched: the n-gram length, the end (one past the last
// token) of its most recent occurrence in the committed context, and the
// token at that end, which is the prediction.
struct NgramMatch {
  TokenId token = kNoToken;
  std::int32_t ngram = 0;
  std::int64_t end = 0;
};

// Hash is a template parameter only so that tests can force collisions; use
// the NgramDrafter alias.
template <class Hash = NgramHash>
class BasicNgramDrafter {
 public:
  static constexpr bool kProvidesProbs = false;  // one-hot guesses, not a sampled distribution
  // One hash map per n: a bound keeps a typo from allocating millions of maps.
  // (PLD uses n <= 3, HF n <= 2.)
  static constexpr std::int32_t kMaxNgramLimit = 64;

  // Defaults: the original PLD repository's max_ngram_size = 3, down to 1.
  explicit BasicNgramDrafter(std::int64_t vocab_size, std::int32_t min_ngram = 1, std::int32_t max_ngram = 3)
      : vocab_(vocab_size), min_n_(min_ngram), max_n_(max_ngram) {
    if (vocab_size < 1 || vocab_size > std::int64_t{std::numeric_limits<TokenId>::max()} + 1)
      throw InvalidArgumentError(
          fmt::format("NgramDrafter: vocabulary size must be in [1, 2^31], got {}", vocab_size));
    if (min_ngram < 1 || min_ngram > max_ngram || max_ngram > kMaxNgramLimit)
      throw InvalidArgumentError(fmt::format(
          "NgramDrafter: need 1 <= min_ngram <= max_ngram <= {}, got min_ngram = {}, max_ngram = {}",
          kMaxNgramLimit, min_ngram, max_ngram));
    index_.resize(static_cast<std::size_t>(max_n_ - min_n_ + 1));
  }

  std::int64_t vocab_size() const { return vocab_; }
  std::int32_t min_ngram() const { return min_n_; }
  std::int32_t max_ngram() const { return max_n_; }
  // The committed context: prompt + every committed token.
  std::span<const TokenId> context() const { return context_; }

  // Starts a new sequence whose context is `prompt` (may be empty; propose
  // then needs a commit first, since the tree's root is the last committed
  // token). Its rows are one-hot guesses whatever the request's sampling.
  void begin(std::span<const TokenId> prompt, const SamplingParams& /*sampling*/ = {}) {
    check_tokens("begin", prompt);
    if (aliases_context(prompt)) {  // e.g. begin(context()): copy before clearing
      const std::vector<TokenId> copy(prompt.begin(), prompt.end());
      begin(copy);
      return;
    }
    context_.clear();
    for (auto& m : index_) m.clear();
    append(prompt);
  }

  // Appends committed tokens (accepted drafts + bonus) and indexes the n-grams
  // that now have a successor.
  void commit(std::span<const TokenId> tokens) {
    check_tokens("commit", tokens);
    if (aliases_context(tokens)) {  // appending may reallocate what tokens points into
      const std::vector<TokenId> copy(tokens.begin(), tokens.end());
      append(copy);
      return;
    }
    append(tokens);
  }

  // The sequence is over: its index is freed.
  void end() {
    context_.clear();
    for (auto& m : index_) m.clear();
  }

  // Appends one row per frontier slot of request.tree, in frontier order:
  // one-hot (1.0f) at the predicted token, or all zero when nothing matches.
  // rows: [n, vocab] on entry (an empty matrix of any vocabulary is reset to
  // [0, vocab]); [n + frontier.size(), vocab] on return. Inputs are checked
  // before rows is touched.
  void propose(const DraftRequest& request, ProbMatrix& rows) {
    if (request.tree == nullptr) throw InvalidArgumentError("NgramDrafter::propose: request has no tree");
    const DraftTree& tree = *request.tree;
    if (context_.empty())
      throw InvalidArgumentError(
          "NgramDrafter::propose: the committed context is empty (begin with a prompt, or commit, first)");
    if (tree.root_token() != context_.back())
      throw InvalidArgumentError(
          fmt::format("NgramDrafter::propose: the tree's root token {} is not the last committed token {}",
                      tree.root_token(), context_.back()));
    if (rows.num_rows() > 0 && rows.vocab() != vocab_)
      throw ShapeError(fmt::format(
          "NgramDrafter::propose: rows hold {} rows of vocabulary {}, the drafter's vocabulary is {}",
          rows.num_rows(), rows.vocab(), vocab_));

    predictions_.clear();
    for (const std::int32_t slot : request.frontier) {
      // The slot's last tokens, last first: the path node -> root (every path
      // token is checked against the vocabulary, the first max_ngram kept).
      std::array<TokenId, kMaxNgramLimit> tail{};
      std::int32_t num_tail = 0;
      // (A slot outside [-1, tree.size()) throws InvalidTreeError from tree.token.)
      for (std::int32_t i = slot; i != DraftTree::kRoot; i = tree.parent(i)) {
        const TokenId t = tree.token(i);
        if (t >= vocab_)
          throw ShapeError(
              fmt::format("NgramDrafter::propose: tree node {} holds token {}, outside the vocabulary of {}",
                          i, t, vocab_));
        if (num_tail < max_n_) tail[static_cast<std::size_t>(num_tail++)] = t;
      }
      const auto m = lookup([&](std::int32_t k) { return tail[static_cast<std::size_t>(k)]; }, num_tail);
      predictions_.push_back(m ? m->token : kNoToken);
    }

    if (rows.num_rows() == 0 && rows.vocab() != vocab_) rows.resize(0, vocab_);
    for (const TokenId t : predictions_) {
      auto row = rows.append_row();
      if (t != kNoToken) row[static_cast<std::size_t>(t)] = 1.0f;
    }
  }

  // The match for the committed context followed by `extension` (e.g. a draft
  // path), or nullopt. Extension tokens are not checked against the vocabulary.
  std::optional<NgramMatch> find_match(std::span<const TokenId> extension = {}) const {
    const auto n_ext = static_cast<std::int64_t>(extension.size());
    const auto num_tail = static_cast<std::int32_t>(std::min<std::int64_t>(n_ext, max_n_));
    return lookup([&](std::int32_t k) { return extension[static_cast<std::size_t>(n_ext - 1 - k)]; },
                  num_tail);
  }

  // The predicted next token after the committed context + `extension`.
  std::optional<TokenId> predict(std::span<const TokenId> extension = {}) const {
    const auto m = find_match(extension);
    return m ? std::optional<TokenId>(m->token) : std::nullopt;
  }

 private:
  // Per n: n-gram hash -> end of the latest occurrence of each distinct
  // n-gram with that hash (a multimap, so a collision never hides an n-gram).
  using Index = std::unordered_multimap<std::uint64_t, std::int64_t>;

  void check_tokens(const char* where, std::span<const TokenId> tokens) const {
    for (std::size_t i = 0; i < tokens.size(); ++i)
      if (tokens[i] < 0 || tokens[i] >= vocab_)
        throw ShapeError(
            fmt::format("NgramDrafter::{}: token {} at index {} is outside the vocabulary [0, {})", where,
                        tokens[i], i, vocab_));
  }

  bool aliases_context(std::span<const TokenId> tokens) const {
    if (tokens.empty() || context_.empty()) return false;
    const std::less<const TokenId*> before;
    return before(tokens.data(), context_.data() + context_.size()) &&
           before(context_.data(), tokens.data() + tokens.size());
  }

  bool same_ngram(std::int64_t end_a, std::int64_t end_b, std::int32_t n) const {
    for (std::int64_t j = 1; j <= n; ++j)
      if (context_[static_cast<std::size_t>(end_a - j)] != context_[static_cast<std::size_t>(end_b - j)])
        return false;
    return true;
  }

  // An n-gram ending at e (exclusive) is indexed once context_[e] exists. The
  // old ends [.., old_size) were indexed already; the new ones are
  // [old_size, new_size), visited in order so later occurrences overwrite.
  void append(std::span<const TokenId> tokens) {
    const auto old_size = static_cast<std::int64_t>(context_.size());
    context_.insert(context_.end(), tokens.begin(), tokens.end());
    const auto new_size = static_cast<std::int64_t>(context_.size());
    for (std::int64_t e = std::max<std::int64_t>(old_size, min_n_); e < new_size; ++e) {
      std::uint64_t h = 0;
      const auto top = static_cast<std::int32_t>(std::min<std::int64_t>(e, max_n_));
      for (std::int32_t n = 1; n <= top; ++n) {
        h = hash_(h, context_[static_cast<std::size_t>(e - n)]);
        if (n < min_n_) continue;
        Index& index = index_[static_cast<std::size_t>(n - min_n_)];
        const auto [first, last] = index.equal_range(h);
        auto it = first;
        while (it != last && !same_ngram(it->second, e, n)) ++it;
        if (it != last)
          it->second = e;
        else
          index.emplace(h, e);
      }
    }
  }

  // The query is the committed context followed by `num_tail` tail tokens;
  // tail(k) is the k-th tail token from the end (k = 0: the last token).
  template <class Tail>
  std::optional<NgramMatch> lookup(Tail tail, std::int32_t num_tail) const {
    const auto size = static_cast<std::int64_t>(context_.size());
    // k-th token from the end of the query, k in [0, num_tail + size).
    auto back = [&](std::int32_t k) {
      return k < num_tail ? tail(k) : context_[static_cast<std::size_t>(size - 1 - (k - num_tail))];
    };
    const auto top = static_cast<std::int32_t>(std::min<std::int64_t>(max_n_, num_tail + size));
    std::array<std::uint64_t, kMaxNgramLimit + 1> hashes{};
    for (std::int32_t n = 1; n <= top; ++n)
      hashes[static_cast<std::size_t>(n)] = hash_(hashes[static_cast<std::size_t>(n - 1)], back(n - 1));
    for (std::int32_t n = top; n >= min_n_; --n) {
      const Index& index = index_[static_cast<std::size_t>(n - min_n_)];
      const auto [first, last] = index.equal_range(hashes[static_cast<std::size_t>(n)]);
      for (auto it = first; it != last; ++it) {
        const std::int64_t end = it->second;
        bool same = true;
        for (std::int32_t k = 0; k < n && same; ++k)
          same = context_[static_cast<std::size_t>(end - 1 - k)] == back(k);
        if (same) return NgramMatch{context_[static_cast<std::size_t>(end)], n, end};
      }
    }
    return std::nullopt;
  }

  std::int64_t vocab_;
  std::int32_t min_n_;
  std::int32_t max_n_;
  [[no_unique_address]] Hash hash_{};
  std::vector<TokenId> context_;
  std::vector<Index> index_;          // index_[n - min_ngram]
  std::vector<TokenId> predictions_;  // propose's scratch, reused across rounds
};

using NgramDrafter = BasicNgramDrafter<>;

}  // namespace specdec
