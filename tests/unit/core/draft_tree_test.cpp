// Tests of DraftTree (include/specdec/core/draft_tree.hpp), the token tree of
// SpecInfer (arXiv 2305.09781, Definition 3.1; docs/methods.md, token trees):
// hand-made chains and branching trees, properties of the ancestor mask,
// positions and leaf paths over random trees (checked against walks of the
// parent array, never against the tree's own derived data), and rejection of
// bad input with typed errors.
#include "specdec/core/draft_tree.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "support/catch.hpp"
#include "support/exceptions.hpp"

using specdec::ChildMode;
using specdec::DraftTree;
using specdec::InvalidDistributionError;
using specdec::InvalidTreeError;
using specdec::ShapeError;
using specdec::TokenId;

namespace {

constexpr std::int32_t kRoot = DraftTree::kRoot;

using specdec::testing::message_of;

// A draft probability, with exact 1 (log 0: a child ties its parent), 0
// (log -inf) and repeated values mixed in.
float random_prob(std::mt19937& rng) {
  switch (std::uniform_int_distribution<int>(0, 19)(rng)) {
    case 0:
      return 1.0f;
    case 1:
      return 0.5f;
    case 2:
      return 0.0f;
    default:
      return std::uniform_real_distribution<float>(0.01f, 1.0f)(rng);
  }
}

// A random tree of `num_nodes` nodes. Each parent is either the previous node
// (with a per-tree probability, so trees range from bushy to deep) or uniform
// over the root and the earlier nodes. Tokens come from a small alphabet, so
// siblings often repeat. Most slots with children get a draft source.
DraftTree random_tree(std::mt19937& rng, std::int32_t num_nodes, TokenId root = 1000) {
  std::uniform_real_distribution<double> u01(0.0, 1.0);
  const double chain_bias = u01(rng);
  DraftTree t(root);
  for (std::int32_t i = 0; i < num_nodes; ++i) {
    const std::int32_t parent = i > 0 && u01(rng) < chain_bias
                                    ? i - 1
                                    : std::uniform_int_distribution<std::int32_t>(-1, i - 1)(rng);
    t.add_node(parent, std::uniform_int_distribution<TokenId>(0, 4)(rng), random_prob(rng));
  }
  for (std::int32_t s = kRoot; s < t.size(); ++s)
    if (t.num_children(s) > 0 && u01(rng) < 0.8)
      t.set_children_source(s, std::uniform_int_distribution<std::int32_t>(-1, 30)(rng),
                            static_cast<ChildMode>(std::uniform_int_distribution<int>(1, 3)(rng)));
  return t;
}

// Node indices from the root's child down to i, found by walking parent links.
std::vector<std::int32_t> walk_to_root(const DraftTree& t, std::int32_t i) {
  std::vector<std::int32_t> path;
  for (; i != kRoot; i = t.node(i).parent) path.push_back(i);
  std::reverse(path.begin(), path.end());
  return path;
}

// The nodes whose parent is `slot`, in index order (brute force).
std::vector<std::int32_t> children_by_scan(const DraftTree& t, std::int32_t slot) {
  std::vector<std::int32_t> out;
  for (std::int32_t i = 0; i < t.size(); ++i)
    if (t.node(i).parent == slot) out.push_back(i);
  return out;
}

// A mask row as packed words: bits at `cols` set, all others (padding too) clear.
std::vector<std::uint64_t> packed_row(const std::vector<std::int32_t>& cols, std::int32_t n) {
  std::vector<std::uint64_t> words(static_cast<std::size_t>((n + 63) / 64), 0);
  for (auto c : cols) words[static_cast<std::size_t>(c / 64)] |= std::uint64_t{1} << (c % 64);
  return words;
}

std::vector<std::uint64_t> row_of(const specdec::BitMatrix& m, std::int32_t i) {
  const auto r = m.row(i);
  return {r.begin(), r.end()};
}

// Sizes of the random trees: 500 draws from 1..80, plus sizes around the
// 64-column word boundaries of the mask (with and without the root column).
std::vector<std::int32_t> random_sizes(std::mt19937& rng) {
  std::vector<std::int32_t> sizes;
  for (int k = 0; k < 500; ++k)
    sizes.push_back(std::uniform_int_distribution<std::int32_t>(1, 80)(rng));
  for (std::int32_t n : {63, 64, 65, 127, 128, 129, 200}) sizes.push_back(n);
  return sizes;
}

// A hand-made branching tree (root token 7):
//
//   root ─ 0:10 ─┬─ 2:20 ── 5:30
//        │       ├─ 4:22
//        │       └─ 7:20   (same token as its sibling 2)
//        ├─ 1:11 ── 3:21
//        └─ 6:12
DraftTree branching_tree() {
  DraftTree t(7);
  t.add_node(kRoot, 10, 0.5f);    // 0
  t.add_node(kRoot, 11, 0.25f);   // 1
  t.add_node(0, 20, 0.5f);        // 2
  t.add_node(1, 21, 1.0f);        // 3
  t.add_node(0, 22, 0.125f);      // 4
  t.add_node(2, 30, 0.5f);        // 5
  t.add_node(kRoot, 12, 0.125f);  // 6
  t.add_node(0, 20, 0.25f);       // 7
  return t;
}

}  // namespace

