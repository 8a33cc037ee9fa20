// Tests of StaticTreeShape and StaticTreeBuilder (include/specdec/tree/
// static_tree_builder.hpp; the static trees of Medusa, arXiv 2401.10774, and
// Sequoia, arXiv 2402.12374). A table drafter records every propose call, so
// the tests check the one-call-per-depth contract, frontiers, rows, budget and
// child choice against brute force.
#include "specdec/tree/static_tree_builder.hpp"

#include <algorithm>
#include <cmath>
#include <map>
#include <numeric>
#include <set>
#include <string>
#include <vector>

#include "specdec/accept/recursive_rejection_sampling.hpp"
#include "support/catch.hpp"
#include "specdec/testing/chi_square.hpp"
#include "support/exceptions.hpp"
#include "unit/tree/table_drafter.hpp"

namespace sd = specdec;
using sd::testing::message_of;
using sd::testing::TableDrafter;
using Choices = std::vector<std::vector<std::int32_t>>;

static_assert(sd::TreeBuilder<sd::StaticTreeBuilder>);

namespace {

constexpr std::int32_t kRoot = sd::DraftTree::kRoot;

// Rank of every node among its siblings, as rank paths from the root.
Choices rank_paths(const sd::DraftTree& t) {
  Choices out(static_cast<std::size_t>(t.size()));
  for (std::int32_t s = kRoot; s < t.size(); ++s) {
    std::int32_t k = 0;
    for (auto c = t.first_child(s); c >= 0; c = t.next_sibling(c), ++k) {
      if (s >= 0) out[static_cast<std::size_t>(c)] = out[static_cast<std::size_t>(s)];
      out[static_cast<std::size_t>(c)].push_back(k);
    }
  }
  return out;
}

std::set<std::vector<std::int32_t>> as_set(const Choices& c) {
  return {c.begin(), c.end()};
}

// Brute force: nonzero tokens sorted by (probability desc, id asc), first m.
std::vector<sd::TokenId> brute_top(std::span<const float> row, std::size_t m) {
  std::vector<sd::TokenId> ids;
  for (std::size_t i = 0; i < row.size(); ++i)
    if (row[i] > 0.0f) ids.push_back(static_cast<sd::TokenId>(i));
  std::stable_sort(ids.begin(), ids.end(), [&](auto a, auto b) { return row[a] > row[b]; });
  if (ids.size() > m) ids.resize(m);
  return ids;
}

// Distinct weights 1..6 permuted by (token, depth): no ties, no zeros.
std::vector<float> permuted_row(sd::TokenId token, std::int32_t depth) {
  std::vector<float> r(6);
  for (int i = 0; i < 6; ++i)
    r[static_cast<std::size_t>(i)] = static_cast<float>((i + token * 5 + depth * 2) % 6 + 1) / 21.0f;
  return r;
}

const Choices kMedusa{{0}, {1}, {2}, {0, 0}, {0, 1}, {1, 0}, {0, 0, 0}, {0, 1, 0}};

struct Built {
  sd::DraftTree tree;
  sd::ProbMatrix rows;
};

Built build(sd::StaticTreeBuilder& builder, TableDrafter& drafter, const sd::DraftBudget& budget,
            std::uint64_t seed = 1, sd::TokenId root = 3) {
  Built b;
  sd::RandomStream rng(seed);
  builder.build(drafter, budget, root, rng, b.tree, b.rows);
  return b;
}

sd::DraftBudget big_budget() {
  return {.max_depth = 100, .max_nodes = 1000, .verify_nodes = 1000};
}

// Breaks the row contract: two rows per frontier slot.
struct TwoRowsPerSlot {
  static constexpr bool kProvidesProbs = true;
  std::int64_t vocab_size() const { return 2; }
  void begin(std::span<const sd::TokenId>, const sd::SamplingParams&) {}
  void commit(std::span<const sd::TokenId>) {}
  void end() {}
  void propose(const sd::DraftRequest& r, sd::ProbMatrix& rows) {
    for (std::size_t i = 0; i < 2 * r.frontier.size(); ++i) rows.append_row()[0] = 1.0f;
  }
};

}  // namespace

// --- StaticTreeShape ------------------------------------------------------------

