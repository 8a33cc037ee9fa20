// Lyanna's token-info sampling (Chen et al., arXiv 2602.21224, §5.2,
// Algorithm 1) and re-sampling (§5.3, Algorithm 2); docs/methods.md.
//
// Input: the one-pass logits l_1..l_N of a hidden-state chain (row i predicts
// depth i + 1 below the root) and the token-info table. Every branch at depth
// i reads the same row l_i; only the bias of its parent token differs:
//
//   BUILDSUBTREE(l_1..l_N, root, k):
//     Q = [root]
//     for i = 1..N:
//       for node in Q: the top-k tokens of softmax(l_i + tokenInfo(node.token))
//                      become its children, joint = node.joint * p
//       Q = the k children of this depth with the highest joint probability
//   then keep the B nodes of highest joint probability (a child never beats
//   its parent, so the kept set is a subtree; prune_to_budget).
//
// Children are top-k, chosen from the draft side only: kDeterministic, so the
// tree is verified greedily or by the target-only rule (mode (c) of
// docs/methods.md), lossless.
//
// Hot-token sparsity makes this cheap: the bias touches only the H hot
// columns, so per depth the cold columns' top-k and exp-sum are computed once
// and each expanded node costs O(H) (the paper's "vector add plus top-k").
//
// Re-sampling (Algorithm 2): after a rejection at depth a + 1 (a drafts
// accepted), the rows l_{a+2}..l_N are still valid for the bonus token t_gt
// at depth a + 1 (the chain never saw a drafted token), so
//   if N - a - 1 > r: T' = BUILDSUBTREE(l_{a+2..N}, t_gt, k), pruned to its budget.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <span>
#include <vector>

#include <fmt/format.h>

#include "specdec/concepts.hpp"
#include "specdec/core/draft_tree.hpp"
#include "specdec/core/draft_tree_ops.hpp"
#include "specdec/core/error.hpp"
#include "specdec/core/prob_matrix.hpp"
#include "specdec/core/warp.hpp"
#include "specdec/draft/token_info_table.hpp"

namespace specdec {

class TokenInfoTreeBuilder {
 public:
  // branch: k (children per expanded node and nodes expanded per depth);
  // budget: B, the nodes kept for verification.
  TokenInfoTreeBuilder(std::int32_t branch, std::int32_t budget)
      : default_branch_(branch), branch_(branch), budget_(budget) {
    if (branch <= 0 || budget <= 0)
      throw InvalidArgumentError(
          fmt::format("TokenInfoTreeBuilder: branch and budget must be > 0, got {} and {}", branch, budget));
  }

  std::int32_t branch() const { return default_branch_; }
  std::int32_t budget() const { return budget_; }

  // The round's TreeBuilder step: the drafter's N = budget.max_depth one-pass
  // rows, expanded with k = budget.branch (or the builder's own), pruned to
  // budget.verify_nodes. Children are deterministic, so no draft rows.
  template <OnePassDrafter D>
  void build(D& drafter, const DraftBudget& budget, TokenId root, RandomStream&, DraftTree& tree, ProbMatrix& rows) {
    if (budget.branch < 0) throw InvalidArgumentError(fmt::format("TokenInfoTreeBuilder: branch {} < 0", budget.branch));
    rows.resize(0, drafter.vocab_size());
    const ProbRows logits = drafter.one_pass_logits(budget.max_depth);
    grow(logits, drafter.token_info(), root, std::min(budget.verify_nodes, budget.max_nodes),
         budget.branch > 0 ? budget.branch : default_branch_, tree);
  }

  // Algorithm 1 over `logits` (row i: depth i + 1), pruned to `budget`
  // (default: the builder's). An empty `logits` gives an empty tree.
  void build(const ProbRows& logits, const TokenInfoTable& table, TokenId root, DraftTree& tree) {
    build(logits, table, root, budget_, tree);
  }

  void build(const ProbRows& logits, const TokenInfoTable& table, TokenId root, std::int32_t budget,
             DraftTree& tree) {
    grow(logits, table, root, budget, default_branch_, tree);
  }

