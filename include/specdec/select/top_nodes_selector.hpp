// Verify-budget selection: of each request's drafted tree the target sees the
// budget.verify_nodes nodes of highest cumulative draft probability, closed
// under ancestors (SpecInfer's and Sequoia's verification budget, arXiv
// 2305.09781 §3, arXiv 2402.12374 §3; the rerank step of EAGLE-2, arXiv
// 2406.16858 §4.2, as a phase of its own). A tree that already fits is left
// as drafted only when no slot's mode depends on it: a pruned sampled tree's
// slots become deterministic (prune_to_budget), so which rule verifies a slot
// never depends on what was drawn.
#pragma once

#include <span>

#include "specdec/core/draft_tree_ops.hpp"
#include "specdec/core/round.hpp"

namespace specdec {

struct TopNodesSelector {
  void select(std::span<Selection> batch) {
    for (auto& s : batch) {
      *s.selected = prune_to_budget(*s.drafted, s.budget.verify_nodes).tree;
      s.use_selected = true;
    }
  }
};

}  // namespace specdec
