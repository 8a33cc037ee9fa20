// EAGLE-2's dynamic draft tree (Li et al., arXiv 2406.16858, §4; code
// eagle/model/cnets1.py::topK_genrate): expand the most promising nodes by
// path value V(v) = Π draft confidences (cum_logprob here; §4.1), then rerank
// the whole pool and keep the best total_tokens nodes (§4.2).
//
// Children are chosen deterministically (top-k of the draft row), so the tree
// is verified greedily or by the target-only rule (mode (c) of
// docs/methods.md): lossless, because the selection looks at the draft side
// only.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include <fmt/format.h>

#include "specdec/concepts.hpp"
#include "specdec/core/draft_tree.hpp"
#include "specdec/core/draft_tree_ops.hpp"
#include "specdec/core/error.hpp"
#include "specdec/core/prob_matrix.hpp"
#include "specdec/core/rng.hpp"
#include "specdec/core/round.hpp"
#include "specdec/tree/child_selection.hpp"

namespace specdec {

// Expansion (EAGLE-2 §4.1), with `depth` levels in all:
//   level 1: the top_k tokens of the root's row;
//   levels 2..depth: one propose call for the frontier — the top_k nodes of
//     the previous level by cum_logprob (ties: earlier created) — each frontier
//     node adds its top_k tokens; every candidate joins the pool.
// Rerank: the total_tokens pool nodes of highest cum_logprob (ties: earlier
// created). A child never outscores its parent (log q <= 0) and is created
// after it, so the selection is closed under parents; prune_to_budget (core/
// draft_tree_ops.hpp) computes exactly this set and keeps every slot
// kDeterministic with its draft row.
//
// Budget (DraftBudget): levels = min(depth, max_depth); kept nodes =
// min(total_tokens, verify_nodes); max_nodes bounds the pool nodes the
// drafter runs (the frontiers of levels 2.., at most (levels - 1) top_k): a
// frontier is cut to the best nodes that still fit, so a drafter with a
// model never holds more than its context plus max_nodes tokens. The pool
// itself (at most top_k + (levels - 1) top_k^2 candidates) is never run.
// stop_below: a frontier node whose draft_prob is below it is not expanded
// (it stays in the pool). branch (> 0): top_k for this build, at most the
// builder's own (a LengthPolicy narrowing the tree). No uniforms are drawn.
//
// `rows` receives every row proposed (one per expanded pool node, level by
// level), including rows of slots whose children were all reranked away; the
// final tree's slots refer to rows of this matrix. The pool of the last build
// is kept for inspection (pool(), kept()).
class DynamicTreeBuilder {
 public:
  // EAGLE-2's defaults are top_k 10, depth 5 to 7, total_tokens 60 (its
  // reference code, github.com/SafeAILab/EAGLE).
  DynamicTreeBuilder(std::int32_t top_k, std::int32_t depth, std::int32_t total_tokens)
      : top_k_(top_k), depth_(depth), total_tokens_(total_tokens) {
    if (top_k <= 0 || depth <= 0 || total_tokens <= 0)
      throw InvalidArgumentError(
          fmt::format("DynamicTreeBuilder: top_k, depth and total_tokens must be > 0, got {}, {} and {}",
                      top_k, depth, total_tokens));
  }

  std::int32_t top_k() const { return top_k_; }
  std::int32_t depth() const { return depth_; }
  std::int32_t total_tokens() const { return total_tokens_; }

  template <Drafter D>
  void build(D& drafter, const DraftBudget& budget, TokenId root, RandomStream& /*rng*/, DraftTree& tree,
             ProbMatrix& rows) {
    static constexpr const char* kWho = "DynamicTreeBuilder";
    detail::check_builder_budget(kWho, budget);
    const auto vocab = detail::reset_rows(kWho, static_cast<std::int64_t>(drafter.vocab_size()), rows);
    const auto levels = std::min(depth_, budget.max_depth);
    const auto total = std::min(total_tokens_, budget.verify_nodes);
    const auto k = budget.branch > 0 ? std::min(budget.branch, top_k_) : top_k_;
    pool_.clear(root);
    kept_.clear();
    tree.clear(root);
    if (levels == 0 || total == 0) return;

    frontier_.assign(1, DraftTree::kRoot);
    std::int32_t run = 0;  // pool nodes the drafter has run (frontiers past the root)
    for (std::int32_t level = 1; level <= levels && !frontier_.empty(); ++level) {
      const auto first_row = detail::propose_level(kWho, drafter, pool_, frontier_, vocab, rows);
      candidates_.clear();
      for (std::size_t f = 0; f < frontier_.size(); ++f) {
        const auto r = first_row + static_cast<std::int64_t>(f);
        const auto row = rows.view().row(r);
        if (!detail::has_proposal(kWho, row, r)) continue;
        detail::top_tokens(row, k, tokens_);
        pool_.set_children_source(frontier_[f], static_cast<std::int32_t>(r), ChildMode::kDeterministic);
        for (const auto x : tokens_)
          candidates_.push_back(pool_.add_node(frontier_[f], x, row[static_cast<std::size_t>(x)]));
      }
      // Next frontier: this level's top_k candidates by cum_logprob, earlier
      // created first on ties; proposed for in creation (tree) order.
      if (level == levels) break;  // the last level's candidates are never run
      const auto n_next = std::min<std::size_t>({static_cast<std::size_t>(k), candidates_.size(),
                                                 static_cast<std::size_t>(std::max(budget.max_nodes - run, 0))});
      std::partial_sort(candidates_.begin(), candidates_.begin() + static_cast<std::ptrdiff_t>(n_next),
                        candidates_.end(), [&](std::int32_t a, std::int32_t b) {
                          const double sa = pool_.node(a).cum_logprob, sb = pool_.node(b).cum_logprob;
                          return sa > sb || (sa == sb && a < b);
                        });
      frontier_.clear();
      for (std::size_t i = 0; i < n_next; ++i)
        if (!(pool_.node(candidates_[i]).draft_prob < budget.stop_below)) frontier_.push_back(candidates_[i]);
      std::sort(frontier_.begin(), frontier_.end());
      run += static_cast<std::int32_t>(frontier_.size());
    }

    // Rerank (EAGLE-2 §4.2): the best `total` nodes of the whole pool.
    auto pruned = prune_to_budget(pool_, total);
    tree = std::move(pruned.tree);
    kept_ = std::move(pruned.kept);
  }

  // The scratch tree of the last build: every drafted candidate, with the
  // rows its expanded slots were proposed from.
  const DraftTree& pool() const { return pool_; }
  // kept()[i]: the pool index of node i of the last built tree.
  const std::vector<std::int32_t>& kept() const { return kept_; }

 private:
  std::int32_t top_k_, depth_, total_tokens_;
  DraftTree pool_;
  std::vector<std::int32_t> kept_;
  std::vector<std::int32_t> frontier_, candidates_;
  std::vector<TokenId> tokens_;
};

}  // namespace specdec
