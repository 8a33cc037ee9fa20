// Random token trees for the traversal-verification tests (host rule, flat
// tree, CUDA kernel).
#pragma once

#include <algorithm>
#include <cstdint>
#include <random>
#include <vector>

#include "specdec/accept/sequence_row_math.hpp"
#include "specdec/core/draft_tree.hpp"
#include "specdec/core/prob_matrix.hpp"

namespace specdec::testing {

// A random tree of 1 to max_nodes nodes, every slot in a random child mode,
// with random target and draft rows, as a DraftTree and as the flat arrays
// the CUDA kernel reads (row_math::FlatTree).
struct RandomTree {
  DraftTree tree;
  std::vector<std::int32_t> parents;
  std::vector<TokenId> tokens;
  std::vector<std::uint8_t> draws;
  std::vector<float> draft_rows, target_rows;  // [n + 1, vocab], per slot / per row
  ProbMatrix draft_matrix;

  row_math::FlatTree flat(std::int64_t vocab) const {
    return {parents.data(), tokens.data(), draws.data(), draft_rows.data(), tree.size(), vocab};
  }
};

// A row with about a quarter of its entries 0 (forcing rejections).
inline std::vector<float> random_row(std::mt19937& gen, std::int64_t vocab) {
  std::exponential_distribution<float> e(1.0f);
  std::vector<float> r(static_cast<std::size_t>(vocab));
  double total = 0.0;
  for (auto& v : r) total += (v = std::uniform_int_distribution<int>(0, 3)(gen) == 0 ? 0.0f : e(gen));
  if (total == 0.0) r[0] = 1.0f, total = 1.0;
  for (auto& v : r) v = static_cast<float>(v / total);
  return r;
}

// With `chain`, node i is node i - 1's child: a chain for the chain rules.
inline RandomTree random_tree(std::mt19937& gen, std::int64_t vocab, int max_nodes, bool chain = false) {
  RandomTree t;
  t.tree.clear(0);
  const int n = std::uniform_int_distribution<int>(1, max_nodes)(gen);
  // Nodes pick a parent, a token and (first child) their slot's mode; rows
  // follow, with every sampled child given positive draft probability.
  // Children drawn without replacement are distinct tokens (the rules refuse
  // repeats), so such a slot takes an unused token, and no more children
  // than the vocabulary.
  for (int i = 0; i < n; ++i) {
    std::int32_t parent = 0;
    std::vector<TokenId> unused;
    do {
      parent = chain ? i - 1 : std::uniform_int_distribution<std::int32_t>(-1, i - 1)(gen);
      unused.clear();
      for (TokenId x = 0; x < static_cast<TokenId>(vocab); ++x)
        if (t.tree.children_mode(parent) != ChildMode::kSampledWithoutReplacement ||
            t.tree.find_child(parent, x) < 0)
          unused.push_back(x);
    } while (unused.empty());
    if (t.tree.num_children(parent) == 0) {
      const auto mode = static_cast<ChildMode>(std::uniform_int_distribution<int>(1, 3)(gen));
      t.tree.set_children_source(parent, mode == ChildMode::kDeterministic ? -1 : parent + 1, mode);
    }
    t.parents.push_back(parent);
    const auto tok = unused[std::uniform_int_distribution<std::size_t>(0, unused.size() - 1)(gen)];
    t.tokens.push_back(tok);
    t.tree.add_node(parent, tok, 0.5f);
  }
  t.draft_matrix.resize(n + 1, vocab);
  for (std::int32_t slot = -1; slot < n; ++slot) {
    auto q = random_row(gen, vocab);
    // Sampled children must have positive draft probability.
    for (auto c = t.tree.first_child(slot); c >= 0; c = t.tree.next_sibling(c))
      if (q[static_cast<std::size_t>(t.tree.token(c))] == 0.0f)
        q[static_cast<std::size_t>(t.tree.token(c))] = 0.05f;
    double total = 0.0;
    for (const float v : q) total += v;
    for (auto& v : q) v = static_cast<float>(v / total);
    std::copy(q.begin(), q.end(), t.draft_matrix.row(slot + 1).begin());
    t.draft_rows.insert(t.draft_rows.end(), q.begin(), q.end());
    const auto mode = t.tree.children_mode(slot);
    t.draws.push_back(mode == ChildMode::kSampledWithReplacement      ? std::uint8_t(1)
                      : mode == ChildMode::kSampledWithoutReplacement ? std::uint8_t(2)
                                                                      : std::uint8_t(0));
    const auto p = random_row(gen, vocab);
    t.target_rows.insert(t.target_rows.end(), p.begin(), p.end());
  }
  return t;
}

}  // namespace specdec::testing