  // Algorithm 2: the re-sampled tree under the bonus token `bonus` at depth
  // a + 1 of a round whose chain logits were `logits` (N rows), `accepted` =
  // a drafts accepted. Returns false (tree = just the root) unless more than
  // `threshold` (r) rows remain.
  bool resample(const ProbRows& logits, const TokenInfoTable& table, std::int32_t accepted, TokenId bonus,
                std::int32_t threshold, std::int32_t budget, DraftTree& tree) {
    if (accepted < 0 || threshold < 0)
      throw InvalidArgumentError(fmt::format("TokenInfoTreeBuilder::resample: accepted {} and threshold {} must be >= 0",
                                             accepted, threshold));
    tree.clear(bonus);
    const std::int64_t first = static_cast<std::int64_t>(accepted) + 1;  // row l_{a+2}
    const std::int64_t remaining = logits.num_rows() - first;
    if (remaining <= threshold || remaining <= 0) return false;
    const ProbRows rest(logits.row(first).data(), remaining, logits.vocab(), logits.row_stride());
    build(rest, table, bonus, budget, tree);
    return tree.size() > 0;
  }

  // Every candidate of the last build (before pruning).
  const DraftTree& pool() const { return pool_; }

 private:
  // Algorithm 1 with k = `branch` children per expanded node.
  void grow(const ProbRows& logits, const TokenInfoTable& table, TokenId root, std::int32_t budget,
            std::int32_t branch, DraftTree& tree) {
    branch_ = branch;  // read by the per-depth helpers below
    if (budget < 0) throw InvalidArgumentError(fmt::format("TokenInfoTreeBuilder: budget {} < 0", budget));
    if (!table.empty() && table.vocab() != logits.vocab() && logits.num_rows() > 0)
      throw ShapeError(fmt::format("TokenInfoTreeBuilder: logits of vocabulary {}, token-info table of {}",
                                   logits.vocab(), table.vocab()));
    pool_.clear(root);
    tree.clear(root);
    if (logits.num_rows() == 0 || budget == 0) return;
    frontier_.assign(1, DraftTree::kRoot);
    for (std::int64_t depth = 0; depth < logits.num_rows() && !frontier_.empty(); ++depth) {
      prepare_row(logits.row(depth), table, depth);
      candidates_.clear();
      for (const auto slot : frontier_) {
        const TokenId parent = slot == DraftTree::kRoot ? root : pool_.token(slot);
        top_children(logits.row(depth), table, parent);
        if (children_.empty()) continue;
        pool_.set_children_source(slot, -1, ChildMode::kDeterministic);
        for (const auto& c : children_) candidates_.push_back(pool_.add_node(slot, c.token, c.prob));
      }
      // Q <- TopkByJointProb(Q_next, k); ties to the earlier created node.
      const auto n_next = std::min<std::size_t>(static_cast<std::size_t>(branch_), candidates_.size());
      std::partial_sort(candidates_.begin(), candidates_.begin() + static_cast<std::ptrdiff_t>(n_next),
                        candidates_.end(), [&](std::int32_t a, std::int32_t b) {
                          const double sa = pool_.node(a).cum_logprob, sb = pool_.node(b).cum_logprob;
                          return sa > sb || (sa == sb && a < b);
                        });
      frontier_.assign(candidates_.begin(), candidates_.begin() + static_cast<std::ptrdiff_t>(n_next));
      std::sort(frontier_.begin(), frontier_.end());
    }
    tree = prune_to_budget(pool_, budget).tree;
  }

  struct Child {
    TokenId token;
    float value;  // biased logit
    float prob;
  };

