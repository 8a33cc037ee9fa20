// Shared helpers of the tree-operation tests (trie_union_test.cpp,
// prune_to_budget_test.cpp): random trees, token sequences, brute-force
// checks. Functions are inline so a test file may use only some of them.
#pragma once

#include "specdec/core/draft_tree_ops.hpp"

#include <algorithm>
#include <cstdint>
#include <map>
#include <numeric>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "support/catch.hpp"
#include "support/exceptions.hpp"

using specdec::ChildMode;
using specdec::DraftTree;
using specdec::InvalidArgumentError;
using specdec::InvalidTreeError;
using specdec::prune_to_budget;
using specdec::TokenId;
using specdec::trie_union;

namespace {

constexpr std::int32_t kRoot = DraftTree::kRoot;
using Sequence = std::vector<TokenId>;

using specdec::testing::message_of;

// Draft probabilities with exact 1 (child ties parent), 0 (-inf) and
// repeated values, so cum_logprob ties are common.
inline float random_prob(std::mt19937& rng) {
  switch (std::uniform_int_distribution<int>(0, 9)(rng)) {
    case 0:
      return 1.0f;
    case 1:
      return 0.5f;
    case 2:
      return 0.25f;
    case 3:
      if (std::uniform_int_distribution<int>(0, 3)(rng) == 0) return 0.0f;
      [[fallthrough]];
    default:
      return std::uniform_real_distribution<float>(0.01f, 1.0f)(rng);
  }
}

// A random tree: parents are the previous node (per-tree probability) or
// uniform over the root and earlier nodes; tokens from [0, alphabet). With
// distinct_siblings, a token already used under the same parent is bumped to
// the next free one. Most slots with children get a random draft source.
inline DraftTree random_tree(std::mt19937& rng, std::int32_t num_nodes, bool distinct_siblings,
                      TokenId alphabet = 4, TokenId root = 500) {
  std::uniform_real_distribution<double> u01(0.0, 1.0);
  const double chain_bias = u01(rng);
  DraftTree t(root);
  std::vector<std::set<TokenId>> used(static_cast<std::size_t>(num_nodes) + 1);
  for (std::int32_t i = 0; i < num_nodes; ++i) {
    const std::int32_t parent = i > 0 && u01(rng) < chain_bias
                                    ? i - 1
                                    : std::uniform_int_distribution<std::int32_t>(-1, i - 1)(rng);
    auto token = std::uniform_int_distribution<TokenId>(0, alphabet - 1)(rng);
    if (distinct_siblings) {
      auto& taken = used[static_cast<std::size_t>(parent + 1)];
      while (taken.count(token) != 0) ++token;
      taken.insert(token);
    }
    t.add_node(parent, token, random_prob(rng));
  }
  for (std::int32_t s = kRoot; s < t.size(); ++s)
    if (t.num_children(s) > 0 && u01(rng) < 0.8)
      t.set_children_source(s, std::uniform_int_distribution<std::int32_t>(-1, 30)(rng),
                            static_cast<ChildMode>(std::uniform_int_distribution<int>(1, 3)(rng)));
  return t;
}

// Tokens from the root's child down to node i, by walking parent links.
inline Sequence sequence_of(const DraftTree& t, std::int32_t i) {
  Sequence s;
  for (; i != kRoot; i = t.node(i).parent) s.push_back(t.node(i).token);
  std::reverse(s.begin(), s.end());
  return s;
}

inline std::multiset<Sequence> sequences(const DraftTree& t) {
  std::multiset<Sequence> out;
  for (std::int32_t i = 0; i < t.size(); ++i) out.insert(sequence_of(t, i));
  return out;
}

inline bool has_duplicate_siblings(const DraftTree& t) {
  for (std::int32_t s = kRoot; s < t.size(); ++s) {
    std::set<TokenId> seen;
    for (auto c : t.children(s))
      if (!seen.insert(t.token(c)).second) return true;
  }
  return false;
}

// Requires x and y to be the same tree: root, nodes, sibling order and the
// draft source of every slot (b's rows shifted by row_offset).
inline void require_same_tree(const DraftTree& x, const DraftTree& y, std::int32_t row_offset = 0) {
  REQUIRE(x.root_token() == y.root_token());
  REQUIRE(x.size() == y.size());
  for (std::int32_t i = 0; i < x.size(); ++i) {
    REQUIRE(x.token(i) == y.token(i));
    REQUIRE(x.parent(i) == y.parent(i));
    REQUIRE(x.node(i).draft_prob == y.node(i).draft_prob);
    REQUIRE(x.node(i).depth == y.node(i).depth);
    REQUIRE(x.node(i).cum_logprob == y.node(i).cum_logprob);
  }
  for (std::int32_t s = kRoot; s < x.size(); ++s) {
    REQUIRE(x.children(s) == y.children(s));
    REQUIRE(x.children_mode(s) == y.children_mode(s));
    const auto row = y.children_draft_row(s);
    REQUIRE(x.children_draft_row(s) == (row < 0 ? row : row + row_offset));
  }
}

// How often each case of the union's source rule was met (for coverage).
struct UnionSourceCases {
  int a_alone = 0;          // children from a alone: a's source
  int one_b_slot = 0;       // children from one slot of b alone: its source, row shifted
  int a_and_b = 0;          // a and b: deterministic
  int coinciding = 0;       // ... of which b's children were all a's children
  int two_b_slots = 0;      // two or more slots of b: deterministic
};

// Checks the draft source of every slot of u = trie_union(a, b, offset)
// against the rule. The contributors of a union slot s are a (when a has
// children at s) and every slot of b that has children and maps to s:
//  * none: a's source stands (none, row -1, for nodes new from b);
//  * a alone: a's source;
//  * one slot of b alone: that slot's source, row shifted by the offset
//    (-1 stays -1);
//  * more than one (a and b, or two slots of b): kDeterministic, even when
//    b's children are all a's children.
// The slot's children are also rebuilt from the maps: exactly a's children at
// s and the images of those b slots' children.
inline void require_union_sources(const DraftTree& a, const DraftTree& b, const specdec::TreeUnion& u,
                           std::int32_t offset, UnionSourceCases& cases) {
  const auto map_b = [&](std::int32_t i) {
    return i == kRoot ? kRoot : u.from_b[static_cast<std::size_t>(i)];
  };
  for (std::int32_t s = kRoot; s < u.tree.size(); ++s) {
    INFO("union slot " << s);
    const bool in_a = s < a.size();
    const bool a_contributes = in_a && a.num_children(s) > 0;
    std::set<std::int32_t> a_children, b_children;
    if (in_a)
      for (auto c : a.children(s)) a_children.insert(u.from_a[static_cast<std::size_t>(c)]);
    std::vector<std::int32_t> b_slots;
    for (std::int32_t t = kRoot; t < b.size(); ++t) {
      if (map_b(t) != s || b.num_children(t) == 0) continue;
      b_slots.push_back(t);
      for (auto c : b.children(t)) b_children.insert(map_b(c));
    }
    std::set<std::int32_t> all_children = a_children;
    all_children.insert(b_children.begin(), b_children.end());
    const auto kids = u.tree.children(s);
    REQUIRE(std::set<std::int32_t>(kids.begin(), kids.end()) == all_children);
    REQUIRE(kids.size() == all_children.size());

    const auto contributors = (a_contributes ? 1u : 0u) + b_slots.size();
    const auto mode = u.tree.children_mode(s);
    const auto row = u.tree.children_draft_row(s);
    if (contributors == 0) {
      REQUIRE(kids.empty());
      REQUIRE(mode == (in_a ? a.children_mode(s) : ChildMode::kNone));
      REQUIRE(row == (in_a ? a.children_draft_row(s) : -1));
    } else if (contributors == 1 && a_contributes) {
      ++cases.a_alone;
      REQUIRE(mode == a.children_mode(s));
      REQUIRE(row == a.children_draft_row(s));
    } else if (contributors == 1) {
      ++cases.one_b_slot;
      const auto b_row = b.children_draft_row(b_slots[0]);
      REQUIRE(mode == b.children_mode(b_slots[0]));
      REQUIRE(row == (b_row < 0 ? b_row : b_row + offset));
    } else {
      if (a_contributes) {
        ++cases.a_and_b;
        if (std::includes(a_children.begin(), a_children.end(), b_children.begin(),
                          b_children.end()))
          ++cases.coinciding;
      }
      if (b_slots.size() >= 2) ++cases.two_b_slots;
      REQUIRE(mode == ChildMode::kDeterministic);
    }
  }
}

// The brute-force rerank: indices of the top `budget` nodes by cum_logprob,
// ties to the lower index, in increasing order.
inline std::vector<std::int32_t> top_by_score(const DraftTree& t, std::int32_t budget) {
  std::vector<std::int32_t> order(static_cast<std::size_t>(t.size()));
  std::iota(order.begin(), order.end(), 0);
  std::sort(order.begin(), order.end(), [&](std::int32_t x, std::int32_t y) {
    const auto sx = t.node(x).cum_logprob, sy = t.node(y).cum_logprob;
    return sx > sy || (sx == sy && x < y);
  });
  order.resize(static_cast<std::size_t>(std::min(budget, t.size())));
  std::sort(order.begin(), order.end());
  return order;
}

}  // namespace