// --- hand-made trees ------------------------------------------------------------

TEST_CASE("A chain is a chain whose mask is lower-triangular including the root column",
          "[unit][tree]") {
  const std::vector<TokenId> tokens{5, 9, 9, 2, 4};
  DraftTree t(100);
  for (std::int32_t i = 0; i < 5; ++i) CHECK(t.add_node(i - 1, tokens[i], 0.5f) == i);

  CHECK(t.is_chain());
  CHECK(t.size() == 5);
  CHECK(t.root_token() == 100);
  CHECK(t.max_depth() == 5);
  for (std::int32_t i = 0; i < 5; ++i) {
    CHECK(t.depth(i) == i + 1);
    CHECK(t.parent(i) == i - 1);
    CHECK(t.num_children(i) == (i < 4 ? 1 : 0));
  }

  const auto with_root = t.ancestor_mask();
  REQUIRE(with_root.size() == 6);
  for (std::int32_t i = 0; i < 6; ++i)
    for (std::int32_t j = 0; j < 6; ++j) CHECK(with_root.test(i, j) == (j <= i));
  const auto without_root = t.ancestor_mask(false);
  REQUIRE(without_root.size() == 5);
  for (std::int32_t i = 0; i < 5; ++i)
    for (std::int32_t j = 0; j < 5; ++j) CHECK(without_root.test(i, j) == (j <= i));

  CHECK(t.positions(10) == std::vector<std::int64_t>{11, 12, 13, 14, 15});
  CHECK(t.positions(0) == std::vector<std::int64_t>{1, 2, 3, 4, 5});
  CHECK(t.path_to(3) == std::vector<std::int32_t>{0, 1, 2, 3});
  CHECK(t.path_to(0) == std::vector<std::int32_t>{0});
  CHECK(t.path_to(kRoot).empty());

  const auto paths = t.leaf_paths();
  REQUIRE(paths.size() == 1);
  CHECK(paths[0] == std::vector<std::int32_t>{0, 1, 2, 3, 4});
  CHECK(t.tokens_of(paths[0]) == tokens);

  // Depth k has cum_logprob k * log(0.5).
  for (std::int32_t i = 0; i < 5; ++i)
    CHECK(t.node(i).cum_logprob == Approx((i + 1) * std::log(0.5)));
}

TEST_CASE("Trees with any branching are not chains", "[unit][tree]") {
  const std::vector<std::vector<std::int32_t>> not_chains{
      {-1, -1}, {-1, 0, 0}, {-1, 0, 1, 1}, {-1, 0, 1, 0}, {-1, 0, -1}};
  for (const auto& parents : not_chains) {
    DraftTree t(1);
    for (auto p : parents) t.add_node(p, 3, 0.5f);
    CHECK_FALSE(t.is_chain());
  }
  DraftTree single(1);
  single.add_node(kRoot, 3, 0.5f);
  CHECK(single.is_chain());
}

