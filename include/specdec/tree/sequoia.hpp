// Sequoia's tree construction (Chen et al., arXiv 2402.12374, §3.1.1; code
// tree_search.py): measure the positional acceptance vector p (Definition 3.2:
// p_k = probability that the k-th child of an accepted node is the one
// accepted), then pick the static shape that maximises the expected number of
// accepted drafts Σ_v Π_{path} p_rank under a node budget and a depth limit,
// by dynamic programming (Algorithm 1, with the depth bound of Algorithm 4).
// The shape is drafted by StaticTreeBuilder.
//
// Ranks here are 0-based: p[0] is the paper's p_1.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <deque>
#include <limits>
#include <span>
#include <string_view>
#include <tuple>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "specdec/core/draft_tree.hpp"
#include "specdec/core/error.hpp"
#include "specdec/core/verify_result.hpp"
#include "specdec/tree/static_tree_builder.hpp"

namespace specdec {

// Accumulates which child an acceptance rule accepted at each step (Sequoia's
// tests/test_accept.py: branch_prob[b] += 1, "none" in the last slot). A step
// is one slot whose children the rule tested (VerifyResult::depth_accepted);
// its outcome is the rank (sibling position) of the accepted child, or none.
//
// Estimator: p_k = count_k / exposure_k, where exposure_k counts the steps
// whose slot had more than k children. Whether the k-th child is accepted
// depends only on children 0..k (the rules test siblings in order), so this
// is unbiased for trees of any widths; when every observed slot has at least
// probabilities().size() children — Sequoia measures on a fixed-width tree —
// it is Sequoia's count_k / steps with the none slot dropped.
class PositionalAcceptance {
 public:
  // Throws InvalidArgumentError when `result` is not a walk of `tree` (a path
  // from the root, one depth_accepted entry per tested slot); nothing is
  // counted then.
  void observe(const DraftTree& tree, const VerifyResult& result) {
    const auto& acc = result.accepted_nodes;
    const auto& outcomes = result.depth_accepted;
    const auto num_acc = acc.size();
    if (outcomes.size() != num_acc && outcomes.size() != num_acc + 1)
      throw InvalidArgumentError(fmt::format(
          "PositionalAcceptance::observe: {} accepted nodes but {} depth outcomes (expected {} or {})",
          num_acc, outcomes.size(), num_acc, num_acc + 1));
    steps_.clear();  // (width, rank or -1) per tested slot
    std::int32_t slot = DraftTree::kRoot;
    for (std::size_t d = 0; d < outcomes.size(); ++d) {
      const bool accepted = d < num_acc;
      const auto width = tree.num_children(slot);
      if (width == 0)
        throw InvalidArgumentError(fmt::format(
            "PositionalAcceptance::observe: depth {} was tested but slot {} has no children", d + 1, slot));
      if (outcomes[d] != (accepted ? 1 : 0))
        throw InvalidArgumentError(fmt::format(
            "PositionalAcceptance::observe: depth {} outcome is {} but {} node was accepted there", d + 1,
            static_cast<int>(outcomes[d]), accepted ? "a" : "no"));
      std::int32_t rank = -1;
      if (accepted) {
        const auto node = acc[d];
        if (node < 0 || node >= tree.size() || tree.parent(node) != slot)
          throw InvalidArgumentError(fmt::format(
              "PositionalAcceptance::observe: accepted node {} at depth {} is not a child of slot {}", node,
              d + 1, slot));
        rank = 0;
        for (auto c = tree.first_child(slot); c != node; c = tree.next_sibling(c)) ++rank;
        slot = node;
      }
      steps_.emplace_back(width, rank);
    }
    for (const auto& [width, rank] : steps_) {
      if (exposures_.size() < static_cast<std::size_t>(width)) {
        exposures_.resize(static_cast<std::size_t>(width), 0);
        counts_.resize(static_cast<std::size_t>(width), 0);
      }
      for (std::int32_t k = 0; k < width; ++k) ++exposures_[static_cast<std::size_t>(k)];
      ++num_steps_;
      if (rank >= 0)
        ++counts_[static_cast<std::size_t>(rank)];
      else
        ++num_none_;
    }
  }

