// Checks shared by the acceptance rules: the inputs a rule receives must
// describe the same tree and vocabulary, and every row a rule reads must be a
// distribution. Each failure throws a typed error naming the problem.
#pragma once

#include <cstdint>
#include <string_view>
#include <vector>

#include <fmt/format.h>

#include "specdec/core/distribution.hpp"
#include "specdec/core/draft_tree.hpp"
#include "specdec/core/error.hpp"
#include "specdec/core/prob_matrix.hpp"
#include "specdec/core/verify_result.hpp"

namespace specdec::detail {

// target: one row for the root and one per node, all of one vocabulary that
// holds every drafted token.
inline void check_rule_inputs(std::string_view rule, const DraftTree& tree, const ProbRows& target) {
  if (target.num_rows() != tree.size() + 1)
    throw ShapeError(fmt::format("{}: target has {} rows, expected {} (root + {} tree nodes)", rule,
                                 target.num_rows(), tree.size() + 1, tree.size()));
  if (target.vocab() <= 0) throw InvalidDistributionError(fmt::format("{}: empty target rows", rule));
  for (const auto& n : tree.nodes())
    if (n.token >= target.vocab())
      throw ShapeError(fmt::format("{}: drafted token {} is outside the target vocabulary of {}",
                                   rule, n.token, target.vocab()));
}

// The draft row the children of `slot` were sampled from; its shape is always
// checked, its contents unless the caller checks them later (`check`).
inline std::span<const float> sampled_children_row(std::string_view rule, const DraftTree& tree,
                                                   std::int32_t slot, const ProbRows& draft,
                                                   std::int64_t vocab, bool check = true) {
  const auto r = tree.children_draft_row(slot);
  if (r < 0)
    throw InvalidTreeError(fmt::format(
        "{}: children of slot {} are marked sampled but record no draft row", rule, slot));
  if (r >= draft.num_rows())
    throw ShapeError(fmt::format("{}: slot {} refers to draft row {}, but the draft matrix has {} rows",
                                 rule, slot, r, draft.num_rows()));
  if (draft.vocab() != vocab)
    throw ShapeError(fmt::format("{}: draft vocabulary {} differs from target vocabulary {}", rule,
                                 draft.vocab(), vocab));
  const auto row = draft.row(r);
  if (check) check_distribution(row, fmt::format("{}: draft row {}", rule, r));
  return row;
}

inline void check_children_recorded(std::string_view rule, const DraftTree& tree, std::int32_t slot) {
  if (tree.children_mode(slot) == ChildMode::kNone)
    throw InvalidTreeError(fmt::format(
        "{}: children of slot {} have no recorded source (DraftTree::set_children_source)", rule,
        slot));
}

// A sampled token must have positive probability under the row it was drawn
// from; q is null for a deterministic draft (nothing to check).
inline void check_drafted_token(std::string_view rule, const float* q, TokenId token, std::int32_t node) {
  if (q != nullptr && !(q[token] > 0.0f))
    throw InvalidDistributionError(fmt::format(
        "{}: drafted token {} (node {}) has draft probability {}; it cannot have been sampled", rule, token, node,
        q[token]));
}

// Children drawn without replacement are distinct tokens: a repeated one
// would be tested against a draft law that no longer holds it, and the
// first token's law would come out wrong. Refused, naming both children.
inline void check_distinct_children(std::string_view rule, const DraftTree& tree, std::int32_t slot) {
  if (tree.children_mode(slot) != ChildMode::kSampledWithoutReplacement) return;
  for (auto c = tree.first_child(slot); c >= 0; c = tree.next_sibling(c))
    for (auto e = tree.first_child(slot); e != c; e = tree.next_sibling(e))
      if (tree.token(e) == tree.token(c))
        throw InvalidTreeError(fmt::format(
            "{}: children {} and {} of slot {} are both token {}, but they were drawn without replacement", rule,
            e, c, slot, tree.token(c)));
}

// What the chain rules' row functions read: the drafted tokens x_1..x_gamma
// and, per token, the draft row it was sampled from (null: chosen
// deterministically, q = one-hot). Draft rows are shape-checked here; their
// contents are the rule's to check.
struct ChainInputs {
  std::vector<const float*> draft_rows;
  std::vector<TokenId> tokens;

  void gather(std::string_view rule, const DraftTree& tree, const ProbRows& target, const ProbRows& draft) {
    check_rule_inputs(rule, tree, target);
    if (!tree.is_chain())
      throw InvalidTreeError(fmt::format(
          "{}: the tree is not a chain; it verifies chains only (trees: traversal_verification or "
          "recursive_rejection_sampling)",
          rule));
    const auto gamma = static_cast<std::size_t>(tree.size());
    draft_rows.assign(gamma, nullptr);
    tokens.resize(gamma);
    for (std::int32_t i = 0; i < tree.size(); ++i) {
      const std::int32_t slot = i - 1;
      check_children_recorded(rule, tree, slot);
      tokens[static_cast<std::size_t>(i)] = tree.token(i);
      if (tree.children_mode(slot) != ChildMode::kDeterministic)
        draft_rows[static_cast<std::size_t>(i)] =
            sampled_children_row(rule, tree, slot, draft, target.vocab(), /*check=*/false).data();
    }
  }

  // Rows for the row functions: row(i) of the draft rows / of a ProbRows.
  struct Rows {
    const float* const* rows;
    const float* operator()(std::int64_t i) const { return rows[i]; }
  };
  struct TargetRows {
    const ProbRows& rows;
    const float* operator()(std::int64_t i) const { return rows.data() + i * rows.row_stride(); }
  };
  Rows draft() const { return Rows{draft_rows.data()}; }
};

// The VerifyResult of a chain rule that accepted `accepted` of gamma drafts
// and emitted `emitted` after them.
inline void chain_result(std::int32_t accepted, std::int32_t gamma, TokenId emitted, VerifyResult& out) {
  out.clear();
  for (std::int32_t i = 0; i < accepted; ++i) {
    out.accepted_nodes.push_back(i);
    out.depth_accepted.push_back(1);
  }
  if (accepted < gamma) out.depth_accepted.push_back(0);
  out.bonus_token = emitted;
}

}  // namespace specdec::detail