TEST_CASE("An empty tree is a chain with only the root in its mask and no paths", "[unit][tree]") {
  const DraftTree t(42);
  CHECK(t.empty());
  CHECK(t.size() == 0);
  CHECK(t.is_chain());
  CHECK(t.max_depth() == 0);
  CHECK(t.num_children(kRoot) == 0);
  CHECK(t.first_child(kRoot) == -1);
  CHECK(t.children(kRoot).empty());
  CHECK(t.find_child(kRoot, 0) == -1);
  CHECK(t.leaf_paths().empty());
  CHECK(t.positions(5).empty());
  const auto m = t.ancestor_mask();
  REQUIRE(m.size() == 1);
  CHECK(m.test(0, 0));
  CHECK(t.ancestor_mask(false).size() == 0);
  CHECK(DraftTree().root_token() == specdec::kNoToken);
}

TEST_CASE("A branching tree links children in insertion order through first_child and next_sibling",
          "[unit][tree]") {
  const auto t = branching_tree();
  REQUIRE(t.size() == 8);
  CHECK_FALSE(t.is_chain());

  CHECK(t.first_child(kRoot) == 0);
  CHECK(t.next_sibling(0) == 1);
  CHECK(t.next_sibling(1) == 6);
  CHECK(t.next_sibling(6) == -1);
  CHECK(t.first_child(0) == 2);
  CHECK(t.next_sibling(2) == 4);
  CHECK(t.next_sibling(4) == 7);
  CHECK(t.next_sibling(7) == -1);
  CHECK(t.first_child(5) == -1);

  CHECK(t.children(kRoot) == std::vector<std::int32_t>{0, 1, 6});
  CHECK(t.children(0) == std::vector<std::int32_t>{2, 4, 7});
  CHECK(t.children(1) == std::vector<std::int32_t>{3});
  CHECK(t.children(2) == std::vector<std::int32_t>{5});
  CHECK(t.children(5).empty());

  CHECK(t.num_children(kRoot) == 3);
  CHECK(t.num_children(0) == 3);
  CHECK(t.num_children(1) == 1);
  CHECK(t.num_children(2) == 1);
  for (std::int32_t leaf : {3, 4, 5, 6, 7}) CHECK(t.num_children(leaf) == 0);

  CHECK(t.find_child(0, 20) == 2);  // the first of the two 20s
  CHECK(t.find_child(0, 22) == 4);
  CHECK(t.find_child(0, 10) == -1);  // a token of another level
  CHECK(t.find_child(kRoot, 12) == 6);
  CHECK(t.find_child(kRoot, 20) == -1);
  CHECK(t.find_child(2, 30) == 5);
  CHECK(t.find_child(3, 10) == -1);

  CHECK(t.max_depth() == 3);
  CHECK(t.depth(5) == 3);
  CHECK(t.depth(7) == 2);
  CHECK(t.depth(6) == 1);
  CHECK(t.path_to(5) == std::vector<std::int32_t>{0, 2, 5});
  CHECK(t.tokens_of(t.path_to(5)) == std::vector<TokenId>{10, 20, 30});
  CHECK(t.tokens_of(t.path_to(7)) == std::vector<TokenId>{10, 20});
  CHECK(t.tokens_of(std::vector<std::int32_t>{}).empty());
  CHECK(t.positions(100) == std::vector<std::int64_t>{101, 101, 102, 102, 102, 103, 101, 102});

  // Leaves 3, 4, 5, 6, 7 in index order.
  const std::vector<std::vector<std::int32_t>> expected_paths{
      {1, 3}, {0, 4}, {0, 2, 5}, {6}, {0, 7}};
  CHECK(t.leaf_paths() == expected_paths);

  // Mask rows as ancestor sets, root column 0, node i in column i + 1.
  const std::vector<std::vector<std::int32_t>> ancestors{
      {0, 1}, {0, 2}, {0, 1, 3}, {0, 2, 4}, {0, 1, 5}, {0, 1, 3, 6}, {0, 7}, {0, 1, 8}};
  const auto m = t.ancestor_mask();
  REQUIRE(m.size() == 9);
  CHECK(row_of(m, 0) == packed_row({0}, 9));
  for (std::int32_t i = 0; i < 8; ++i) CHECK(row_of(m, i + 1) == packed_row(ancestors[i], 9));
  const auto m0 = t.ancestor_mask(false);
  REQUIRE(m0.size() == 8);
  CHECK(row_of(m0, 5) == packed_row({0, 2, 5}, 8));
  CHECK(row_of(m0, 6) == packed_row({6}, 8));
}

