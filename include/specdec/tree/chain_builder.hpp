// Chain drafting: one token per depth, each drafted from the distribution after
// the previous one (Leviathan et al., arXiv 2211.17192, §2.3). Top-1 children
// are deterministic (verified by the target-only rule, mode (c) of
// docs/methods.md, or greedily); sampled children are verified by speculative
// sampling (Leviathan et al., Algorithm 1). By default the pick follows each
// request: top-1 for a greedy request, a draw for a sampled one.
#pragma once

#include <algorithm>
#include <array>
#include <cstdint>
#include <span>
#include <vector>

#include "specdec/accept/row_math.hpp"
#include "specdec/concepts.hpp"
#include "specdec/core/warp.hpp"
#include "specdec/tree/child_selection.hpp"

namespace specdec {

class ChainBuilder {
 public:
  static constexpr bool kBuildsChainsOnly = true;  // chain-only rules (SpeculativeSampling) fit it
  using Pick = ChainPick;  // top-1, a draw, or as the request samples

  explicit ChainBuilder(Pick pick = Pick::kByRequest) : pick_(pick) {}
  Pick pick() const { return pick_; }

  // Drafts min(max_depth, max_nodes, verify_nodes) tokens, fewer when the
  // drafter has no proposal or a drafted token's probability is below
  // budget.stop_below.
  template <class D>
  void build(D& drafter, const DraftBudget& budget, TokenId root, RandomStream& rng, DraftTree& tree,
             ProbMatrix& rows) {
    tree.clear(root);
    rows.resize(0, drafter.vocab_size());
    const auto length = chain_length(budget);
    const bool sample = draws_chain(pick_, drafter);
    std::array<std::int32_t, 1> frontier{DraftTree::kRoot};
    for (std::int32_t d = 0; d < length; ++d) {
      drafter.propose(DraftRequest{&tree, frontier}, rows);
      if (!extend(budget, sample, rng, tree, rows, frontier[0])) break;
    }
  }

  // build() for several requests in lockstep: one batched propose per level
  // for every chain still growing (a BatchDrafter), or each request's build()
  // in turn otherwise. Each request draws from its own stream as in build().
  template <class D>
  void build_batch(std::span<const BuildItem<D>> items) {
    if constexpr (!BatchDrafter<D>) {
      for (const auto& it : items) build(*it.drafter, it.budget, it.root, *it.rng, *it.tree, *it.rows);
    } else {
      const auto n = items.size();
      tips_.assign(n, DraftTree::kRoot);
      std::vector<std::int32_t> lengths(n);  // NOLINT: small, once per step
      std::int32_t longest = 0;
      for (std::size_t i = 0; i < n; ++i) {
        items[i].tree->clear(items[i].root);
        items[i].rows->resize(0, items[i].drafter->vocab_size());
        lengths[i] = chain_length(items[i].budget);
        longest = std::max(longest, lengths[i]);
      }
      std::vector<D*> drafters;
      std::vector<ProbMatrix*> rows;
      std::vector<DraftRequest> requests;
      std::vector<std::size_t> growing;
      for (std::size_t i = 0; i < n; ++i)
        if (lengths[i] > 0) growing.push_back(i);
      for (std::int32_t d = 0; d < longest && !growing.empty(); ++d) {
        drafters.clear();
        rows.clear();
        requests.clear();
        for (const auto i : growing) {
          drafters.push_back(items[i].drafter);
          rows.push_back(items[i].rows);
          requests.push_back(DraftRequest{items[i].tree, std::span(&tips_[i], 1)});
        }
        D::propose_batch(std::span<D* const>(drafters), std::span<const DraftRequest>(requests),
                         std::span<ProbMatrix* const>(rows));
        std::erase_if(growing, [&](std::size_t i) {
          const auto& it = items[i];
          return !extend(it.budget, draws_chain(pick_, *it.drafter), *it.rng, *it.tree, *it.rows, tips_[i]) ||
                 d + 1 >= lengths[i];
        });
      }
    }
  }

 private:
  static std::int32_t chain_length(const DraftBudget& b) {
    return std::max(0, std::min({b.max_depth, b.max_nodes, b.verify_nodes}));
  }

  // Adds the child of `tip` from the last row the drafter appended; false
  // when the chain stops there (no proposal, or below budget.stop_below).
  static bool extend(const DraftBudget& budget, bool sample, RandomStream& rng, DraftTree& tree,
                     const ProbMatrix& rows, std::int32_t& tip) {
    const auto row_index = static_cast<std::int32_t>(rows.num_rows() - 1);
    const auto row = rows.row(row_index);
    TokenId token = kNoToken;
    if (!sample) {
      const TokenId best = argmax(row);
      if (row[static_cast<std::size_t>(best)] > 0.0f) token = best;
    } else {
      token = row_math::sample_row(row.data(), static_cast<std::int64_t>(row.size()), rng.uniform());
    }
    if (token == kNoToken) return false;  // an all-zero row: no proposal
    tree.set_children_source(tip, row_index, sample ? ChildMode::kSampledWithReplacement : ChildMode::kDeterministic);
    const float q = row[static_cast<std::size_t>(token)];
    tip = tree.add_node(tip, token, q);
    return q >= budget.stop_below;
  }

  Pick pick_;
  std::vector<std::int32_t> tips_;
};

}  // namespace specdec