  // Per depth: the best k tokens of the row and of its cold columns, and the
  // exp-sums of both, relative to the row's max (one pass for the checks and
  // the max, one vectorizable exp-sum, a top-k scan that rarely inserts, and
  // an O(H) gather for the hot part).
  void prepare_row(std::span<const float> row, const TokenInfoTable& table, std::int64_t depth) {
    constexpr float kInf = std::numeric_limits<float>::infinity();
    float row_max = -kInf;
    bool bad = false;
    for (const float v : row) {
      bad |= std::isnan(v) || v == kInf;
      row_max = std::max(row_max, v);
    }
    if (bad)
      for (std::size_t j = 0; j < row.size(); ++j)
        if (std::isnan(row[j]) || row[j] == kInf)
          throw InvalidDistributionError(
              fmt::format("TokenInfoTreeBuilder: logit {} of depth {} is {}", j, depth + 1, row[j]));
    if (row_max == -kInf)
      throw InvalidDistributionError(fmt::format("TokenInfoTreeBuilder: every logit of depth {} is -inf", depth + 1));
    float all_sum = 0.0f;
    for (const float v : row) all_sum += exp_nonpositive(v - row_max);
    double hot_sum = 0.0;
    for (const auto t : table.hot_tokens()) hot_sum += exp_nonpositive(row[static_cast<std::size_t>(t)] - row_max);
    all_top_.clear();
    cold_top_.clear();
    for (std::size_t j = 0; j < row.size(); ++j) {
      const float v = row[j];
      const bool all_full = static_cast<std::int32_t>(all_top_.size()) == branch_;
      const bool cold_full = static_cast<std::int32_t>(cold_top_.size()) == branch_;
      if ((all_full && !(v > all_top_.back().value)) && (cold_full && !(v > cold_top_.back().value))) continue;
      const auto t = static_cast<TokenId>(j);
      push_top(all_top_, t, v);
      if (table.hot_index(t) < 0) push_top(cold_top_, t, v);
    }
    row_max_ = row_max;
    // The cold columns' mass: the row's minus the hot ones' (never below 0;
    // none at all for a dense table, whatever the rounding).
    cold_sum_ = table.dense() ? 0.0 : std::max(0.0, static_cast<double>(all_sum) - hot_sum);
    all_lse_ = static_cast<double>(row_max) + std::log(static_cast<double>(all_sum));
  }

  // Keeps `top` the k best (value desc, token asc) of what it was offered.
  void push_top(std::vector<Child>& top, TokenId t, float v) const {
    if (v == -std::numeric_limits<float>::infinity()) return;
    if (static_cast<std::int32_t>(top.size()) == branch_ && !(v > top.back().value)) return;
    auto pos = top.end();
    while (pos != top.begin() && (pos - 1)->value < v) --pos;
    top.insert(pos, Child{t, v, 0.0f});
    if (static_cast<std::int32_t>(top.size()) > branch_) top.pop_back();
  }

  // children_ = top-k of softmax(row + bias(parent)) with their probabilities.
  void top_children(std::span<const float> row, const TokenInfoTable& table, TokenId parent) {
    children_.clear();
    const auto bias = table.bias(parent);
    if (bias.empty()) {  // cold parent or no token info: the row's own softmax
      for (const auto& c : all_top_)
        children_.push_back({c.token, c.value, probability(c.value, all_lse_)});
      return;
    }
    const auto hot = table.hot_tokens();
    hot_values_.resize(hot.size());
    float hot_max = -std::numeric_limits<float>::infinity();
    for (std::size_t j = 0; j < hot.size(); ++j) {
      hot_values_[j] = row[static_cast<std::size_t>(hot[j])] + bias[j];
      hot_max = std::max(hot_max, hot_values_[j]);
    }
    const float m = std::max(hot_max, row_max_);
    float hot_sum = 0.0f;
    for (const float v : hot_values_) hot_sum += exp_nonpositive(v - m);
    const double sum = cold_sum_ * std::exp(static_cast<double>(row_max_) - static_cast<double>(m)) + hot_sum;
    const double lse = static_cast<double>(m) + std::log(sum);
    merged_ = cold_top_;
    for (std::size_t j = 0; j < hot.size(); ++j)
      if (static_cast<std::int32_t>(merged_.size()) < branch_ || hot_values_[j] > merged_.back().value)
        push_top(merged_, hot[j], hot_values_[j]);
    // Equal values: the lower token id first, whichever list it came from.
    std::stable_sort(merged_.begin(), merged_.end(), [](const Child& a, const Child& b) {
      return a.value > b.value || (a.value == b.value && a.token < b.token);
    });
    for (const auto& c : merged_)
      children_.push_back({c.token, c.value, probability(c.value, lse)});
  }

  // e^(v - lse), rounded into [0, 1] (float rounding of a top token's mass
  // can land a hair above 1).
  static float probability(float value, double lse) {
    return std::min(1.0f, static_cast<float>(std::exp(static_cast<double>(value) - lse)));
  }

  std::int32_t default_branch_, branch_, budget_;  // branch_: the k of the build in progress
  DraftTree pool_;
  std::vector<std::int32_t> frontier_, candidates_;
  std::vector<Child> cold_top_, all_top_, merged_, children_;
  std::vector<float> hot_values_;
  float row_max_ = 0.0f;
  double cold_sum_ = 0.0, all_lse_ = 0.0;  // cold mass relative to row_max_; the row's log-sum-exp
};

}  // namespace specdec
