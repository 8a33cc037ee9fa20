// Static-shape draft trees: a fixed tree shape (Medusa's "choices", arXiv
// 2401.10774, §2.1.2 and §2.3.3; Sequoia's DP-optimal shapes, arXiv
// 2402.12374, §3.1.1) drafted level by level, one drafter call per depth.
//
// A shape node is (parent, rank): "the rank-th child of the parent", where the
// k-th child is the k-th best token of the parent's draft row
// (kDeterministic, verified by the target-only rule, mode (c) of
// docs/methods.md), the k-th draw without replacement from it
// (kSampledWithoutReplacement, verified by Sequoia's rule, arXiv 2402.12374,
// §3.2, Algorithm 2), or the k-th of independent draws from it
// (kSampledWithReplacement: an i.i.d. tree, verified by SpecInfer's
// multi-step speculative sampling, arXiv 2305.09781, §4.3; siblings may
// repeat a token). Either way the rule stays lossless: which children a slot
// gets depends on the draft side only.
#pragma once

#include <algorithm>
#include <charconv>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "specdec/concepts.hpp"
#include "specdec/core/draft_tree.hpp"
#include "specdec/core/error.hpp"
#include "specdec/core/prob_matrix.hpp"
#include "specdec/core/rng.hpp"
#include "specdec/core/round.hpp"
#include "specdec/tree/child_selection.hpp"

namespace specdec {

struct ShapeNode {
  std::int32_t parent = -1;  // earlier shape node, or -1 for a child of the root
  std::int32_t rank = 0;     // 0 = best / first-drawn child of the parent, 1 = next, ...
};

// A tree shape without tokens. Nodes are ordered parents first, and the
// children of each parent appear in rank order 0, 1, 2, ... (so ranks have no
// gaps and a parent's children list is its rank list).
class StaticTreeShape {
 public:
  StaticTreeShape() = default;

  // Throws InvalidTreeError unless every parent is -1 or an earlier node and
  // the k-th listed child of each parent has rank k.
  explicit StaticTreeShape(std::vector<ShapeNode> nodes) {
    std::vector<std::int32_t> children_seen(nodes.size() + 1, 0);  // by slot: root = 0
    for (std::size_t i = 0; i < nodes.size(); ++i) {
      const auto& n = nodes[i];
      if (n.parent < -1 || n.parent >= static_cast<std::int32_t>(i))
        throw InvalidTreeError(fmt::format(
            "StaticTreeShape: parent {} of node {} is not an earlier node (nor the root, -1)", n.parent, i));
      auto& seen = children_seen[static_cast<std::size_t>(n.parent + 1)];
      if (n.rank != seen)
        throw InvalidTreeError(fmt::format(
            "StaticTreeShape: node {} has rank {} but is child number {} (from 0) of parent {}; sibling "
            "ranks must be 0, 1, 2, ... in order",
            i, n.rank, seen, n.parent));
      ++seen;
    }
    nodes_ = std::move(nodes);
    depth_.resize(nodes_.size());
    num_children_.assign(nodes_.size() + 1, 0);
    for (std::size_t i = 0; i < nodes_.size(); ++i) {
      const auto p = nodes_[i].parent;
      depth_[i] = p < 0 ? 1 : depth_[static_cast<std::size_t>(p)] + 1;
      ++num_children_[static_cast<std::size_t>(p + 1)];
    }
  }