TEST_CASE(
    "StaticTreeShape::from_choices orders Medusa choices breadth first and links each path to its prefix",
    "[unit][tree]") {
  const auto shape = sd::StaticTreeShape::from_choices({{1, 0}, {0, 1}, {1}, {0}, {0, 0}, {0, 1, 0}});
  REQUIRE(shape.size() == 6);
  CHECK(shape.choices() == Choices{{0}, {1}, {0, 0}, {0, 1}, {1, 0}, {0, 1, 0}});
  const std::vector<std::pair<std::int32_t, std::int32_t>> expected{{-1, 0}, {-1, 1}, {0, 0},
                                                                    {0, 1},  {1, 0},  {3, 0}};
  for (std::int32_t i = 0; i < shape.size(); ++i) {
    INFO("node " << i);
    CHECK(shape.node(i).parent == expected[static_cast<std::size_t>(i)].first);
    CHECK(shape.node(i).rank == expected[static_cast<std::size_t>(i)].second);
  }
  CHECK(shape.depth(5) == 3);
  CHECK(shape.max_depth() == 3);
  CHECK(shape.num_children(-1) == 2);
  CHECK(shape.num_children(0) == 2);
  CHECK(shape.num_children(2) == 0);
  CHECK(sd::StaticTreeShape::chain(3).choices() == Choices{{0}, {0, 0}, {0, 0, 0}});
  CHECK(sd::StaticTreeShape().empty());
}

TEST_CASE(
    "StaticTreeShape rejects choices with a missing prefix, a rank gap, a duplicate, an empty path or a "
    "negative rank, naming the path",
    "[unit][tree]") {
  using sd::InvalidTreeError;
  const auto from = [](Choices c) { return [c] { (void)sd::StaticTreeShape::from_choices(c); }; };
  auto msg = message_of<InvalidTreeError>(from({{0}, {1, 0}}));
  CHECK(msg.find("path {1, 0} lacks its prefix {1}") != std::string::npos);
  msg = message_of<InvalidTreeError>(from({{0}, {2}}));
  CHECK(msg.find("path {2} has rank 2") != std::string::npos);
  msg = message_of<InvalidTreeError>(from({{0}, {0, 1}}));
  CHECK(msg.find("path {0, 1} has rank 1") != std::string::npos);
  msg = message_of<InvalidTreeError>(from({{0}, {1}, {0}}));
  CHECK(msg.find("path {0} appears twice") != std::string::npos);
  msg = message_of<InvalidTreeError>(from({{0}, {}}));
  CHECK(msg.find("empty path") != std::string::npos);
  msg = message_of<InvalidTreeError>(from({{0}, {0, -1}}));
  CHECK(msg.find("negative rank -1") != std::string::npos);

  msg = message_of<InvalidTreeError>([] { (void)sd::StaticTreeShape({{-1, 0}, {1, 0}}); });
  CHECK(msg.find("parent 1 of node 1") != std::string::npos);
  msg = message_of<InvalidTreeError>([] { (void)sd::StaticTreeShape({{-1, 1}}); });
  CHECK(msg.find("node 0 has rank 1") != std::string::npos);
  msg = message_of<InvalidTreeError>([] { (void)sd::StaticTreeShape({{-1, 0}, {0, 0}, {-1, 0}}); });
  CHECK(msg.find("node 2 has rank 0") != std::string::npos);
  CHECK_THROWS_AS(sd::StaticTreeShape::chain(-1), sd::InvalidArgumentError);
  // Siblings need not be adjacent in a node list, only in rank order (DFS order is fine).
  CHECK(sd::StaticTreeShape({{-1, 0}, {0, 0}, {-1, 1}}).choices() == Choices{{0}, {0, 0}, {1}});
}

// --- StaticTreeBuilder: deterministic ---------------------------------------------

