// Small builders for rule tests: probability matrices from initializer lists
// and trees whose slots record their source in one call.
#pragma once

#include <initializer_list>
#include <vector>

#include "specdec/core/draft_tree.hpp"
#include "specdec/core/prob_matrix.hpp"

namespace specdec::testing {

// A [rows, vocab] matrix from nested lists.
inline ProbMatrix matrix(std::initializer_list<std::initializer_list<float>> rows) {
  ProbMatrix m;
  m.resize(0, static_cast<std::int64_t>(rows.begin()->size()));
  for (const auto& r : rows) {
    auto dst = m.append_row();
    std::copy(r.begin(), r.end(), dst.begin());
  }
  return m;
}

// One-hot row of `vocab` entries at `token`.
inline std::vector<float> one_hot(std::int64_t vocab, TokenId token) {
  std::vector<float> r(static_cast<std::size_t>(vocab), 0.0f);
  r[static_cast<std::size_t>(token)] = 1.0f;
  return r;
}

// A chain root -> tokens[0] -> tokens[1] ..., slot i's children drawn from draft
// row i in `mode`.
inline DraftTree chain(TokenId root, std::initializer_list<TokenId> tokens,
                       ChildMode mode = ChildMode::kSampledWithReplacement) {
  DraftTree t(root);
  std::int32_t parent = DraftTree::kRoot;
  for (TokenId tok : tokens) {
    t.set_children_source(parent, parent + 1, mode);
    parent = t.add_node(parent, tok, 0.5f);
  }
  return t;
}

}  // namespace specdec::testing
