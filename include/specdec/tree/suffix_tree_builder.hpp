// SuffixDecoding's speculation tree (Oliaro et al., arXiv 2411.04975, §3.2):
// the drafter's suffix indexes grow the whole tree at once, best first by
// estimated path probability, its size adapting to the match length (at most
// factor * p nodes for a match of p tokens, and the budget's). Every slot's
// children are deterministic (chosen by frequency; mode (c) of
// docs/methods.md), so no draft rows are needed and any lossless rule keeps
// the target's law.
#pragma once

#include <algorithm>
#include <cstdint>
#include <vector>

#include "specdec/concepts.hpp"
#include "specdec/core/draft_tree.hpp"
#include "specdec/core/prob_matrix.hpp"
#include "specdec/core/rng.hpp"
#include "specdec/core/round.hpp"
#include "specdec/draft/suffix_index.hpp"
#include "specdec/tree/child_selection.hpp"

namespace specdec {

// A drafter that speculates a whole tree from its own context (SuffixDrafter);
// SuffixTreeBuilder builds with nothing else.
template <class D>
concept TreeSpeculator = requires(const D& d, std::int32_t max_tokens) {
  { d.speculate(max_tokens) } -> std::same_as<SuffixDraft>;
};

class SuffixTreeBuilder {
 public:
  // Drafts at most min(max_nodes, verify_nodes) nodes, none deeper than
  // max_depth: the speculation's nodes in its order (best first), a node kept
  // when its parent was.
  template <TreeSpeculator D>
  void build(D& drafter, const DraftBudget& budget, TokenId root, RandomStream& /*rng*/, DraftTree& tree,
             ProbMatrix& rows) {
    detail::check_builder_budget("SuffixTreeBuilder", budget);
    tree.clear(root);
    rows.resize(0, drafter.vocab_size());
    const SuffixDraft d = drafter.speculate(std::min(budget.max_nodes, budget.verify_nodes));
    kept_.assign(d.tokens.size(), -1);
    for (std::size_t i = 0; i < d.tokens.size(); ++i) {
      const std::int32_t parent =
          d.parents[i] < 0 ? DraftTree::kRoot : kept_[static_cast<std::size_t>(d.parents[i])];
      if (d.parents[i] >= 0 && parent < 0) continue;  // its parent was left out
      if ((parent == DraftTree::kRoot ? 1 : tree.depth(parent) + 1) > budget.max_depth) continue;
      if (d.probs[i] < budget.stop_below) continue;
      kept_[i] = tree.add_node(parent, d.tokens[i], std::min(d.probs[i], 1.0f));
    }
    for (std::int32_t slot = DraftTree::kRoot; slot < tree.size(); ++slot)
      if (tree.num_children(slot) > 0) tree.set_children_source(slot, -1, ChildMode::kDeterministic);
  }

 private:
  std::vector<std::int32_t> kept_;
};

}  // namespace specdec
