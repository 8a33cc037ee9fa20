// Operations that make a new DraftTree from existing ones: trie union (Lyanna
// verification fusion, arXiv 2602.21224, §6.2) and pruning to a node budget
// (Lyanna Algorithm 1's final step; EAGLE-2's rerank, arXiv 2406.16858, §4.2).
//
// Losslessness. The MSS rules (modes (a), (b) of docs/methods.md) are exact
// only if a slot's children are the draws from its draft distribution q *and
// the choice of rule does not depend on which tokens were drawn*. Keeping MSS
// "when the child set happens to be unchanged" would violate the second
// condition (e.g. pruning keeps all children exactly when they are all likely
// tokens, or when an early stop left the tree small), and was measured lossy.
// So both operations decide a slot's mode from structure alone: a slot whose
// children could have been selected or mixed becomes kDeterministic, whose
// target-only rule (mode (c)) is lossless for any child set chosen without
// looking at the target.
#pragma once

#include <cstdint>
#include <queue>
#include <vector>

#include <fmt/format.h>

#include "specdec/core/draft_tree.hpp"
#include "specdec/core/error.hpp"

namespace specdec {

struct TreeUnion {
  DraftTree tree;
  std::vector<std::int32_t> from_a;  // union index of a's node i
  std::vector<std::int32_t> from_b;  // union index of b's node i
};

// Trie union of two trees with the same root token. a is copied as it is
// (a's nodes keep their indices); each node of b merges into a node *of a*
// with the same token under the same parent, or is appended (b's order). b's
// nodes never merge with each other, so b's own duplicate siblings (i.i.d.
// drafting) stay distinct, as a's do. b's draft rows are shifted by
// `b_row_offset`, for callers that append b's draft matrix after a's.
//
// Modes: a slot with children from a alone keeps a's source; one with children
// from a single slot of b alone keeps that slot's source (row shifted); a slot
// that receives children from more than one contributor is kDeterministic,
// even if b's children all coincide with a's (whether they coincide depends on
// the drawn tokens; see the note at the top).
inline TreeUnion trie_union(const DraftTree& a, const DraftTree& b, std::int32_t b_row_offset = 0) {
  if (a.root_token() != b.root_token())
    throw InvalidTreeError(
        fmt::format("trie_union: roots differ (token {} vs token {})", a.root_token(), b.root_token()));
  TreeUnion u{a, {}, {}};
  for (std::int32_t i = 0; i < a.size(); ++i) u.from_a.push_back(i);
  const auto map_b = [&](std::int32_t b_index) {
    return b_index == DraftTree::kRoot ? DraftTree::kRoot : u.from_b[static_cast<std::size_t>(b_index)];
  };
  const auto child_of_a = [&](std::int32_t parent, TokenId token) {
    if (parent >= a.size()) return -1;  // parent is one of b's new nodes
    for (auto c = a.first_child(parent); c >= 0; c = a.next_sibling(c))
      if (a.token(c) == token) return c;
    return -1;
  };
  for (std::int32_t i = 0; i < b.size(); ++i) {
    const auto& n = b.node(i);
    const auto parent = map_b(n.parent);
    auto existing = child_of_a(parent, n.token);
    if (existing < 0) existing = u.tree.add_node(parent, n.token, n.draft_prob);
    u.from_b.push_back(existing);
  }
  // Count the contributors of each union slot: a (if it has children there)
  // and every slot of b with children that maps there.
  std::vector<std::int32_t> contributors(static_cast<std::size_t>(u.tree.size() + 1), 0);
  std::vector<std::int32_t> b_source(static_cast<std::size_t>(u.tree.size() + 1), -2);
  for (std::int32_t s = DraftTree::kRoot; s < a.size(); ++s)
    if (a.num_children(s) > 0) ++contributors[static_cast<std::size_t>(s + 1)];
  for (std::int32_t s = DraftTree::kRoot; s < b.size(); ++s) {
    if (b.num_children(s) == 0) continue;
    const auto slot = static_cast<std::size_t>(map_b(s) + 1);
    ++contributors[slot];
    b_source[slot] = s;
  }
  for (std::int32_t s = DraftTree::kRoot; s < u.tree.size(); ++s) {
    const auto slot = static_cast<std::size_t>(s + 1);
    if (contributors[slot] > 1) {
      u.tree.set_children_source(s, u.tree.children_draft_row(s), ChildMode::kDeterministic);
    } else if (contributors[slot] == 1 && b_source[slot] >= -1) {
      const auto bs = b_source[slot];
      const auto row = b.children_draft_row(bs);
      u.tree.set_children_source(s, row < 0 ? row : row + b_row_offset, b.children_mode(bs));
    }
  }
  return u;
}

struct PrunedTree {
  DraftTree tree;
  std::vector<std::int32_t> kept;  // original index of each node of `tree`
};

// Keeps the `budget` nodes of highest cum_logprob whose ancestors are all kept
// (best-first growth from the root, so the result is always connected; when
// children never outscore their parents this is exactly the top-`budget` set).
// Ties go to the lower index. Kept nodes stay in their original order.
//
// Modes: every slot that keeps children becomes kDeterministic (with its draft
// row kept for reference), even when the budget covers the whole tree.
// Selection by draft score looks at the drawn tokens, so the MSS rules no
// longer apply (see the note at the top); and whether a sampled tree fits the
// budget depends on what was drawn (its size varies with the draws when a
// builder stops early), so the mode must not: it is decided by the call alone.
inline PrunedTree prune_to_budget(const DraftTree& t, std::int32_t budget) {
  if (budget < 0)
    throw InvalidArgumentError(fmt::format("prune_to_budget: budget must be >= 0, got {}", budget));
  struct Entry {
    double score;
    std::int32_t index;
    bool operator<(const Entry& o) const {  // max-heap on score, then lower index
      return score < o.score || (score == o.score && index > o.index);
    }
  };
  std::priority_queue<Entry> frontier;
  for (auto c = t.first_child(DraftTree::kRoot); c >= 0; c = t.next_sibling(c))
    frontier.push({t.node(c).cum_logprob, c});
  std::vector<bool> keep(static_cast<std::size_t>(t.size()), false);
  for (std::int32_t taken = 0; taken < budget && !frontier.empty(); ++taken) {
    const auto e = frontier.top();
    frontier.pop();
    keep[static_cast<std::size_t>(e.index)] = true;
    for (auto c = t.first_child(e.index); c >= 0; c = t.next_sibling(c))
      frontier.push({t.node(c).cum_logprob, c});
  }

  PrunedTree out{DraftTree(t.root_token()), {}};
  std::vector<std::int32_t> new_index(static_cast<std::size_t>(t.size()), -1);
  for (std::int32_t i = 0; i < t.size(); ++i) {
    if (!keep[static_cast<std::size_t>(i)]) continue;
    const auto& n = t.node(i);
    const auto parent =
        n.parent == DraftTree::kRoot ? DraftTree::kRoot : new_index[static_cast<std::size_t>(n.parent)];
    new_index[static_cast<std::size_t>(i)] = out.tree.add_node(parent, n.token, n.draft_prob);
    out.kept.push_back(i);
  }
  for (std::int32_t s = DraftTree::kRoot; s < t.size(); ++s) {
    const auto ns = s == DraftTree::kRoot ? DraftTree::kRoot : new_index[static_cast<std::size_t>(s)];
    if (s != DraftTree::kRoot && ns < 0) continue;
    if (out.tree.num_children(ns) == 0) continue;
    out.tree.set_children_source(ns, t.children_draft_row(s), ChildMode::kDeterministic);
  }
  return out;
}

}  // namespace specdec