  // p_k for k = 0 .. (widest slot observed) - 1.
  std::vector<double> probabilities() const {
    std::vector<double> p(counts_.size());
    for (std::size_t k = 0; k < p.size(); ++k)
      p[k] = static_cast<double>(counts_[k]) / static_cast<double>(exposures_[k]);
    return p;
  }

  std::int64_t num_steps() const { return num_steps_; }
  std::int64_t num_none() const { return num_none_; }
  // counts()[k]: steps that accepted the rank-k child.
  std::span<const std::int64_t> counts() const { return counts_; }
  // exposures()[k]: steps whose slot had more than k children.
  std::span<const std::int64_t> exposures() const { return exposures_; }

  void reset() {
    counts_.clear();
    exposures_.clear();
    num_steps_ = 0;
    num_none_ = 0;
  }

 private:
  std::vector<std::int64_t> counts_, exposures_;
  std::int64_t num_steps_ = 0, num_none_ = 0;
  std::vector<std::pair<std::int32_t, std::int32_t>> steps_;  // scratch of observe
};

namespace detail {
inline void check_positional_acceptance(std::string_view who, std::span<const double> p) {
  for (std::size_t k = 0; k < p.size(); ++k)
    if (!(p[k] >= 0.0 && p[k] <= 1.0))
      throw InvalidArgumentError(
          fmt::format("{}: positional acceptance p[{}] must be in [0, 1], got {}", who, k, p[k]));
}
}  // namespace detail

// Expected number of accepted drafts of a shape: Σ_v Π p_rank along the path
// to v (the root excluded; Sequoia's value counts the root as 1 more). Ranks
// at or beyond p.size() count as never accepted (p = 0).
inline double sequoia_expected_accepted(const StaticTreeShape& shape, std::span<const double> p) {
  detail::check_positional_acceptance("sequoia_expected_accepted", p);
  std::vector<double> f(static_cast<std::size_t>(shape.size()));
  double total = 0.0;
  for (std::int32_t i = 0; i < shape.size(); ++i) {
    const auto& n = shape.node(i);
    const double pk = static_cast<std::size_t>(n.rank) < p.size() ? p[static_cast<std::size_t>(n.rank)] : 0.0;
    f[static_cast<std::size_t>(i)] = (n.parent < 0 ? 1.0 : f[static_cast<std::size_t>(n.parent)]) * pk;
    total += f[static_cast<std::size_t>(i)];
  }
  return total;
}

// The shape of at most `budget_nodes` draft nodes and depth at most
// `max_depth` (children of the root have depth 1) that maximises
// sequoia_expected_accepted(shape, p): Sequoia's DP (Algorithms 1 and 4),
// exact.
//
// Off-by-one versus the paper: the paper's trees count the root, so its
// T[m][l][b] has m = our nodes + 1 and l = our depth + 1, and its optimum is
// our expected value + 1. The table here is the paper's:
//   T[1][l][0] = 1
//   T[m][l][1] = 1 + p_1 · max_b' T[m-1][l-1][b']
//   T[m][l][b] = max_{b <= y < m} T[y][l][b-1] + p_b · max_b' T[m-y][l-1][b']   (b >= 2)
// for m ≤ budget_nodes + 1, l ≤ max_depth + 1, b ≤ min(m - 1, p.size()), and
// the answer is the best over all m: the budget is an upper bound, and ties
// go to the smallest tree (so where p has zeros, nodes that add nothing are
// left out unless they hold a rank open for a later sibling), then to the
// first maximiser in loop order. The shape is in BFS order
// (siblings by rank), so StaticTreeBuilder's max_nodes truncation drops the
// deepest nodes first. Cost O(budget^2 · max_depth · min(budget, p.size())).
inline StaticTreeShape sequoia_shape(std::span<const double> p, std::int32_t budget_nodes,
                                     std::int32_t max_depth) {
  detail::check_positional_acceptance("sequoia_shape", p);
  if (budget_nodes < 0 || max_depth < 0)
    throw InvalidArgumentError(fmt::format(
        "sequoia_shape: budget_nodes and max_depth must be >= 0, got {} and {}", budget_nodes, max_depth));
  const std::int32_t M = budget_nodes + 1;  // nodes including the root
  const std::int32_t L = max_depth + 1;     // levels including the root
  const std::int32_t B = std::min<std::int32_t>(budget_nodes, static_cast<std::int32_t>(p.size()));
  constexpr double kNone = -std::numeric_limits<double>::infinity();
  const auto at = [&](std::int32_t m, std::int32_t l, std::int32_t b) {
    return (static_cast<std::size_t>(m) * static_cast<std::size_t>(L + 1) + static_cast<std::size_t>(l)) *
               static_cast<std::size_t>(B + 1) +
           static_cast<std::size_t>(b);
  };
  const auto cells =
      static_cast<std::size_t>(M + 1) * static_cast<std::size_t>(L + 1) * static_cast<std::size_t>(B + 1);
  std::vector<double> T(cells, kNone);
  std::vector<std::int32_t> split(cells, -1);  // argmax y for b >= 2
  // best[m][l] = max_b T[m][l][b] and its argmax b.
  std::vector<double> best(static_cast<std::size_t>(M + 1) * static_cast<std::size_t>(L + 1), kNone);
  std::vector<std::int32_t> best_b(best.size(), -1);
  const auto bi = [&](std::int32_t m, std::int32_t l) {
    return static_cast<std::size_t>(m) * static_cast<std::size_t>(L + 1) + static_cast<std::size_t>(l);
  };
  for (std::int32_t l = 1; l <= L; ++l) {
    for (std::int32_t m = 1; m <= M; ++m) {
      if (m == 1) T[at(1, l, 0)] = 1.0;
      if (l >= 2)
        for (std::int32_t b = 1; b <= std::min(m - 1, B); ++b) {
          const double pb = p[static_cast<std::size_t>(b - 1)];
          if (b == 1) {
            const double sub = best[bi(m - 1, l - 1)];
            if (sub != kNone) T[at(m, l, 1)] = 1.0 + pb * sub;
            continue;
          }
          double v = kNone;
          std::int32_t arg = -1;
          for (std::int32_t y = b; y < m; ++y) {
            const double rest = T[at(y, l, b - 1)], sub = best[bi(m - y, l - 1)];
            if (rest == kNone || sub == kNone) continue;
            const double cand = rest + pb * sub;
            if (cand > v) {
              v = cand;
              arg = y;
            }
          }
          T[at(m, l, b)] = v;
          split[at(m, l, b)] = arg;
        }
      for (std::int32_t b = 0; b <= std::min(m - 1, B); ++b)
        if (T[at(m, l, b)] > best[bi(m, l)]) {
          best[bi(m, l)] = T[at(m, l, b)];
          best_b[bi(m, l)] = b;
        }
    }
  }
  std::int32_t m_best = 1;
  for (std::int32_t m = 2; m <= M; ++m)
    if (best[bi(m, L)] > best[bi(m_best, L)]) m_best = m;

  // Reconstruct breadth first. A queue entry is a subtree (m, l, b) whose
  // root is shape node `index` (-1: the tree's root).
  std::vector<ShapeNode> nodes;
  std::deque<std::tuple<std::int32_t, std::int32_t, std::int32_t, std::int32_t>> queue;
  queue.emplace_back(-1, m_best, L, best_b[bi(m_best, L)]);
  std::vector<std::pair<std::int32_t, std::int32_t>> children;  // (m, l) of each child, by rank
  while (!queue.empty()) {
    const auto [index, m, l, b] = queue.front();
    queue.pop_front();
    children.assign(static_cast<std::size_t>(b), {0, 0});
    // Peel the last child off repeatedly: T[m][l][b] = T[y][l][b-1] + p_b · T[m-y][l-1][·].
    for (std::int32_t k = b, mm = m; k >= 1; --k) {
      const std::int32_t y = k == 1 ? 1 : split[at(mm, l, k)];
      children[static_cast<std::size_t>(k - 1)] = {mm - y, l - 1};
      mm = y;
    }
    for (std::int32_t k = 0; k < b; ++k) {
      const auto [cm, cl] = children[static_cast<std::size_t>(k)];
      nodes.push_back({index, k});
      queue.emplace_back(static_cast<std::int32_t>(nodes.size()) - 1, cm, cl, best_b[bi(cm, cl)]);
    }
  }
  return StaticTreeShape(std::move(nodes));
}

}  // namespace specdec