TEST_CASE(
    "StaticTreeBuilder drafts a Medusa shape with one propose call per depth, each slot taking the top "
    "tokens of its own row",
    "[unit][tree]") {
  TableDrafter drafter(6, permuted_row);
  sd::StaticTreeBuilder builder(sd::StaticTreeShape::from_choices(kMedusa));
  const auto b = build(builder, drafter, big_budget());
  const auto& t = b.tree;

  // The tree is the shape: same rank paths, 8 nodes.
  REQUIRE(t.size() == 8);
  CHECK(as_set(rank_paths(t)) == as_set(kMedusa));
  CHECK(t.root_token() == 3);

  // One call per depth; each call's frontier is the set of nodes of the
  // previous depth that the shape expands, and rows are appended in order.
  REQUIRE(drafter.calls.size() == 3);
  CHECK(drafter.calls[0].frontier == std::vector<std::int32_t>{kRoot});
  std::int64_t next_row = 0;
  const auto paths = rank_paths(t);
  for (std::size_t d = 0; d < drafter.calls.size(); ++d) {
    const auto& call = drafter.calls[d];
    INFO("call " << d);
    CHECK(call.first_row == next_row);
    next_row += static_cast<std::int64_t>(call.frontier.size());
    std::vector<std::int32_t> expected;  // nodes at depth d with children in the shape
    if (d == 0) expected.push_back(kRoot);
    for (std::int32_t i = 0; i < t.size(); ++i)
      if (t.depth(i) == static_cast<std::int32_t>(d) && t.num_children(i) > 0) expected.push_back(i);
    CHECK(call.frontier == expected);
    for (std::size_t f = 0; f < call.frontier.size(); ++f)
      CHECK(t.children_draft_row(call.frontier[f]) == call.first_row + static_cast<std::int64_t>(f));
  }
  CHECK(b.rows.num_rows() == next_row);
  CHECK(b.rows.vocab() == 6);

  // Every slot with children: deterministic, children = brute-force top-m of
  // the row it records, which is the drafter's row for that slot.
  for (std::int32_t s = kRoot; s < t.size(); ++s) {
    INFO("slot " << s);
    if (t.num_children(s) == 0) {
      CHECK(t.children_mode(s) == sd::ChildMode::kNone);
      CHECK(t.children_draft_row(s) == -1);
      continue;
    }
    CHECK(t.children_mode(s) == sd::ChildMode::kDeterministic);
    const auto row = b.rows.row(t.children_draft_row(s));
    const auto want = drafter.row_for(s == kRoot ? 3 : t.token(s), s == kRoot ? 0 : t.depth(s));
    CHECK(std::vector<float>(row.begin(), row.end()) == want);
    const auto kids = t.children(s);
    CHECK(t.tokens_of(kids) == brute_top(row, kids.size()));
    for (auto c : kids) CHECK(t.node(c).draft_prob == row[static_cast<std::size_t>(t.token(c))]);
  }
  // Parents come first, and nodes are drafted level by level.
  for (std::int32_t i = 1; i < t.size(); ++i) CHECK(t.depth(i) >= t.depth(i - 1));
  CHECK(paths.size() == 8);
}

TEST_CASE("StaticTreeBuilder breaks probability ties toward the lower token id", "[unit][tree]") {
  TableDrafter drafter(5, [](sd::TokenId token, std::int32_t) {
    if (token == 9) return std::vector<float>{0.1f, 0.3f, 0.1f, 0.3f, 0.2f};  // root
    return std::vector<float>{0.2f, 0.2f, 0.2f, 0.2f, 0.2f};
  });
  sd::StaticTreeBuilder builder(
      sd::StaticTreeShape::from_choices({{0}, {1}, {2}, {3}, {0, 0}, {0, 1}, {0, 2}}));
  const auto b = build(builder, drafter, big_budget(), 1, 9);
  CHECK(b.tree.tokens_of(b.tree.children(kRoot)) == std::vector<sd::TokenId>{1, 3, 4, 0});
  CHECK(b.tree.tokens_of(b.tree.children(0)) == std::vector<sd::TokenId>{0, 1, 2});
}

