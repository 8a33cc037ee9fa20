// A draft budget sized to the hardware: Sequoia's hardware-aware objective
// (Chen et al., arXiv 2402.12374, §3.2: choose the tree that maximises
// accepted tokens per second, not per round), for any tree or chain method.
//
// Each re-plan picks the depth N, the branch k and the node count B that
// maximise
//
//     (1 + E[accepted | N, k, B]) / (draft(N, B) + Lat(B + 1) + overhead)
//
// where
//   * Lat(t) is the target's forward over t tokens, measured on the machine
//     at start-up (select/verify_latency.hpp: measure_target_latency). On a
//     GPU Lat is nearly flat and big trees pay; on a CPU it grows with t, and
//     this is what sizes trees down;
//   * E is the expected number of accepted drafts of the best tree of B
//     nodes and depth <= N under positional acceptance p[d][r] (Sequoia
//     Definition 3.2, per depth d here: a draft head loses accuracy with
//     depth), measured from the verified rounds. With p non-increasing in r
//     the best tree is the B nodes of largest path value Π p, grown best
//     first; k is its root's children;
//   * draft(N, B) = a N + b B, a least-squares fit (a, b >= 0) of the
//     rounds' drafting time against their budget's depth and the nodes they
//     drafted (b = 0 while every round drafts the same shape), and overhead the rounds' host time outside the
//     target's forward (what the engine spends on acceptance and commits);
//     both measured from the rounds.
//
// The initial budget drafts until `min_rounds` rounds are seen, and bounds
// every plan: a plan is never deeper, wider or larger than it (ranks and
// depths never drafted have no estimate), so start from the largest tree you
// would allow. Affects speed only: the budget depends on past rounds, never
// on the current one's draws, so every lossless rule stays lossless.
#pragma once

#include <algorithm>
#include <cstdint>
#include <queue>
#include <span>
#include <tuple>
#include <vector>

#include <fmt/format.h>

#include "specdec/core/draft_tree.hpp"
#include "specdec/core/error.hpp"
#include "specdec/core/round.hpp"
#include "specdec/select/verify_latency.hpp"

namespace specdec {

struct CostAwareOptions {
  std::int32_t min_rounds = 16;     // rounds drafted with the initial budget before the first plan
  std::int32_t replan_every = 16;   // rounds between plans
  double prior_weight = 20.0;       // a depth's p[d][r] shrinks toward all depths' p[r] with this many steps
  bool chains_only = false;         // the builder drafts chains: plans have k = 1 and B = N
  void validate() const {
    if (min_rounds < 1 || replan_every < 1 || !(prior_weight >= 0.0))
      throw InvalidArgumentError(fmt::format(
          "CostAwareOptions: min_rounds ({}) and replan_every ({}) must be >= 1, prior_weight ({}) >= 0", min_rounds,
          replan_every, prior_weight));
  }
};

class CostAwareTree {
 public:
  struct Plan {
    DraftBudget budget;
    double expected_accepted = 0.0;  // E[accepted drafts] of the planned tree
    double round_seconds = 0.0;      // predicted: drafting + verification + overhead
    double tokens_per_second() const { return round_seconds > 0.0 ? (1.0 + expected_accepted) / round_seconds : 0.0; }
  };

  // `latency`: the target's forward time by tokens (batch 1 is used).
  // `initial`: the budget of the first rounds and the bound of every plan.
  CostAwareTree(VerifyLatency latency, DraftBudget initial, CostAwareOptions options = {})
      : latency_(std::move(latency)), initial_(initial), options_(options) {
    options_.validate();
    if (latency_.empty()) throw InvalidArgumentError("CostAwareTree: no latency profile (measure_target_latency)");
    if (initial.max_depth < 1 || initial.verify_nodes < 1 || initial.max_nodes < initial.verify_nodes)
      throw InvalidArgumentError(fmt::format(
          "CostAwareTree: the initial budget needs max_depth >= 1 and 1 <= verify_nodes <= max_nodes, got {}, {}, {}",
          initial.max_depth, initial.verify_nodes, initial.max_nodes));
    plan_.budget = initial;
  }

  DraftBudget budget() const { return plan_.budget; }

  void observe(const RoundOutcome& o) {
    if (o.tree != nullptr) count_acceptance(*o.tree, o.accepted_nodes);
    if (o.num_drafted > 0) {  // the budget this round drafted with: depth N, and the nodes it drafted
      draft_.push_back({static_cast<double>(plan_.budget.max_depth), static_cast<double>(o.num_drafted),
                        o.draft_us * 1e-6});
      if (draft_.size() > kWindow) draft_.erase(draft_.begin());
      if (o.target_model_us > 0.0) {
        overhead_.push_back(std::max(0.0, o.verify_us - o.target_model_us) * 1e-6);
        if (overhead_.size() > kWindow) overhead_.erase(overhead_.begin());
      }
    }
    ++rounds_;
    if (rounds_ >= options_.min_rounds && (rounds_ - options_.min_rounds) % options_.replan_every == 0) replan();
  }

