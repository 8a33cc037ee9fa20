// Traversal verification over a token tree (Weng et al., "Traversal
// Verification for Speculative Tree Decoding", NeurIPS 2025, arXiv
// 2505.12398). Lossless.
//
// Token-level rules (RecursiveRejectionSampling) walk top-down and drop a
// rejected node's whole subtree. This rule walks depth-first and tests a node
// only after all its children failed, leaf to root, with a sequence-level
// weight: a child c of u drafted from s has p_c = min(1, p_u b_u(c) / s(c)),
// and every rejected child moves its parent to b_u <- norm(max(p_u b_u - s, 0)),
// p_u <- Z / (Z + 1 - p_u). The first node that holds ends the round: its path
// is accepted and the emitted token is drawn from its b. On a chain this is
// BlockVerification, token for token.
//
// Supported child sets, per slot (docs/acceptance.md has the proof sketch):
//   kSampledWithReplacement    i.i.d. draws from the slot's draft row
//   kSampledWithoutReplacement draws without replacement (s loses each
//                              rejected token, as in Sequoia)
//   kDeterministic             any set chosen without the target (s one-hot)
// A slot with children but no recorded source is refused (InvalidTreeError).
//
// The per-tree work is row_math::traversal_verification_row, the function the
// CUDA kernel runs: node i's test reads uniform i and the emitted token
// uniform n, so a call takes n + 1 uniforms whatever happens.
#pragma once

#include <algorithm>
#include <vector>

#include "specdec/accept/input_checks.hpp"
#include "specdec/accept/sequence_row_math.hpp"
#include "specdec/core/distribution.hpp"
#include "specdec/core/draft_tree.hpp"
#include "specdec/core/prob_matrix.hpp"
#include "specdec/core/rng.hpp"
#include "specdec/core/verify_result.hpp"

namespace specdec {

class TraversalVerification {
 public:
  static constexpr bool kLossless = true;
  // q is read only at sampled slots; deterministic slots are one-hot.
  static constexpr bool kNeedsDraftProbs = false;
  static constexpr const char* kName = "traversal_verification";

  // target: [tree.size() + 1, vocab] (root first); draft: the rows the tree's
  // sampled slots refer to (may be empty when every slot is deterministic).
  void verify(const DraftTree& tree, const ProbRows& target, const ProbRows& draft, RandomStream& rng,
              VerifyResult& out) {
    detail::check_rule_inputs(kName, tree, target);
    const std::int32_t n = tree.size();
    const std::int64_t vocab = target.vocab();
    // The traversal may read any row of the tree: check them all first.
    for (std::int32_t i = 0; i <= n; ++i)
      check_distribution(target.row(i), fmt::format("{}: target row {}", kName, i));
    rows_.assign(static_cast<std::size_t>(n) + 1, nullptr);
    for (std::int32_t slot = DraftTree::kRoot; slot < n; ++slot) {
      if (tree.num_children(slot) == 0) continue;
      detail::check_children_recorded(kName, tree, slot);
      if (tree.children_mode(slot) == ChildMode::kDeterministic) continue;
      const float* q = detail::sampled_children_row(kName, tree, slot, draft, vocab).data();
      rows_[static_cast<std::size_t>(slot + 1)] = q;
      for (auto c = tree.first_child(slot); c >= 0; c = tree.next_sibling(c))
        detail::check_drafted_token(kName, q, tree.token(c), c);
      detail::check_distinct_children(kName, tree, slot);
    }
    // Scratch only grows: resizing down and up again would re-zero it every round.
    const auto levels = static_cast<std::size_t>(tree.max_depth()) + 1;
    if (levels_.size() < levels) levels_.resize(levels);
    if (scratch_.size() < 2 * levels * static_cast<std::size_t>(vocab))
      scratch_.resize(2 * levels * static_cast<std::size_t>(vocab));
    if (path_.size() < levels) path_.resize(levels);
    TokenId emitted = kNoToken;
    const auto accepted = row_math::traversal_verification_row(
        HostTree{tree, rows_}, detail::ChainInputs::TargetRows{target}, vocab,
        rng.take(static_cast<std::uint64_t>(n) + 1), levels_.data(), scratch_.data(), path_.data(), &emitted);

    out.clear();
    out.accepted_nodes.assign(path_.begin(), path_.begin() + accepted);
    out.depth_accepted.assign(static_cast<std::size_t>(accepted), 1);
    const std::int32_t last = accepted > 0 ? path_[static_cast<std::size_t>(accepted) - 1] : DraftTree::kRoot;
    if (tree.num_children(last) > 0) out.depth_accepted.push_back(0);
    out.bonus_token = emitted;
  }

  VerifyResult verify(const DraftTree& tree, const ProbRows& target, const ProbRows& draft,
                      RandomStream& rng) {
    VerifyResult r;
    verify(tree, target, draft, rng, r);
    return r;
  }

 private:
  // The row function's view of a DraftTree (row_math::FlatTree on the device).
  struct HostTree {
    const DraftTree& tree;
    const std::vector<const float*>& rows;  // per slot + 1: the sampled draft row, or null (one-hot)
    std::int32_t size() const { return tree.size(); }
    TokenId token(std::int32_t i) const { return tree.token(i); }
    std::int32_t first_child(std::int32_t slot) const { return tree.first_child(slot); }
    std::int32_t next_sibling(std::int32_t i) const { return tree.next_sibling(i); }
    const float* draft_row(std::int32_t slot) const { return rows[static_cast<std::size_t>(slot + 1)]; }
    row_math::SlotDraw draw(std::int32_t slot) const {
      switch (tree.children_mode(slot)) {
        case ChildMode::kSampledWithReplacement:
          return row_math::SlotDraw::kIid;
        case ChildMode::kSampledWithoutReplacement:
          return row_math::SlotDraw::kWithoutReplacement;
        default:
          return row_math::SlotDraw::kOneHot;
      }
    }
  };

  std::vector<const float*> rows_;
  std::vector<row_math::TraversalLevel> levels_;
  std::vector<double> scratch_;
  std::vector<std::int32_t> path_;
};

}  // namespace specdec