TEST_CASE(
    "StaticTreeBuilder truncates the shape to max_depth and then to the first min(max_nodes, "
    "verify_nodes) nodes in shape order, dropping whole subtrees",
    "[unit][tree]") {
  TableDrafter drafter(6, permuted_row);
  SECTION("verify_nodes bounds the tree like max_nodes (the decoder verifies every drafted node)") {
    sd::StaticTreeBuilder builder(sd::StaticTreeShape::from_choices(kMedusa));
    for (std::int32_t verify = 0; verify <= 9; ++verify) {
      INFO("verify_nodes " << verify);
      auto b = build(builder, drafter, {.max_depth = 10, .max_nodes = 5, .verify_nodes = verify});
      const Choices want(kMedusa.begin(), kMedusa.begin() + std::min<std::int32_t>(verify, 5));
      CHECK(as_set(rank_paths(b.tree)) == as_set(want));
    }
  }
  SECTION("BFS shape from choices: max_nodes keeps the shallow, low-rank nodes") {
    sd::StaticTreeBuilder builder(sd::StaticTreeShape::from_choices(kMedusa));
    for (std::int32_t max_nodes = 0; max_nodes <= 9; ++max_nodes) {
      INFO("max_nodes " << max_nodes);
      drafter.calls.clear();
      const auto b = build(builder, drafter, {.max_depth = 10, .max_nodes = max_nodes, .verify_nodes = 1000});
      const Choices want(kMedusa.begin(), kMedusa.begin() + std::min<std::int32_t>(max_nodes, 8));
      CHECK(as_set(rank_paths(b.tree)) == as_set(want));
      CHECK(drafter.calls.size() == static_cast<std::size_t>(max_nodes == 0   ? 0
                                                             : max_nodes <= 3 ? 1
                                                             : max_nodes <= 6 ? 2
                                                                              : 3));
    }
    drafter.calls.clear();
    const auto b = build(builder, drafter, {.max_depth = 1, .max_nodes = 100, .verify_nodes = 1000});
    CHECK(as_set(rank_paths(b.tree)) == as_set({{0}, {1}, {2}}));
    CHECK(drafter.calls.size() == 1);
    drafter.calls.clear();
    const auto empty = build(builder, drafter, {.max_depth = 0, .max_nodes = 100, .verify_nodes = 1000});
    CHECK(empty.tree.empty());
    CHECK(empty.rows.num_rows() == 0);
    CHECK(drafter.calls.empty());
  }
  SECTION("DFS-ordered shape: max_nodes keeps the deep chain first") {
    // {0}, {0,0}, {0,0,0}, {1}, {1,0} listed depth first.
    sd::StaticTreeBuilder builder(sd::StaticTreeShape({{-1, 0}, {0, 0}, {1, 0}, {-1, 1}, {3, 0}}));
    auto b = build(builder, drafter, {.max_depth = 10, .max_nodes = 3, .verify_nodes = 1000});
    CHECK(as_set(rank_paths(b.tree)) == as_set({{0}, {0, 0}, {0, 0, 0}}));
    // Depth first, then count: with max_depth 1 the chain below {0} goes, so {1} fits.
    b = build(builder, drafter, {.max_depth = 1, .max_nodes = 2, .verify_nodes = 1000});
    CHECK(as_set(rank_paths(b.tree)) == as_set({{0}, {1}}));
    b = build(builder, drafter, {.max_depth = 2, .max_nodes = 4, .verify_nodes = 1000});
    CHECK(as_set(rank_paths(b.tree)) == as_set({{0}, {0, 0}, {1}, {1, 0}}));
  }
}

TEST_CASE("StaticTreeBuilder does not expand a node whose draft probability is below stop_below",
          "[unit][tree]") {
  // Root row: token 0 at 0.6, token 1 at 0.3, token 2 at 0.1; every other row
  // puts 0.5 on token 4.
  TableDrafter drafter(5, [](sd::TokenId token, std::int32_t depth) {
    if (depth == 0) return std::vector<float>{0.6f, 0.3f, 0.1f, 0.0f, 0.0f};
    (void)token;
    return std::vector<float>{0.0f, 0.2f, 0.2f, 0.1f, 0.5f};
  });
  sd::StaticTreeBuilder builder(
      sd::StaticTreeShape::from_choices({{0}, {1}, {2}, {0, 0}, {1, 0}, {2, 0}, {0, 0, 0}}));
  auto budget = big_budget();
  budget.stop_below = 0.35f;
  auto b = build(builder, drafter, budget);
  // Only node 0 (0.6) is expanded at depth 1; its child (0.5) is expanded too.
  REQUIRE(drafter.calls.size() == 3);
  CHECK(drafter.calls[1].frontier == std::vector<std::int32_t>{0});
  CHECK(as_set(rank_paths(b.tree)) == as_set({{0}, {1}, {2}, {0, 0}, {0, 0, 0}}));
  CHECK(b.tree.children_mode(1) == sd::ChildMode::kNone);
  CHECK(b.tree.children_mode(2) == sd::ChildMode::kNone);

  drafter.calls.clear();
  budget.stop_below = 0.55f;  // now the depth-2 node (0.5) is not expanded either
  b = build(builder, drafter, budget);
  CHECK(drafter.calls.size() == 2);
  CHECK(as_set(rank_paths(b.tree)) == as_set({{0}, {1}, {2}, {0, 0}}));

  drafter.calls.clear();
  budget.stop_below = 0.0f;  // off: the whole shape
  b = build(builder, drafter, budget);
  CHECK(b.tree.size() == 7);
  CHECK(drafter.calls[1].frontier == std::vector<std::int32_t>{0, 1, 2});
}