  const Plan& plan() const { return plan_; }
  std::int64_t rounds() const { return rounds_; }
  std::int32_t plans() const { return plans_; }
  // p[d][r]: the estimate of the last plan (depth d + 1, sibling rank r).
  const std::vector<std::vector<double>>& acceptance() const { return p_; }
  // The fitted drafting cost: seconds per level and per verified node.
  std::pair<double, double> draft_cost() const { return {per_level_, per_node_}; }

  // The best plan for the given estimates: exposed for tests and for
  // planning offline. p[d][r] for depths 1..p.size(); draft seconds
  // per_level * N + per_node * B; `overhead` seconds per round.
  Plan best_plan(const std::vector<std::vector<double>>& p, double per_level, double per_node, double overhead) const {
    Plan best;
    best.budget = initial_;
    double best_rate = -1.0;
    const auto max_depth = std::min<std::int32_t>(initial_.max_depth, static_cast<std::int32_t>(p.size()));
    std::vector<std::vector<double>> ranks = p;
    if (options_.chains_only)  // a chain: only each depth's first child
      for (auto& row : ranks)
        if (row.size() > 1) row.erase(row.begin() + 1, row.end());
    for (std::int32_t n_depth = 1; n_depth <= max_depth; ++n_depth) {
      const auto grown = grow(ranks, n_depth, options_.chains_only ? n_depth : initial_.verify_nodes);
      for (std::size_t i = 0; i < grown.size(); ++i) {
        const auto nodes = static_cast<std::int32_t>(i) + 1;
        const auto& [value, depth, branch] = grown[i];
        if (depth < n_depth) continue;  // the same tree is planned at its own depth
        const double seconds = per_level * n_depth + per_node * nodes + latency_.seconds(1, nodes + 1) + overhead;
        const double rate = (1.0 + value) / seconds;
        if (rate > best_rate) {
          best_rate = rate;
          best.budget = initial_;
          best.budget.max_depth = n_depth;
          best.budget.verify_nodes = nodes;
          best.budget.branch = options_.chains_only ? initial_.branch : branch;
          best.expected_accepted = value;
          best.round_seconds = seconds;
        }
      }
    }
    return best;
  }

 private:
  static constexpr std::size_t kWindow = 256;  // rounds the cost fits use

  struct DraftSample {
    double depth, nodes, seconds;
  };

  // Sequoia's estimator per depth: at each slot the rule tested (the root,
  // then each accepted node with children), every rank below its width is
  // exposed once and the accepted child's rank counted.
  void count_acceptance(const DraftTree& tree, std::span<const std::int32_t> accepted) {
    std::int32_t slot = DraftTree::kRoot;
    for (std::size_t d = 0;; ++d) {
      const auto width = tree.num_children(slot);
      if (width == 0) break;
      if (counts_.size() <= d) {
        counts_.resize(d + 1);
        exposures_.resize(d + 1);
      }
      auto& c = counts_[d];
      auto& e = exposures_[d];
      if (e.size() < static_cast<std::size_t>(width)) {
        e.resize(static_cast<std::size_t>(width), 0);
        c.resize(static_cast<std::size_t>(width), 0);
      }
      for (std::int32_t r = 0; r < width; ++r) ++e[static_cast<std::size_t>(r)];
      if (d >= accepted.size()) break;
      const auto node = accepted[d];
      std::int32_t rank = 0;
      for (auto ch = tree.first_child(slot); ch != node && ch >= 0; ch = tree.next_sibling(ch)) ++rank;
      if (rank < width) ++c[static_cast<std::size_t>(rank)];
      slot = node;
    }
  }