TEST_CASE("set_children_source records the draft row and mode of a slot and nothing else",
          "[unit][tree]") {
  auto t = branching_tree();
  for (std::int32_t s = kRoot; s < t.size(); ++s) {
    CHECK(t.children_mode(s) == ChildMode::kNone);
    CHECK(t.children_draft_row(s) == -1);
  }
  t.set_children_source(kRoot, 0, ChildMode::kSampledWithReplacement);
  t.set_children_source(0, 3, ChildMode::kDeterministic);
  t.set_children_source(1, 2, ChildMode::kSampledWithoutReplacement);
  CHECK(t.children_mode(kRoot) == ChildMode::kSampledWithReplacement);
  CHECK(t.children_draft_row(kRoot) == 0);
  CHECK(t.children_mode(0) == ChildMode::kDeterministic);
  CHECK(t.children_draft_row(0) == 3);
  CHECK(t.children_mode(1) == ChildMode::kSampledWithoutReplacement);
  CHECK(t.children_draft_row(1) == 2);
  for (std::int32_t s = 2; s < t.size(); ++s) {
    CHECK(t.children_mode(s) == ChildMode::kNone);
    CHECK(t.children_draft_row(s) == -1);
  }
  // A later call overwrites; row -1 ("no row") is allowed.
  t.set_children_source(0, -1, ChildMode::kSampledWithReplacement);
  CHECK(t.children_mode(0) == ChildMode::kSampledWithReplacement);
  CHECK(t.children_draft_row(0) == -1);
  // A node added after its parent's source was set does not reset it, and
  // the new node's own slot starts empty.
  const auto added = t.add_node(1, 50, 0.5f);
  CHECK(t.children_mode(1) == ChildMode::kSampledWithoutReplacement);
  CHECK(t.children_draft_row(1) == 2);
  CHECK(t.children_mode(added) == ChildMode::kNone);
  CHECK(t.children_draft_row(added) == -1);
}

TEST_CASE("from_parents builds the same tree as successive add_node calls", "[unit][tree]") {
  const std::vector<TokenId> tokens{10, 11, 20, 21, 22, 30};
  const std::vector<std::int32_t> parents{-1, -1, 0, 1, 0, 2};
  const std::vector<float> probs{0.5f, 0.25f, 1.0f, 0.0f, 0.75f, 0.5f};
  const auto t = DraftTree::from_parents(3, tokens, parents, probs);
  DraftTree u(3);
  for (std::size_t i = 0; i < tokens.size(); ++i) u.add_node(parents[i], tokens[i], probs[i]);
  REQUIRE(t.size() == u.size());
  CHECK(t.root_token() == 3);
  for (std::int32_t i = 0; i < t.size(); ++i) {
    CHECK(t.token(i) == tokens[static_cast<std::size_t>(i)]);
    CHECK(t.parent(i) == parents[static_cast<std::size_t>(i)]);
    CHECK(t.node(i).draft_prob == probs[static_cast<std::size_t>(i)]);
    CHECK(t.node(i).depth == u.node(i).depth);
    CHECK(t.node(i).cum_logprob == u.node(i).cum_logprob);
  }
  for (std::int32_t s = kRoot; s < t.size(); ++s) CHECK(t.children(s) == u.children(s));
  CHECK(t.ancestor_mask() == u.ancestor_mask());
}