TEST_CASE(
    "StaticTreeBuilder gives a slot with an all-zero row no children, and a row with fewer nonzero tokens "
    "only those, skipping the missing ranks' subtrees",
    "[unit][tree]") {
  // Root: two nonzero tokens (3, 1) although the shape wants three children;
  // token 3's row is all zero (no proposal); token 1's row is one-hot at 0.
  TableDrafter drafter(4, [](sd::TokenId token, std::int32_t depth) {
    if (depth == 0) return std::vector<float>{0.0f, 0.25f, 0.0f, 0.75f};
    if (token == 3) return std::vector<float>{0, 0, 0, 0};
    return std::vector<float>{1, 0, 0, 0};
  });
  sd::StaticTreeBuilder builder(
      sd::StaticTreeShape::from_choices({{0}, {1}, {2}, {0, 0}, {1, 0}, {1, 1}, {2, 0}, {1, 0, 0}}));
  const auto b = build(builder, drafter, big_budget());
  const auto& t = b.tree;
  REQUIRE(t.size() == 4);
  CHECK(t.tokens_of(t.children(kRoot)) == std::vector<sd::TokenId>{3, 1});
  CHECK(t.num_children(0) == 0);  // zero row
  CHECK(t.children_mode(0) == sd::ChildMode::kNone);
  CHECK(t.children_draft_row(0) == -1);
  CHECK(t.tokens_of(t.children(1)) == std::vector<sd::TokenId>{0});  // one-hot: one child of two wanted
  CHECK(t.children_mode(1) == sd::ChildMode::kDeterministic);
  // {2, 0} had no parent; {1, 0, 0} is drafted under node 1's child.
  CHECK(as_set(rank_paths(t)) == as_set({{0}, {1}, {1, 0}, {1, 0, 0}}));
  REQUIRE(drafter.calls.size() == 3);
  CHECK(drafter.calls[1].frontier == std::vector<std::int32_t>{0, 1});
  CHECK(drafter.calls[2].frontier == std::vector<std::int32_t>{2});
}

TEST_CASE("StaticTreeBuilder rejects unsupported modes, bad budgets and drafters that break the row contract",
          "[unit][tree]") {
  const auto shape = sd::StaticTreeShape::from_choices({{0}, {1}});
  auto msg = message_of<sd::InvalidArgumentError>(
      [&] { (void)sd::StaticTreeBuilder(shape, sd::ChildMode::kNone); });
  CHECK(msg.find("not supported") != std::string::npos);

  TableDrafter drafter(4, [](sd::TokenId, std::int32_t) {
    return std::vector<float>{0.25f, 0.25f, 0.25f, 0.25f};
  });
  sd::StaticTreeBuilder builder(shape);
  msg = message_of<sd::InvalidArgumentError>([&] { build(builder, drafter, {.max_depth = -1}); });
  CHECK(msg.find("max_depth -1") != std::string::npos);
  msg = message_of<sd::InvalidArgumentError>([&] { build(builder, drafter, {.max_nodes = -2}); });
  CHECK(msg.find("max_nodes -2") != std::string::npos);
  msg = message_of<sd::InvalidArgumentError>([&] { build(builder, drafter, {.stop_below = 1.5f}); });
  CHECK(msg.find("stop_below must be in [0, 1], got 1.5") != std::string::npos);
  CHECK_THROWS_AS(build(builder, drafter, {.stop_below = std::nanf("")}), sd::InvalidArgumentError);

  TableDrafter nan_rows(2, [](sd::TokenId, std::int32_t) { return std::vector<float>{std::nanf(""), 1.0f}; });
  msg = message_of<sd::InvalidDistributionError>([&] { build(builder, nan_rows, big_budget()); });
  CHECK(msg.find("draft row 0") != std::string::npos);
  TableDrafter unnormalised(2, [](sd::TokenId, std::int32_t) { return std::vector<float>{0.5f, 0.6f}; });
  CHECK_THROWS_AS(build(builder, unnormalised, big_budget()), sd::InvalidDistributionError);

  TwoRowsPerSlot two_rows;
  sd::RandomStream rng(1);
  sd::DraftTree tree;
  sd::ProbMatrix rows;
  msg = message_of<sd::ShapeError>([&] { builder.build(two_rows, big_budget(), 0, rng, tree, rows); });
  CHECK(msg.find("for 1 frontier slots the draft matrix is [2, 2], expected [1, 2]") != std::string::npos);
}

// --- StaticTreeBuilder: sampled without replacement ---------------------------------