  // From Medusa-style choices: each path lists the ranks from the root down,
  // e.g. {{0}, {1}, {0, 0}, {0, 1}, {1, 0}}. Paths may come in any order; the
  // shape orders them as Medusa does, by (length, ranks), which is BFS order.
  // Throws InvalidTreeError for an empty path, a negative rank, a duplicate,
  // a missing proper prefix, or a gap among sibling ranks.
  static StaticTreeShape from_choices(std::vector<std::vector<std::int32_t>> choices) {
    std::sort(choices.begin(), choices.end(), [](const auto& a, const auto& b) {
      return a.size() != b.size() ? a.size() < b.size() : a < b;
    });
    std::vector<ShapeNode> nodes;
    nodes.reserve(choices.size());
    for (std::size_t i = 0; i < choices.size(); ++i) {
      const auto& path = choices[i];
      if (path.empty())
        throw InvalidTreeError("StaticTreeShape::from_choices: empty path (the root is implicit)");
      for (const auto r : path)
        if (r < 0)
          throw InvalidTreeError(
              fmt::format("StaticTreeShape::from_choices: path {} has negative rank {}", describe(path), r));
      if (i > 0 && choices[i - 1] == path)
        throw InvalidTreeError(
            fmt::format("StaticTreeShape::from_choices: path {} appears twice", describe(path)));
      std::int32_t parent = -1;
      if (path.size() > 1) {
        const std::vector<std::int32_t> prefix(path.begin(), path.end() - 1);
        const auto it = std::lower_bound(
            choices.begin(), choices.begin() + static_cast<std::ptrdiff_t>(i), prefix,
            [](const auto& a, const auto& b) { return a.size() != b.size() ? a.size() < b.size() : a < b; });
        if (it == choices.begin() + static_cast<std::ptrdiff_t>(i) || *it != prefix)
          throw InvalidTreeError(fmt::format("StaticTreeShape::from_choices: path {} lacks its prefix {}",
                                             describe(path), describe(prefix)));
        parent = static_cast<std::int32_t>(it - choices.begin());
      }
      // Siblings are adjacent and sorted, so rank r needs rank r - 1 just before it.
      const bool first_sibling = i == 0 || choices[i - 1].size() != path.size() ||
                                 !std::equal(path.begin(), path.end() - 1, choices[i - 1].begin());
      const auto expected = first_sibling ? 0 : choices[i - 1].back() + 1;
      if (path.back() != expected)
        throw InvalidTreeError(fmt::format(
            "StaticTreeShape::from_choices: path {} has rank {} but its parent's ranks below it stop at {}; "
            "sibling ranks must be 0, 1, 2, ... without gaps",
            describe(path), path.back(), expected - 1));
      nodes.push_back({parent, path.back()});
    }
    return StaticTreeShape(std::move(nodes));
  }

  // A chain of `length` rank-0 nodes (top-1 / single-sample drafting).
  static StaticTreeShape chain(std::int32_t length) {
    if (length < 0)
      throw InvalidArgumentError(fmt::format("StaticTreeShape::chain: length must be >= 0, got {}", length));
    std::vector<ShapeNode> nodes;
    for (std::int32_t i = 0; i < length; ++i) nodes.push_back({i - 1, 0});
    return StaticTreeShape(std::move(nodes));
  }

  std::int32_t size() const { return static_cast<std::int32_t>(nodes_.size()); }
  bool empty() const { return nodes_.empty(); }
  std::span<const ShapeNode> nodes() const { return nodes_; }
  const ShapeNode& node(std::int32_t i) const {
    check_node(i);
    return nodes_[static_cast<std::size_t>(i)];
  }
  // 1 for children of the root.
  std::int32_t depth(std::int32_t i) const {
    check_node(i);
    return depth_[static_cast<std::size_t>(i)];
  }
  std::int32_t max_depth() const {
    return depth_.empty() ? 0 : *std::max_element(depth_.begin(), depth_.end());
  }
  // Children of a node, or of the root for -1.
  std::int32_t num_children(std::int32_t parent) const {
    if (parent < -1 || parent >= size())
      throw InvalidTreeError(
          fmt::format("StaticTreeShape: node index {} out of range [-1, {})", parent, size()));
    return num_children_[static_cast<std::size_t>(parent + 1)];
  }
  // Rank paths from the root, in node order (the inverse of from_choices).
  std::vector<std::vector<std::int32_t>> choices() const {
    std::vector<std::vector<std::int32_t>> out(nodes_.size());
    for (std::size_t i = 0; i < nodes_.size(); ++i) {
      if (nodes_[i].parent >= 0) out[i] = out[static_cast<std::size_t>(nodes_[i].parent)];
      out[i].push_back(nodes_[i].rank);
    }
    return out;
  }

  friend bool operator==(const StaticTreeShape& a, const StaticTreeShape& b) {
    return a.choices() == b.choices();
  }

 private:
  static std::string describe(const std::vector<std::int32_t>& path) {
    std::string out = "{";
    for (std::size_t i = 0; i < path.size(); ++i) out += (i > 0 ? ", " : "") + std::to_string(path[i]);
    return out + "}";
  }
  void check_node(std::int32_t i) const {
    if (i < 0 || i >= size())
      throw InvalidTreeError(fmt::format("StaticTreeShape: node index {} out of range [0, {})", i, size()));
  }