TEST_CASE("cum_logprob sums the log draft probabilities along the root path", "[unit][tree]") {
  DraftTree t(0);
  t.add_node(kRoot, 1, 0.5f);  // 0
  t.add_node(0, 2, 0.25f);     // 1
  t.add_node(1, 3, 1.0f);      // 2: probability one adds nothing
  t.add_node(0, 4, 0.0f);      // 3: probability zero gives -inf
  t.add_node(3, 5, 0.5f);      // 4: and stays -inf below
  CHECK(t.node(0).cum_logprob == Approx(std::log(0.5)));
  CHECK(t.node(1).cum_logprob == Approx(std::log(0.125)));
  CHECK(t.node(2).cum_logprob == t.node(1).cum_logprob);
  CHECK(std::isinf(t.node(3).cum_logprob));
  CHECK(t.node(3).cum_logprob < 0);
  CHECK(std::isinf(t.node(4).cum_logprob));
  CHECK(t.node(4).cum_logprob < 0);
}

TEST_CASE("clear empties the tree, sets the new root and leaves it reusable", "[unit][tree]") {
  auto t = branching_tree();
  t.set_children_source(kRoot, 4, ChildMode::kDeterministic);
  t.clear(99);
  CHECK(t.empty());
  CHECK(t.root_token() == 99);
  CHECK(t.num_children(kRoot) == 0);
  CHECK(t.first_child(kRoot) == -1);
  CHECK(t.children_mode(kRoot) == ChildMode::kNone);
  CHECK(t.children_draft_row(kRoot) == -1);
  CHECK(t.max_depth() == 0);
  t.add_node(kRoot, 1, 0.5f);
  t.add_node(0, 2, 0.5f);
  CHECK(t.is_chain());
  CHECK(t.children(kRoot) == std::vector<std::int32_t>{0});
  CHECK(t.children(0) == std::vector<std::int32_t>{1});
  CHECK(t.next_sibling(0) == -1);
  CHECK(t.leaf_paths() == std::vector<std::vector<std::int32_t>>{{0, 1}});
}

// --- properties over random trees -------------------------------------------------

TEST_CASE("Random trees: mask bit (i, j) is set iff j is on the path to i, plus the root column",
          "[unit][tree][property]") {
  std::mt19937 rng(0x5eed01);
  for (const auto n : random_sizes(rng)) {
    const auto t = random_tree(rng, n);
    INFO("tree of " << n << " nodes");
    const auto with_root = t.ancestor_mask(true);
    const auto without_root = t.ancestor_mask(false);
    REQUIRE(with_root.size() == n + 1);
    REQUIRE(without_root.size() == n);
    REQUIRE(with_root.words_per_row() == (n + 1 + 63) / 64);
    REQUIRE(without_root.words_per_row() == (n + 63) / 64);
    REQUIRE(with_root.words().size() ==
            static_cast<std::size_t>((n + 1) * with_root.words_per_row()));
    // The root sees only itself.
    REQUIRE(row_of(with_root, 0) == packed_row({0}, n + 1));
    for (std::int32_t i = 0; i < n; ++i) {
      const auto path = walk_to_root(t, i);
      REQUIRE(t.path_to(i) == path);
      std::vector<std::int32_t> cols{0};  // the root column
      for (auto j : path) cols.push_back(j + 1);
      // Exact words: ancestors set, everything else (padding included) clear.
      REQUIRE(row_of(with_root, i + 1) == packed_row(cols, n + 1));
      REQUIRE(row_of(without_root, i) == packed_row(path, n));
    }
  }
}

TEST_CASE("Random trees: positions are the root position plus the depth",
          "[unit][tree][property]") {
  std::mt19937 rng(0x5eed02);
  for (const auto n : random_sizes(rng)) {
    const auto t = random_tree(rng, n);
    const auto mask = t.ancestor_mask();
    std::int32_t deepest = 0;
    for (const std::int64_t root_position :
         {std::int64_t{0}, std::int64_t{37}, std::int64_t{1} << 40}) {
      const auto pos = t.positions(root_position);
      REQUIRE(pos.size() == static_cast<std::size_t>(n));
      for (std::int32_t i = 0; i < n; ++i) {
        const auto steps = static_cast<std::int32_t>(walk_to_root(t, i).size());
        deepest = std::max(deepest, steps);
        REQUIRE(t.depth(i) == steps);
        REQUIRE(pos[static_cast<std::size_t>(i)] == root_position + steps);
        // EAGLE-2's tree_position_ids = mask.sum(1) - 1 agrees.
        std::int32_t bits = 0;
        for (auto w : mask.row(i + 1)) bits += std::popcount(w);
        REQUIRE(pos[static_cast<std::size_t>(i)] == root_position + bits - 1);
      }
    }
    REQUIRE(t.max_depth() == deepest);
  }
}