TEST_CASE(
    "StaticTreeBuilder without replacement drafts distinct siblings with q of the original row, records "
    "the mode and row, and is a function of the seed",
    "[unit][tree]") {
  const std::uint32_t table_seed = 5;
  TableDrafter drafter(8, [&](sd::TokenId token, std::int32_t depth) {
    return sd::testing::random_row(table_seed, token, depth, 8);
  });
  const auto shape = sd::StaticTreeShape::from_choices(
      {{0}, {1}, {2}, {3}, {0, 0}, {0, 1}, {0, 2}, {1, 0}, {1, 1}, {0, 0, 0}, {0, 0, 1}});
  sd::StaticTreeBuilder builder(shape, sd::ChildMode::kSampledWithoutReplacement);
  std::set<std::vector<sd::TokenId>> distinct_trees;
  for (std::uint64_t seed = 0; seed < 40; ++seed) {
    INFO("seed " << seed);
    drafter.calls.clear();
    sd::RandomStream rng(seed);
    sd::DraftTree t;
    sd::ProbMatrix rows;
    builder.build(drafter, big_budget(), 7, rng, t, rows);
    std::uint64_t wanted = 0;
    for (std::int32_t s = kRoot; s < t.size(); ++s) {
      const auto kids = t.children(s);
      if (kids.empty()) continue;
      CHECK(t.children_mode(s) == sd::ChildMode::kSampledWithoutReplacement);
      const auto row = rows.row(t.children_draft_row(s));
      const auto toks = t.tokens_of(kids);
      CHECK(std::set<sd::TokenId>(toks.begin(), toks.end()).size() == toks.size());
      for (auto c : kids) {
        CHECK(row[static_cast<std::size_t>(t.token(c))] > 0.0f);
        CHECK(t.node(c).draft_prob == row[static_cast<std::size_t>(t.token(c))]);
      }
      // Fewer children than the shape asks for only when the row runs out.
      const auto nonzero = std::count_if(row.begin(), row.end(), [](float v) { return v > 0.0f; });
      CHECK(static_cast<std::int64_t>(kids.size()) <= nonzero);
    }
    // Uniforms: exactly one per wanted child of every expanded slot.
    for (const auto& call : drafter.calls)
      for (auto s : call.frontier) {
        const auto shape_slot_children = [&] {  // children the shape wants at this slot
          const auto path =
              s == kRoot ? std::vector<std::int32_t>{} : rank_paths(t)[static_cast<std::size_t>(s)];
          std::int32_t n = 0;
          for (const auto& c : shape.choices())
            if (c.size() == path.size() + 1 && std::equal(path.begin(), path.end(), c.begin())) ++n;
          return n;
        }();
        wanted += static_cast<std::uint64_t>(shape_slot_children);
      }
    CHECK(rng.offset() == wanted);
    // Same seed, same tree.
    sd::RandomStream again(seed);
    sd::DraftTree t2;
    sd::ProbMatrix rows2;
    builder.build(drafter, big_budget(), 7, again, t2, rows2);
    REQUIRE(t2.size() == t.size());
    for (std::int32_t i = 0; i < t.size(); ++i) {
      CHECK(t2.token(i) == t.token(i));
      CHECK(t2.parent(i) == t.parent(i));
    }
    std::vector<sd::TokenId> all;
    for (const auto& n : t.nodes()) all.push_back(n.token);
    distinct_trees.insert(all);
  }
  CHECK(distinct_trees.size() > 20);  // the seed matters
}

namespace {
// Exact law of the first `m` draws without replacement from q, by ordered
// tuple: Π_j q(x_j) / (1 - Σ_{i<j} q(x_i)).
void tuples(const std::vector<double>& q, std::size_t m, std::vector<sd::TokenId>& prefix, double prob,
            std::map<std::vector<sd::TokenId>, double>& out) {
  if (prefix.size() == m) {
    out[prefix] = prob;
    return;
  }
  double used = 0.0;
  for (auto x : prefix) used += q[static_cast<std::size_t>(x)];
  for (std::size_t x = 0; x < q.size(); ++x) {
    if (std::find(prefix.begin(), prefix.end(), static_cast<sd::TokenId>(x)) != prefix.end()) continue;
    prefix.push_back(static_cast<sd::TokenId>(x));
    tuples(q, m, prefix, prob * q[x] / (1.0 - used), out);
    prefix.pop_back();
  }
}
}  // namespace