  std::vector<ShapeNode> nodes_;
  std::vector<std::int32_t> depth_;
  std::vector<std::int32_t> num_children_;  // by slot: root = 0, node i = i + 1
};

// Drafts a StaticTreeShape: one propose call per depth for every frontier slot
// of that depth (one drafter forward per level is what makes static trees
// cheap), then each slot takes its children from its own row.
//
// Budget (DraftBudget), applied to the shape before drafting:
//   max_depth:  shape nodes deeper than this are dropped;
//   max_nodes, verify_nodes:
//               then the first min(max_nodes, verify_nodes) remaining nodes in
//               shape order are kept (a node whose parent was dropped is
//               dropped, so whole subtrees go; from_choices orders shapes BFS,
//               so the deepest, highest-ranked nodes go first). Both bound the
//               tree because a decoder verifies every drafted node (as
//               ChainBuilder does);
//   stop_below: a drafted node whose draft_prob is below this is not expanded
//               (not even asked for a row); the root is always expanded.
// A row of zeros gives its slot no children; a row with fewer nonzero tokens
// than the shape asks for gives only those (the missing ranks' subtrees are
// not drafted). Every slot that gets children records its row and mode.
//
// Children: one ChildMode for every request, or a ChildDraw that follows
// the drafter's request (ChildDraw::by_request(): top-k when greedy, drawn
// without replacement when sampling), chosen once per tree.
//
// Uniforms: the sampled modes take exactly m uniforms from `rng` per
// expanded slot wanting m children, whatever the row holds; kDeterministic
// takes none.
class StaticTreeBuilder {
 public:
  explicit StaticTreeBuilder(StaticTreeShape shape, ChildMode mode = ChildMode::kDeterministic)
      : StaticTreeBuilder(std::move(shape), ChildDraw::same(mode)) {}
  StaticTreeBuilder(StaticTreeShape shape, ChildDraw draw) : shape_(std::move(shape)), draw_(draw) {
    for (const auto mode : {draw.greedy, draw.sampled})
      if (mode != ChildMode::kDeterministic && mode != ChildMode::kSampledWithoutReplacement &&
          mode != ChildMode::kSampledWithReplacement)
        throw InvalidArgumentError(fmt::format(
            "StaticTreeBuilder: child mode {} is not supported; use kDeterministic (top-k), "
            "kSampledWithoutReplacement (distinct draws) or kSampledWithReplacement (i.i.d. draws)",
            static_cast<int>(mode)));
  }

  const StaticTreeShape& shape() const { return shape_; }
  const ChildDraw& draw() const { return draw_; }

