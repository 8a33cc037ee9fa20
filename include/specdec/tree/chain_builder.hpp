// Chain drafting: one token per depth, each drafted from the distribution after
// the previous one (Leviathan et al., arXiv 2211.17192, §2.3). Top-1 children
// are deterministic (verified by the target-only rule, mode (c) of
// docs/methods.md, or greedily); sampled children are verified by speculative
// sampling (Leviathan et al., Algorithm 1).
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>

#include "specdec/accept/row_math.hpp"
#include "specdec/concepts.hpp"
#include "specdec/core/warp.hpp"

namespace specdec {

class ChainBuilder {
 public:
  static constexpr bool kBuildsChainsOnly = true;  // chain-only rules (SpeculativeSampling) fit it
  enum class Pick : std::uint8_t { kTop1, kSample };

  explicit ChainBuilder(Pick pick = Pick::kTop1) : pick_(pick) {}
  Pick pick() const { return pick_; }

  // Drafts min(max_depth, max_nodes, verify_nodes) tokens, fewer when the
  // drafter has no proposal or a drafted token's probability is below
  // budget.stop_below.
  template <class D>
  void build(D& drafter, const DraftBudget& budget, TokenId root, RandomStream& rng, DraftTree& tree,
             ProbMatrix& rows) {
    tree.clear(root);
    rows.resize(0, drafter.vocab_size());
    const auto length = std::min({budget.max_depth, budget.max_nodes, budget.verify_nodes});
    std::array<std::int32_t, 1> frontier{DraftTree::kRoot};
    for (std::int32_t d = 0; d < length; ++d) {
      drafter.propose(DraftRequest{&tree, frontier}, rows);
      const auto row_index = static_cast<std::int32_t>(rows.num_rows() - 1);
      const auto row = rows.row(row_index);
      TokenId token = kNoToken;
      if (pick_ == Pick::kTop1) {
        const TokenId best = argmax(row);
        if (row[static_cast<std::size_t>(best)] > 0.0f) token = best;
      } else {
        token = row_math::sample_row(row.data(), static_cast<std::int64_t>(row.size()), rng.uniform());
      }
      if (token == kNoToken) break;  // an all-zero row: no proposal
      tree.set_children_source(frontier[0], row_index,
                               pick_ == Pick::kTop1 ? ChildMode::kDeterministic : ChildMode::kSampledWithReplacement);
      const float q = row[static_cast<std::size_t>(token)];
      frontier[0] = tree.add_node(frontier[0], token, q);
      if (q < budget.stop_below) break;
    }
  }

 private:
  Pick pick_;
};

}  // namespace specdec