TEST_CASE("StaticTreeBuilder without replacement draws ordered children with the without-replacement law",
          "[unit][tree]") {
  // Seeded (fixed outcome); at a random seed each check would fail with
  // probability 1e-4 (the chi-square threshold).
  const std::vector<float> q{0.5f, 0.3f, 0.15f, 0.05f};
  TableDrafter drafter(4, [&](sd::TokenId, std::int32_t) { return q; });
  for (std::size_t m : {2u, 3u}) {
    INFO("children " << m);
    Choices star;
    for (std::size_t k = 0; k < m; ++k) star.push_back({static_cast<std::int32_t>(k)});
    sd::StaticTreeBuilder builder(sd::StaticTreeShape::from_choices(star),
                                  sd::ChildMode::kSampledWithoutReplacement);
    std::map<std::vector<sd::TokenId>, double> law;
    std::vector<sd::TokenId> prefix;
    tuples({0.5, 0.3, 0.15, 0.05}, m, prefix, 1.0, law);
    std::map<std::vector<sd::TokenId>, std::int64_t> seen;
    sd::RandomStream rng(2024 + m);
    sd::DraftTree t;
    sd::ProbMatrix rows;
    constexpr int kDraws = 40000;
    for (int i = 0; i < kDraws; ++i) {
      builder.build(drafter, big_budget(), 0, rng, t, rows);
      ++seen[t.tokens_of(t.children(kRoot))];
    }
    std::vector<std::int64_t> observed;
    std::vector<double> expected;
    for (const auto& [tuple, prob] : law) {
      observed.push_back(seen.count(tuple) ? seen[tuple] : 0);
      expected.push_back(prob);
    }
    std::int64_t total = 0;
    for (auto o : observed) total += o;
    CHECK(total == kDraws);  // every outcome was a tuple of distinct tokens
    const auto r = sd::testing::chi_square_gof(observed, expected);
    INFO(r.describe());
    CHECK_FALSE(r.rejects(1e-4));
  }
}

TEST_CASE("A tree drafted without replacement is verified losslessly by recursive rejection sampling",
          "[unit][tree]") {
  // The rule (Sequoia's, arXiv 2402.12374, §3.2, Algorithm 2; mode (b) of
  // docs/methods.md) needs siblings in draw order and the original row; if
  // the builder broke either, the first emitted token would not follow the
  // target's root row. Seeded; false-positive rate 1e-4 at a random seed.
  const std::vector<float> q{0.6f, 0.25f, 0.1f, 0.05f, 0.0f};
  const std::vector<float> p_root{0.1f, 0.2f, 0.3f, 0.25f, 0.15f};
  TableDrafter drafter(5, [&](sd::TokenId, std::int32_t) { return q; });
  sd::StaticTreeBuilder builder(sd::StaticTreeShape::from_choices({{0}, {1}, {2}, {0, 0}, {0, 1}}),
                                sd::ChildMode::kSampledWithoutReplacement);
  sd::RecursiveRejectionSampling rule;
  sd::RandomStream build_rng(11), verify_rng(12);
  sd::DraftTree t;
  sd::ProbMatrix rows;
  sd::ProbMatrix target;
  std::vector<std::int64_t> first(5, 0);
  constexpr int kRounds = 30000;
  for (int i = 0; i < kRounds; ++i) {
    builder.build(drafter, big_budget(), 0, build_rng, t, rows);
    target.resize(0, 5);
    auto r0 = target.append_row();
    std::copy(p_root.begin(), p_root.end(), r0.begin());
    for (std::int32_t n = 0; n < t.size(); ++n) target.append_row()[static_cast<std::size_t>(n % 5)] = 1.0f;
    const auto v = rule.verify(t, target.view(), rows.view(), verify_rng);
    ++first[static_cast<std::size_t>(v.emitted_tokens(t).front())];
  }
  const std::vector<double> expected(p_root.begin(), p_root.end());
  const auto r = sd::testing::chi_square_gof(first, expected);
  INFO(r.describe());
  CHECK_FALSE(r.rejects(1e-4));
}

TEST_CASE("Tree shapes round-trip through their text form", "[unit][tree]") {
  const auto shape = sd::parse_tree_shape("0;1;2;0.0;0.1;1.0;0.0.0");
  CHECK(shape.size() == 7);
  CHECK(shape.max_depth() == 3);
  CHECK(shape.num_children(-1) == 3);
  CHECK(sd::format_tree_shape(shape) == "0;1;2;0.0;0.1;1.0;0.0.0");
  CHECK(sd::parse_tree_shape(sd::format_tree_shape(shape)) == shape);
  CHECK_THROWS_AS(sd::parse_tree_shape("0;;1"), sd::InvalidArgumentError);
  CHECK_THROWS_AS(sd::parse_tree_shape("0;x"), sd::InvalidArgumentError);
  CHECK_THROWS_AS(sd::parse_tree_shape("0;1.0.0"), sd::InvalidTreeError);  // prefix 1.0 missing
}