  // p[d][r], each depth shrunk toward all depths pooled, then made
  // non-increasing in r (so the best tree is the best-first one).
  std::vector<std::vector<double>> estimate() const {
    std::size_t width = 0;
    for (const auto& e : exposures_) width = std::max(width, e.size());
    std::vector<double> pooled_c(width, 0.0), pooled_e(width, 0.0);
    for (std::size_t d = 0; d < exposures_.size(); ++d)
      for (std::size_t r = 0; r < exposures_[d].size(); ++r) {
        pooled_c[r] += static_cast<double>(counts_[d][r]);
        pooled_e[r] += static_cast<double>(exposures_[d][r]);
      }
    std::vector<std::vector<double>> p(exposures_.size());
    for (std::size_t d = 0; d < exposures_.size(); ++d) {
      p[d].assign(exposures_[d].size(), 0.0);
      for (std::size_t r = 0; r < exposures_[d].size(); ++r) {
        const double prior = pooled_e[r] > 0.0 ? pooled_c[r] / pooled_e[r] : 0.0;
        const double w = options_.prior_weight;
        p[d][r] = (static_cast<double>(counts_[d][r]) + w * prior) / (static_cast<double>(exposures_[d][r]) + w);
        if (r > 0) p[d][r] = std::min(p[d][r], p[d][r - 1]);
      }
    }
    return p;
  }

  // Best-first growth of the tree of depth <= max_depth: after i + 1 nodes,
  // {expected accepted, depth, root children}. A node's value is Π p along
  // its path; with p non-increasing in rank, a child is worth no more than its
  // parent or its elder sibling, so the best i + 1 nodes form a tree.
  static std::vector<std::tuple<double, std::int32_t, std::int32_t>> grow(const std::vector<std::vector<double>>& p,
                                                                          std::int32_t max_depth,
                                                                          std::int32_t max_nodes) {
    struct Candidate {
      double value;
      std::int32_t depth, rank;
      double parent_value;
      bool operator<(const Candidate& o) const { return value < o.value; }
    };
    const auto at = [&](std::int32_t depth, std::int32_t rank) {
      const auto& row = p[static_cast<std::size_t>(depth - 1)];
      return static_cast<std::size_t>(rank) < row.size() ? row[static_cast<std::size_t>(rank)] : 0.0;
    };
    std::vector<std::tuple<double, std::int32_t, std::int32_t>> out;
    std::priority_queue<Candidate> queue;
    queue.push({at(1, 0), 1, 0, 1.0});
    double total = 0.0;
    std::int32_t deepest = 0, root_children = 0;
    while (!queue.empty() && static_cast<std::int32_t>(out.size()) < max_nodes) {
      const auto c = queue.top();
      queue.pop();
      if (!(c.value > 0.0)) break;  // nothing left that can be accepted
      total += c.value;
      deepest = std::max(deepest, c.depth);
      if (c.depth == 1) root_children = std::max(root_children, c.rank + 1);
      out.emplace_back(total, deepest, root_children);
      queue.push({c.parent_value * at(c.depth, c.rank + 1), c.depth, c.rank + 1, c.parent_value});  // next sibling
      if (c.depth < max_depth) queue.push({c.value * at(c.depth + 1, 0), c.depth + 1, 0, c.value});  // first child
    }
    return out;
  }

  void fit_draft_cost() {
    // Least squares seconds = a depth + b nodes with a, b >= 0; rounds that
    // always draft chains (depth = nodes) leave b = 0.
    double dd = 0, dn = 0, nn = 0, ds = 0, ns = 0;
    for (const auto& s : draft_) {
      dd += s.depth * s.depth;
      dn += s.depth * s.nodes;
      nn += s.nodes * s.nodes;
      ds += s.depth * s.seconds;
      ns += s.nodes * s.seconds;
    }
    per_level_ = per_node_ = 0.0;
    const double det = dd * nn - dn * dn;
    if (det > 1e-9 * dd * nn) {
      const double a = (ds * nn - ns * dn) / det, b = (dd * ns - dn * ds) / det;
      if (a >= 0.0 && b >= 0.0) {
        per_level_ = a;
        per_node_ = b;
        return;
      }
    }
    if (dd > 0.0) per_level_ = std::max(0.0, ds / dd);
  }

  void replan() {
    p_ = estimate();
    if (p_.empty()) return;  // nothing drafted yet
    fit_draft_cost();
    double overhead = 0.0;
    for (const double s : overhead_) overhead += s;
    if (!overhead_.empty()) overhead /= static_cast<double>(overhead_.size());
    plan_ = best_plan(p_, per_level_, per_node_, overhead);
    ++plans_;
  }

  VerifyLatency latency_;
  DraftBudget initial_;
  CostAwareOptions options_;
  Plan plan_;
  std::vector<std::vector<std::int64_t>> counts_, exposures_;  // [depth][rank]
  std::vector<DraftSample> draft_;
  std::vector<double> overhead_;
  std::vector<std::vector<double>> p_;
  double per_level_ = 0.0, per_node_ = 0.0;
  std::int64_t rounds_ = 0;
  std::int32_t plans_ = 0;
};

}  // namespace specdec