TEST_CASE("Random trees: leaf paths follow parent links from a root child to a leaf, covering all",
          "[unit][tree][property]") {
  std::mt19937 rng(0x5eed03);
  for (const auto n : random_sizes(rng)) {
    const auto t = random_tree(rng, n);
    std::vector<bool> is_parent(static_cast<std::size_t>(n), false);
    for (std::int32_t i = 0; i < n; ++i)
      if (t.node(i).parent != kRoot) is_parent[static_cast<std::size_t>(t.node(i).parent)] = true;
    std::vector<std::int32_t> leaves;
    for (std::int32_t i = 0; i < n; ++i)
      if (!is_parent[static_cast<std::size_t>(i)]) leaves.push_back(i);

    const auto paths = t.leaf_paths();
    REQUIRE(paths.size() == leaves.size());
    std::vector<bool> covered(static_cast<std::size_t>(n), false);
    for (std::size_t k = 0; k < paths.size(); ++k) {
      const auto& path = paths[k];
      REQUIRE_FALSE(path.empty());
      REQUIRE(t.node(path.front()).parent == kRoot);
      for (std::size_t d = 1; d < path.size(); ++d) REQUIRE(t.node(path[d]).parent == path[d - 1]);
      REQUIRE(path.back() == leaves[k]);  // leaves in index order
      REQUIRE(t.num_children(path.back()) == 0);
      REQUIRE(static_cast<std::int32_t>(path.size()) == t.depth(path.back()));
      REQUIRE(t.tokens_of(path).size() == path.size());
      for (auto i : path) covered[static_cast<std::size_t>(i)] = true;
    }
    REQUIRE(std::count(covered.begin(), covered.end(), true) == n);
  }
}

TEST_CASE("Random trees: sibling lists, child counts and find_child agree with the parent array",
          "[unit][tree][property]") {
  std::mt19937 rng(0x5eed04);
  for (const auto n : random_sizes(rng)) {
    const auto t = random_tree(rng, n);
    for (std::int32_t s = kRoot; s < n; ++s) {
      const auto expected = children_by_scan(t, s);
      REQUIRE(t.children(s) == expected);
      REQUIRE(t.num_children(s) == static_cast<std::int32_t>(expected.size()));
      std::vector<std::int32_t> walked;
      for (auto c = t.first_child(s); c >= 0; c = t.next_sibling(c)) walked.push_back(c);
      REQUIRE(walked == expected);
      for (TokenId tok = 0; tok <= 5; ++tok) {
        std::int32_t first = -1;
        for (auto c : expected)
          if (t.token(c) == tok) {
            first = c;
            break;
          }
        REQUIRE(t.find_child(s, tok) == first);
      }
      if (expected.empty()) REQUIRE(t.children_mode(s) == ChildMode::kNone);
    }
  }
}

TEST_CASE("Random trees: cum_logprob is the path sum of log draft probabilities and never rises",
          "[unit][tree][property]") {
  std::mt19937 rng(0x5eed05);
  for (const auto n : random_sizes(rng)) {
    const auto t = random_tree(rng, n);
    for (std::int32_t i = 0; i < n; ++i) {
      double sum = 0.0;
      for (auto j : walk_to_root(t, i)) sum += std::log(static_cast<double>(t.node(j).draft_prob));
      REQUIRE(t.node(i).cum_logprob == sum);
      const auto p = t.node(i).parent;
      if (p != kRoot) REQUIRE(t.node(i).cum_logprob <= t.node(p).cum_logprob);
    }
  }
}