TEST_CASE("StaticTreeBuilder with replacement draws siblings independently, repeats included", "[unit][tree]") {
  // An i.i.d. tree (SpecInfer, arXiv 2305.09781 §4.3): each child of a slot is
  // its own draw from the slot's row, so a peaked row repeats tokens.
  TableDrafter drafter(4, [](sd::TokenId, std::int32_t) { return std::vector<float>{0.7f, 0.2f, 0.1f, 0.0f}; });
  const auto shape = sd::StaticTreeShape::from_choices({{0}, {1}, {2}, {0, 0}, {0, 1}});
  sd::StaticTreeBuilder builder(shape, sd::ChildMode::kSampledWithReplacement);
  int repeats = 0;
  for (std::uint64_t seed = 0; seed < 40; ++seed) {
    sd::RandomStream rng(seed);
    sd::DraftTree t;
    sd::ProbMatrix rows;
    builder.build(drafter, big_budget(), 1, rng, t, rows);
    REQUIRE(t.size() == 5);  // every wanted child is drawn: nothing runs out
    CHECK(rng.offset() == 5);  // one uniform per child
    const auto kids = t.children(kRoot);
    CHECK(t.children_mode(kRoot) == sd::ChildMode::kSampledWithReplacement);
    const auto toks = t.tokens_of(kids);
    repeats += std::set<sd::TokenId>(toks.begin(), toks.end()).size() < toks.size();
    for (std::int32_t c = 0; c < t.size(); ++c) CHECK(t.token(c) != 3);  // never a token of probability 0
  }
  CHECK(repeats > 20);  // P(three distinct draws) = 6 * 0.7 * 0.2 * 0.1 = 0.084
}

TEST_CASE(
    "StaticTreeBuilder drawing by request: top-k trees for a greedy request, drawn ones for a sampled one",
    "[unit][tree]") {
  const auto shape = sd::StaticTreeShape::from_choices(kMedusa);
  sd::StaticTreeBuilder by_request(shape, sd::ChildDraw::by_request());
  sd::StaticTreeBuilder topk(shape, sd::ChildMode::kDeterministic);
  sd::StaticTreeBuilder drawn(shape, sd::ChildMode::kSampledWithoutReplacement);
  TableDrafter drafter(6, permuted_row);
  const auto modes = [](const sd::DraftTree& t) {
    std::set<sd::ChildMode> m;
    for (std::int32_t s = kRoot; s < t.size(); ++s)
      if (t.first_child(s) >= 0) m.insert(t.children_mode(s));
    return m;
  };
  const std::vector<sd::TokenId> prompt{1, 2};
  for (std::uint64_t seed = 1; seed <= 20; ++seed) {
    INFO("seed " << seed);
    // Greedy: the top-k tree, and no uniforms taken (the stream is where a fresh one starts).
    drafter.begin(prompt, sd::SamplingParams{0.0f});
    sd::RandomStream rng(seed);
    sd::DraftTree t;
    sd::ProbMatrix rows;
    by_request.build(drafter, big_budget(), 3, rng, t, rows);
    const auto want = build(topk, drafter, big_budget(), seed);
    CHECK(rank_paths(t) == rank_paths(want.tree));
    CHECK(t.tokens_of(t.children(kRoot)) == want.tree.tokens_of(want.tree.children(kRoot)));
    CHECK(modes(t) == std::set{sd::ChildMode::kDeterministic});
    CHECK(rng.offset() == 0);
    // Sampled (T = 0.8): exactly the tree drawn without replacement from the same stream.
    drafter.begin(prompt, sd::SamplingParams{0.8f});
    sd::RandomStream rng2(seed);
    by_request.build(drafter, big_budget(), 3, rng2, t, rows);
    const auto sampled = build(drawn, drafter, big_budget(), seed);
    CHECK(modes(t) == std::set{sd::ChildMode::kSampledWithoutReplacement});
    for (std::int32_t s = kRoot; s < t.size(); ++s) {
      INFO("slot " << s);
      CHECK(t.tokens_of(t.children(s)) == sampled.tree.tokens_of(sampled.tree.children(s)));
    }
  }
  // Over many seeds a sampled request's trees are drawn, not the top-k tree.
  drafter.begin(prompt, sd::SamplingParams{1.0f});
  const auto top = build(topk, drafter, big_budget());
  int differ = 0;
  for (std::uint64_t seed = 1; seed <= 50; ++seed) {
    const auto b = build(by_request, drafter, big_budget(), seed);
    differ += b.tree.tokens_of(b.tree.children(kRoot)) != top.tree.tokens_of(top.tree.children(kRoot));
  }
  CHECK(differ > 10);
  // A drafter that does not say how its request samples gets top-k trees, as ChainPick::kByRequest does.
  CHECK(sd::ChildDraw::by_request().mode_for(TwoRowsPerSlot{}) == sd::ChildMode::kDeterministic);
  CHECK(by_request.draw() == sd::ChildDraw::by_request());
  CHECK(topk.draw() == sd::ChildDraw::same(sd::ChildMode::kDeterministic));
}
