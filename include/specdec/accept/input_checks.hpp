// Checks shared by the acceptance rules: the inputs a rule receives must
// describe the same tree and vocabulary, and every row a rule reads must be a
// distribution. Each failure throws a typed error naming the problem.
#pragma once

#include <cstdint>
#include <string_view>

#include <fmt/format.h>

#include "specdec/core/distribution.hpp"
#include "specdec/core/draft_tree.hpp"
#include "specdec/core/error.hpp"
#include "specdec/core/prob_matrix.hpp"

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

}  // namespace specdec::detail