TEST_CASE("Random trees: is_chain holds exactly when every parent is the previous node",
          "[unit][tree][property]") {
  std::mt19937 rng(0x5eed06);
  for (const auto n : random_sizes(rng)) {
    const auto t = random_tree(rng, n);
    bool chain = true;
    for (std::int32_t i = 0; i < n; ++i) chain = chain && t.node(i).parent == i - 1;
    REQUIRE(t.is_chain() == chain);
    // A chain of the same size, with the same tokens.
    DraftTree c(t.root_token());
    for (std::int32_t i = 0; i < n; ++i) c.add_node(i - 1, t.token(i), t.node(i).draft_prob);
    REQUIRE(c.is_chain());
    REQUIRE(c.leaf_paths().size() == 1);
    REQUIRE(c.max_depth() == n);
  }
}

// --- bad input ----------------------------------------------------------------------

TEST_CASE("add_node rejects a parent that is not earlier than the node", "[unit][tree]") {
  DraftTree t(1);
  t.add_node(kRoot, 5, 0.5f);
  t.add_node(0, 6, 0.5f);

  SECTION("parent equal to the node's own index") {
    const auto msg = message_of<InvalidTreeError>([&] { t.add_node(2, 7, 0.5f); });
    CHECK_THAT(msg, Catch::Contains("parent index 2 of node 2"));
    CHECK_THAT(msg, Catch::Contains("not earlier"));
  }
  SECTION("parent after the node") {
    const auto msg = message_of<InvalidTreeError>([&] { t.add_node(9, 7, 0.5f); });
    CHECK_THAT(msg, Catch::Contains("parent index 9 of node 2"));
  }
  SECTION("parent below the root's -1") {
    CHECK_THAT(message_of<InvalidTreeError>([&] { t.add_node(-2, 7, 0.5f); }),
               Catch::Contains("parent index -2 of node 2"));
    CHECK_THAT(message_of<InvalidTreeError>([&] { t.add_node(-100, 7, 0.5f); }),
               Catch::Contains("parent index -100"));
  }
  SECTION("self-parent on an empty tree") {
    DraftTree e(1);
    CHECK_THAT(message_of<InvalidTreeError>([&] { e.add_node(0, 7, 0.5f); }),
               Catch::Contains("parent index 0 of node 0"));
    CHECK(e.empty());
  }
  // A rejected node leaves the tree as it was.
  CHECK(t.size() == 2);
  CHECK(t.children(0) == std::vector<std::int32_t>{1});
  CHECK(t.num_children(1) == 0);
  CHECK(t.add_node(1, 7, 0.5f) == 2);
}

TEST_CASE("add_node rejects a negative token id", "[unit][tree]") {
  DraftTree t(1);
  const auto msg = message_of<InvalidTreeError>([&] { t.add_node(kRoot, -5, 0.5f); });
  CHECK_THAT(msg, Catch::Contains("negative token id -5"));
  REQUIRE_THROWS_AS(t.add_node(kRoot, specdec::kNoToken, 0.5f), InvalidTreeError);
  CHECK(t.empty());
  CHECK(t.num_children(kRoot) == 0);
  CHECK(t.add_node(kRoot, 0, 0.5f) == 0);  // token 0 is a valid id
}

TEST_CASE("add_node rejects draft probabilities that are NaN or outside the unit interval", "[unit][tree]") {
  DraftTree t(1);
  const float bad[] = {std::numeric_limits<float>::quiet_NaN(),
                       -0.1f,
                       -std::numeric_limits<float>::denorm_min(),
                       std::nextafter(1.0f, 2.0f),
                       1.5f,
                       std::numeric_limits<float>::infinity(),
                       -std::numeric_limits<float>::infinity()};
  for (const float q : bad) {
    INFO("draft_prob " << q);
    const auto msg = message_of<InvalidDistributionError>([&] { t.add_node(kRoot, 3, q); });
    CHECK_THAT(msg, Catch::Contains("must be in [0, 1]"));
    CHECK_THAT(msg, Catch::Contains("node 0"));
  }
  CHECK(t.empty());
  CHECK(t.add_node(kRoot, 3, 0.0f) == 0);  // both ends are allowed
  CHECK(t.add_node(kRoot, 3, 1.0f) == 1);
}