  // rows is emptied and receives one row per expanded slot, level by level.
  template <Drafter D>
  void build(D& drafter, const DraftBudget& budget, TokenId root, RandomStream& rng, DraftTree& tree,
             ProbMatrix& rows) {
    static constexpr const char* kWho = "StaticTreeBuilder";
    detail::check_builder_budget(kWho, budget);
    tree.clear(root);
    const auto vocab = detail::reset_rows(kWho, static_cast<std::int64_t>(drafter.vocab_size()), rows);

    // The shape after the budget: kept_children_[slot] = how many (a prefix of
    // the ranks, since siblings are listed in rank order).
    const auto n = static_cast<std::size_t>(shape_.size());
    kept_children_.assign(n + 1, 0);
    shape_child_.assign(n + 1, {});
    const auto max_nodes = std::min(budget.max_nodes, budget.verify_nodes);
    std::int32_t kept = 0;
    kept_.assign(n, false);
    for (std::size_t i = 0; i < n && kept < max_nodes; ++i) {
      const auto& s = shape_.nodes()[i];
      if (shape_.depth(static_cast<std::int32_t>(i)) > budget.max_depth) continue;
      // (Implied by the two rules: a parent is only dropped for depth, and then
      // so is its deeper child. Kept so the closure does not rest on that.)
      if (s.parent >= 0 && !kept_[static_cast<std::size_t>(s.parent)]) continue;
      kept_[i] = true;
      ++kept;
      ++kept_children_[static_cast<std::size_t>(s.parent + 1)];
      shape_child_[static_cast<std::size_t>(s.parent + 1)].push_back(static_cast<std::int32_t>(i));
    }

    const ChildMode mode = draw_.mode_for(drafter);
    // Level by level: `level` holds (tree slot, shape slot) pairs of one depth.
    level_.assign(1, {DraftTree::kRoot, -1});
    while (!level_.empty()) {
      frontier_.clear();
      expand_.clear();
      for (const auto& [slot, shape_slot] : level_) {
        if (kept_children_[static_cast<std::size_t>(shape_slot + 1)] == 0) continue;
        if (slot != DraftTree::kRoot && tree.node(slot).draft_prob < budget.stop_below) continue;
        frontier_.push_back(slot);
        expand_.push_back(shape_slot);
      }
      level_.clear();
      if (frontier_.empty()) break;
      const auto first_row = detail::propose_level(kWho, drafter, tree, frontier_, vocab, rows);
      for (std::size_t f = 0; f < frontier_.size(); ++f) {
        const auto slot = frontier_[f];
        const auto shape_slot = static_cast<std::size_t>(expand_[f] + 1);
        const auto wanted = kept_children_[shape_slot];
        const auto r = first_row + static_cast<std::int64_t>(f);
        const auto row = rows.view().row(r);
        // Draw the uniforms before looking at the row: consumption is fixed.
        const PhiloxUniforms u = mode != ChildMode::kDeterministic
                                     ? rng.take(static_cast<std::uint64_t>(wanted))
                                     : PhiloxUniforms{};
        if (!detail::has_proposal(kWho, row, r)) continue;
        if (mode == ChildMode::kDeterministic)
          detail::top_tokens(row, wanted, tokens_);
        else if (mode == ChildMode::kSampledWithoutReplacement)
          detail::sample_without_replacement(row, wanted, u, scratch_, tokens_);
        else
          detail::sample_with_replacement(row, wanted, u, tokens_);
        if (tokens_.empty()) continue;
        tree.set_children_source(slot, static_cast<std::int32_t>(r), mode);
        // Child k of the slot is shape child k (rank k); ranks the row could not
        // fill, and their subtrees, are not drafted.
        for (std::size_t k = 0; k < tokens_.size(); ++k) {
          const auto x = tokens_[k];
          const auto c = tree.add_node(slot, x, row[static_cast<std::size_t>(x)]);
          level_.push_back({c, shape_child_[shape_slot][k]});
        }
      }
    }
  }

 private:
  StaticTreeShape shape_;
  ChildDraw draw_;
  // Scratch, reused across rounds.
  std::vector<bool> kept_;
  std::vector<std::int32_t> kept_children_;
  std::vector<std::vector<std::int32_t>> shape_child_;
  std::vector<std::pair<std::int32_t, std::int32_t>> level_;
  std::vector<std::int32_t> frontier_, expand_;
  std::vector<TokenId> tokens_;
  std::vector<double> scratch_;
};

// Shapes as text, for command lines and configs: Medusa choices with ';'
// between paths and '.' between ranks, e.g. "0;1;0.0;0.1" = {{0}, {1}, {0, 0}, {0, 1}}.
inline StaticTreeShape parse_tree_shape(std::string_view text) {
  std::vector<std::vector<std::int32_t>> choices;
  for (std::size_t at = 0; at <= text.size();) {
    const auto end = std::min(text.find(';', at), text.size());
    const auto path_text = text.substr(at, end - at);
    std::vector<std::int32_t> path;
    for (std::size_t p = 0; p <= path_text.size();) {
      const auto q = std::min(path_text.find('.', p), path_text.size());
      const auto part = path_text.substr(p, q - p);
      std::int32_t rank = -1;
      const auto [ptr, ec] = std::from_chars(part.data(), part.data() + part.size(), rank);
      if (part.empty() || ec != std::errc{} || ptr != part.data() + part.size())
        throw InvalidArgumentError(fmt::format("tree shape '{}': '{}' is not a rank path like 0.1.0", text, path_text));
      path.push_back(rank);
      p = q + 1;
    }
    choices.push_back(std::move(path));
    at = end + 1;
  }
  return StaticTreeShape::from_choices(std::move(choices));
}

inline std::string format_tree_shape(const StaticTreeShape& shape) {
  std::string out;
  for (const auto& path : shape.choices()) {
    if (!out.empty()) out += ';';
    for (std::size_t i = 0; i < path.size(); ++i) {
      if (i > 0) out += '.';
      out += std::to_string(path[i]);
    }
  }
  return out;
}

}  // namespace specdec