TEST_CASE("from_parents rejects arrays of different sizes and passes on bad parents",
          "[unit][tree]") {
  const std::vector<TokenId> tokens{1, 2, 3};
  const std::vector<std::int32_t> parents{-1, 0};
  const std::vector<float> probs{0.5f, 0.5f, 0.5f};
  CHECK_THAT(
      message_of<ShapeError>([&] { (void)DraftTree::from_parents(0, tokens, parents, probs); }),
      Catch::Contains("3 tokens, 2 parents and 3 draft probabilities"));
  const std::vector<std::int32_t> three_parents{-1, 0, 1};
  const std::vector<float> two_probs{0.5f, 0.5f};
  CHECK_THAT(message_of<ShapeError>(
                 [&] { (void)DraftTree::from_parents(0, tokens, three_parents, two_probs); }),
             Catch::Contains("2 draft probabilities"));
  const std::vector<std::int32_t> forward_parents{-1, 2, 0};
  CHECK_THAT(message_of<InvalidTreeError>(
                 [&] { (void)DraftTree::from_parents(0, tokens, forward_parents, probs); }),
             Catch::Contains("parent index 2 of node 1"));
  const std::vector<float> bad_probs{0.5f, 2.0f, 0.5f};
  REQUIRE_THROWS_AS(DraftTree::from_parents(0, tokens, three_parents, bad_probs),
                    InvalidDistributionError);
}

TEST_CASE("set_children_source rejects a missing slot and a row below -1", "[unit][tree]") {
  auto t = branching_tree();
  CHECK_THAT(
      message_of<InvalidTreeError>([&] { t.set_children_source(8, 0, ChildMode::kDeterministic); }),
      Catch::Contains("node index 8 out of range [-1, 8)"));
  CHECK_THAT(message_of<InvalidTreeError>(
                 [&] { t.set_children_source(-2, 0, ChildMode::kDeterministic); }),
             Catch::Contains("node index -2 out of range"));
  CHECK_THAT(message_of<InvalidTreeError>(
                 [&] { t.set_children_source(0, -2, ChildMode::kDeterministic); }),
             Catch::Contains("draft row -2 of slot 0"));
  CHECK(t.children_mode(0) == ChildMode::kNone);
  CHECK(t.children_draft_row(0) == -1);
}

TEST_CASE("Accessors reject node indices outside the tree with InvalidTreeError", "[unit][tree]") {
  const auto t = branching_tree();  // 8 nodes
  for (const std::int32_t bad : {8, 9, -2, -100}) {
    INFO("index " << bad);
    CHECK_THAT(message_of<InvalidTreeError>([&] { (void)t.children(bad); }),
               Catch::Contains("out of range [-1, 8)"));
    CHECK_THAT(message_of<InvalidTreeError>([&] { (void)t.path_to(bad); }),
               Catch::Contains("out of range"));
    REQUIRE_THROWS_AS(t.first_child(bad), InvalidTreeError);
    REQUIRE_THROWS_AS(t.num_children(bad), InvalidTreeError);
    REQUIRE_THROWS_AS(t.find_child(bad, 10), InvalidTreeError);
    REQUIRE_THROWS_AS(t.children_mode(bad), InvalidTreeError);
    REQUIRE_THROWS_AS(t.children_draft_row(bad), InvalidTreeError);
  }
  // Node accessors have no root slot: -1 is out of range too.
  for (const std::int32_t bad : {8, -1, -2}) {
    INFO("index " << bad);
    CHECK_THAT(message_of<InvalidTreeError>([&] { (void)t.node(bad); }),
               Catch::Contains("out of range [0, 8)"));
    REQUIRE_THROWS_AS(t.token(bad), InvalidTreeError);
    REQUIRE_THROWS_AS(t.parent(bad), InvalidTreeError);
    REQUIRE_THROWS_AS(t.depth(bad), InvalidTreeError);
    REQUIRE_THROWS_AS(t.next_sibling(bad), InvalidTreeError);
    const std::vector<std::int32_t> path{0, bad};
    REQUIRE_THROWS_AS(t.tokens_of(path), InvalidTreeError);
  }
}
