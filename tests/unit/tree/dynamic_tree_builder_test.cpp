// Tests of DynamicTreeBuilder (include/specdec/tree/dynamic_tree_builder.hpp;
// EAGLE-2, arXiv 2406.16858, §4.1-4.2). Random table drafters with frequent
// ties and zeros; every layer's frontier, every node's children and the final
// rerank are checked against brute force over the recorded pool.
#include "specdec/tree/dynamic_tree_builder.hpp"

#include <algorithm>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "support/catch.hpp"
#include "support/exceptions.hpp"
#include "unit/tree/table_drafter.hpp"

namespace sd = specdec;
using sd::testing::message_of;
using sd::testing::TableDrafter;

static_assert(sd::TreeBuilder<sd::DynamicTreeBuilder>);

namespace {

constexpr std::int32_t kRoot = sd::DraftTree::kRoot;

// Brute force: nonzero tokens sorted by (probability desc, id asc), first m.
std::vector<sd::TokenId> brute_top(std::span<const float> row, std::size_t m) {
  std::vector<sd::TokenId> ids;
  for (std::size_t i = 0; i < row.size(); ++i)
    if (row[i] > 0.0f) ids.push_back(static_cast<sd::TokenId>(i));
  std::stable_sort(ids.begin(), ids.end(), [&](auto a, auto b) { return row[a] > row[b]; });
  if (ids.size() > m) ids.resize(m);
  return ids;
}

// Brute force: the n best of `candidates` by (cum_logprob desc, index asc).
std::vector<std::int32_t> brute_best(const sd::DraftTree& pool, std::vector<std::int32_t> candidates,
                                     std::size_t n) {
  std::stable_sort(candidates.begin(), candidates.end(),
                   [&](auto a, auto b) { return pool.node(a).cum_logprob > pool.node(b).cum_logprob; });
  if (candidates.size() > n) candidates.resize(n);
  return candidates;
}

struct Case {
  std::int32_t top_k, depth, total;
  sd::DraftBudget budget;
  std::uint32_t table_seed;
  std::int64_t vocab;
};

// Checks one build against brute force over the recorded pool; returns the
// number of levels it expected.
void check_build(const Case& c) {
  INFO("top_k " << c.top_k << ", depth " << c.depth << ", total " << c.total << ", max_depth "
                << c.budget.max_depth << ", verify_nodes " << c.budget.verify_nodes << ", stop_below "
                << c.budget.stop_below << ", table seed " << c.table_seed << ", vocab " << c.vocab);
  TableDrafter drafter(c.vocab, [&](sd::TokenId token, std::int32_t depth) {
    return sd::testing::random_row(c.table_seed, token, depth, c.vocab);
  });
  sd::DynamicTreeBuilder builder(c.top_k, c.depth, c.total);
  sd::RandomStream rng(1);
  sd::DraftTree tree;
  sd::ProbMatrix rows;
  builder.build(drafter, c.budget, 77, rng, tree, rows);
  CHECK(rng.offset() == 0);  // deterministic: no uniforms
  const auto& pool = builder.pool();
  const auto levels = std::min(c.depth, c.budget.max_depth);
  const auto total = std::min(c.total, c.budget.verify_nodes);
  if (levels == 0 || total == 0) {
    CHECK(tree.empty());
    CHECK(drafter.calls.empty());
    return;
  }

  // Layer by layer: call i proposes for the frontier; the pool's depth-(i+1)
  // nodes are exactly the top_k tokens of each frontier row.
  REQUIRE(!drafter.calls.empty());
  REQUIRE(drafter.calls.size() <= static_cast<std::size_t>(levels));
  CHECK(drafter.calls[0].frontier == std::vector<std::int32_t>{kRoot});
  std::int64_t next_row = 0;
  for (std::size_t i = 0; i < drafter.calls.size(); ++i) {
    INFO("call " << i);
    const auto& call = drafter.calls[i];
    CHECK(call.first_row == next_row);
    next_row += static_cast<std::int64_t>(call.frontier.size());
    if (i > 0) {  // frontier = top_k of the previous layer, minus those below stop_below, in index order
      std::vector<std::int32_t> layer;
      for (std::int32_t n = 0; n < pool.size(); ++n)
        if (pool.depth(n) == static_cast<std::int32_t>(i)) layer.push_back(n);
      auto want = brute_best(pool, layer, static_cast<std::size_t>(c.top_k));
      std::erase_if(want, [&](auto n) { return pool.node(n).draft_prob < c.budget.stop_below; });
      std::sort(want.begin(), want.end());
      CHECK(call.frontier == want);
    }
    std::vector<std::int32_t> children_of_frontier;
    for (std::size_t f = 0; f < call.frontier.size(); ++f) {
      const auto s = call.frontier[f];
      const auto row = rows.row(call.first_row + static_cast<std::int64_t>(f));
      const auto want_row = drafter.row_for(call.tokens[f], call.depths[f]);
      CHECK(std::vector<float>(row.begin(), row.end()) == want_row);
      const auto kids = pool.children(s);
      CHECK(pool.tokens_of(kids) == brute_top(row, static_cast<std::size_t>(c.top_k)));
      CHECK(pool.children_draft_row(s) == call.first_row + static_cast<std::int64_t>(f));
      CHECK(pool.children_mode(s) == sd::ChildMode::kDeterministic);
      for (auto k : kids) {
        CHECK(pool.node(k).draft_prob == row[static_cast<std::size_t>(pool.token(k))]);
        children_of_frontier.push_back(k);
      }
    }
    std::vector<std::int32_t> layer;
    for (std::int32_t n = 0; n < pool.size(); ++n)
      if (pool.depth(n) == static_cast<std::int32_t>(i) + 1) layer.push_back(n);
    std::sort(children_of_frontier.begin(), children_of_frontier.end());
    CHECK(layer == children_of_frontier);
  }
  CHECK(rows.num_rows() == next_row);
  CHECK(pool.max_depth() <= levels);
  // A call is skipped only when the frontier came out empty (or depth is reached).
  if (drafter.calls.size() < static_cast<std::size_t>(levels)) {
    std::vector<std::int32_t> last_layer;
    for (std::int32_t n = 0; n < pool.size(); ++n)
      if (pool.depth(n) == static_cast<std::int32_t>(drafter.calls.size())) last_layer.push_back(n);
    auto want = brute_best(pool, last_layer, static_cast<std::size_t>(c.top_k));
    std::erase_if(want, [&](auto n) { return pool.node(n).draft_prob < c.budget.stop_below; });
    CHECK(want.empty());
  }

  // Rerank: the kept set is the brute-force top-`total` of the whole pool.
  std::vector<std::int32_t> all(static_cast<std::size_t>(pool.size()));
  std::iota(all.begin(), all.end(), 0);
  auto want_kept = brute_best(pool, all, static_cast<std::size_t>(total));
  std::sort(want_kept.begin(), want_kept.end());
  CHECK(builder.kept() == want_kept);
  REQUIRE(tree.size() == static_cast<std::int32_t>(want_kept.size()));
  CHECK(tree.size() == std::min(total, pool.size()));
  CHECK(tree.root_token() == 77);
  const auto& kept = builder.kept();
  for (std::int32_t i = 0; i < tree.size(); ++i) {
    INFO("node " << i << " (pool " << kept[static_cast<std::size_t>(i)] << ")");
    const auto& n = tree.node(i);
    const auto& pn = pool.node(kept[static_cast<std::size_t>(i)]);
    CHECK(n.token == pn.token);
    CHECK(n.draft_prob == pn.draft_prob);
    CHECK(n.cum_logprob == pn.cum_logprob);
    CHECK(n.depth == pn.depth);
    CHECK((n.parent == kRoot ? kRoot : kept[static_cast<std::size_t>(n.parent)]) == pn.parent);
  }
  // Slots: children deterministic, and the recorded row is the drafter's row
  // for that slot (so the top children are the row's best tokens, in order).
  for (std::int32_t s = kRoot; s < tree.size(); ++s) {
    INFO("slot " << s);
    if (tree.num_children(s) == 0) {
      CHECK(tree.children_mode(s) == sd::ChildMode::kNone);
      continue;
    }
    CHECK(tree.children_mode(s) == sd::ChildMode::kDeterministic);
    const auto row = rows.row(tree.children_draft_row(s));
    const auto want_row = drafter.row_for(s == kRoot ? 77 : tree.token(s), s == kRoot ? 0 : tree.depth(s));
    CHECK(std::vector<float>(row.begin(), row.end()) == want_row);
    const auto kids = tree.children(s);
    const auto best = brute_top(row, kids.size());
    CHECK(tree.tokens_of(kids) == best);
  }
}

}  // namespace

TEST_CASE("DynamicTreeBuilder rejects non-positive parameters and bad budgets", "[unit][tree]") {
  auto msg = message_of<sd::InvalidArgumentError>([] { sd::DynamicTreeBuilder(0, 5, 60); });
  CHECK(msg.find("got 0, 5 and 60") != std::string::npos);
  CHECK_THROWS_AS(sd::DynamicTreeBuilder(10, 0, 60), sd::InvalidArgumentError);
  CHECK_THROWS_AS(sd::DynamicTreeBuilder(10, 5, -1), sd::InvalidArgumentError);
  sd::DynamicTreeBuilder b(2, 2, 4);
  TableDrafter drafter(4, [](sd::TokenId, std::int32_t) {
    return std::vector<float>{0.25f, 0.25f, 0.25f, 0.25f};
  });
  sd::RandomStream rng(1);
  sd::DraftTree tree;
  sd::ProbMatrix rows;
  msg = message_of<sd::InvalidArgumentError>(
      [&] { b.build(drafter, {.max_depth = 3, .max_nodes = 4, .verify_nodes = -1}, 0, rng, tree, rows); });
  CHECK(msg.find("verify_nodes -1") != std::string::npos);
}

TEST_CASE(
    "DynamicTreeBuilder expands the top_k frontier with one call per level and keeps the best "
    "total_tokens of the pool (hand example)",
    "[unit][tree]") {
  // vocab 4; root row (0.5, 0.3, 0.2, 0); rows below a token t at depth d:
  // token 0 -> (0.9, 0.1, 0, 0), token 1 -> (0, 0, 0.6, 0.4), others -> (0.25 x 4).
  TableDrafter drafter(4, [](sd::TokenId token, std::int32_t depth) {
    if (depth == 0) return std::vector<float>{0.5f, 0.3f, 0.2f, 0.0f};
    if (token == 0) return std::vector<float>{0.9f, 0.1f, 0.0f, 0.0f};
    if (token == 1) return std::vector<float>{0.0f, 0.0f, 0.6f, 0.4f};
    return std::vector<float>{0.25f, 0.25f, 0.25f, 0.25f};
  });
  sd::DynamicTreeBuilder builder(2, 3, 5);
  sd::RandomStream rng(1);
  sd::DraftTree tree;
  sd::ProbMatrix rows;
  builder.build(drafter, {.max_depth = 8, .max_nodes = 100, .verify_nodes = 100}, 9, rng, tree, rows);
  // Level 1: tokens 0 (0.5), 1 (0.3) -> pool 0, 1.
  // Level 2: frontier {0, 1}: 0 -> 0 (0.45), 1 (0.05); 1 -> 2 (0.18), 3 (0.12) -> pool 2..5.
  // Level 3: frontier = best two of {0.45, 0.05, 0.18, 0.12} = pool 2 (token 0) and 4 (token 2):
  //   2 -> 0 (0.405), 1 (0.045); 4 -> four tokens at 0.045, top-2 = 0, 1 -> pool 6..9.
  REQUIRE(drafter.calls.size() == 3);
  CHECK(drafter.calls[1].frontier == std::vector<std::int32_t>{0, 1});
  CHECK(drafter.calls[2].frontier == std::vector<std::int32_t>{2, 4});
  const auto& pool = builder.pool();
  REQUIRE(pool.size() == 10);
  CHECK(pool.tokens_of(pool.children(4)) == std::vector<sd::TokenId>{0, 1});
  // Best 5 of the pool: 0 (0.5), 2 (0.45), 6 (0.405), 1 (0.3), 4 (0.18).
  CHECK(builder.kept() == std::vector<std::int32_t>{0, 1, 2, 4, 6});
  REQUIRE(tree.size() == 5);
  CHECK(tree.tokens_of(tree.path_to(4)) == std::vector<sd::TokenId>{0, 0, 0});
  CHECK(tree.tokens_of(tree.path_to(3)) == std::vector<sd::TokenId>{1, 2});
  CHECK(tree.children_draft_row(kRoot) == 0);
  CHECK(tree.children_draft_row(0) == 1);  // node 0 = pool 0, proposed in call 1 as the first slot
  CHECK(tree.children_draft_row(1) == 2);
  CHECK(tree.children_draft_row(2) == 3);  // pool 2, first slot of call 2
  CHECK(tree.num_children(3) == 0);        // pool 4's children were all reranked away
  CHECK(tree.children_draft_row(3) == -1);
  CHECK(std::exp(tree.node(4).cum_logprob) == Approx(0.405));
}

TEST_CASE("DynamicTreeBuilder matches brute force on random drafters with ties and zeros", "[unit][tree]") {
  std::mt19937 gen(20240611);
  auto pick = [&](int lo, int hi) { return std::uniform_int_distribution<int>(lo, hi)(gen); };
  for (int iter = 0; iter < 300; ++iter) {
    Case c;
    c.top_k = pick(1, 4);
    c.depth = pick(1, 5);
    c.total = pick(1, 40);
    c.budget.max_depth = pick(0, 6);
    c.budget.verify_nodes = pick(0, 45);
    c.budget.max_nodes = 100;
    c.budget.stop_below = pick(0, 3) == 0 ? 0.2f : 0.0f;
    c.table_seed = static_cast<std::uint32_t>(iter);
    c.vocab = pick(2, 9);
    check_build(c);
  }
}

TEST_CASE(
    "DynamicTreeBuilder limits levels to min(depth, max_depth), nodes to min(total_tokens, verify_nodes) and the "
    "nodes it runs to max_nodes",
    "[unit][tree]") {
  TableDrafter drafter(6, [](sd::TokenId token, std::int32_t depth) {
    return sd::testing::random_row(3, token, depth, 6, 9);
  });
  sd::RandomStream rng(1);
  sd::DraftTree tree;
  sd::ProbMatrix rows;
  for (std::int32_t depth : {1, 3, 5})
    for (std::int32_t max_depth : {0, 1, 2, 4, 7})
      for (std::int32_t verify : {0, 3, 10, 500})
        for (std::int32_t max_nodes : {0, 2, 4, 100}) {
          INFO("depth " << depth << ", max_depth " << max_depth << ", verify_nodes " << verify << ", max_nodes "
                        << max_nodes);
          drafter.calls.clear();
          sd::DynamicTreeBuilder builder(3, depth, 12);
          builder.build(drafter, {.max_depth = max_depth, .max_nodes = max_nodes, .verify_nodes = verify}, 1, rng,
                        tree, rows);
          const auto levels = std::min(depth, max_depth);
          // Levels 2.. run a frontier of at most top_k = 3 nodes, cut to what
          // max_nodes leaves; an empty frontier ends the expansion.
          std::int32_t expected_levels = verify == 0 ? 0 : std::min(levels, 1);
          for (std::int32_t run = 0, l = 2; verify > 0 && l <= levels && run < max_nodes; ++l) {
            run += std::min(3, max_nodes - run);
            expected_levels = l;
          }
          CHECK(drafter.calls.size() == static_cast<std::size_t>(expected_levels));
          CHECK(rows.num_rows() - (verify == 0 || levels == 0 ? 0 : 1) <= max_nodes);  // the root's row is free
          CHECK(builder.pool().max_depth() == expected_levels);
          CHECK(tree.size() == std::min({12, verify, builder.pool().size()}));
          CHECK(tree.max_depth() <= levels);
        }
}

TEST_CASE("DynamicTreeBuilder drafts nothing below a slot whose row is all zero", "[unit][tree]") {
  TableDrafter drafter(3, [](sd::TokenId token, std::int32_t depth) {
    if (depth == 0) return std::vector<float>{0.5f, 0.5f, 0.0f};
    if (token == 0) return std::vector<float>{0.0f, 0.0f, 0.0f};
    return std::vector<float>{0.0f, 0.0f, 1.0f};
  });
  sd::DynamicTreeBuilder builder(2, 4, 10);
  sd::RandomStream rng(1);
  sd::DraftTree tree;
  sd::ProbMatrix rows;
  builder.build(drafter, {.max_depth = 4, .max_nodes = 10, .verify_nodes = 10}, 5, rng, tree, rows);
  // root -> 0, 1; 0 has no proposal; 1 -> 2 (one-hot); 2 -> 2; 2 -> 2.
  REQUIRE(tree.size() == 5);
  CHECK(tree.num_children(0) == 0);
  CHECK(tree.children_mode(0) == sd::ChildMode::kNone);
  CHECK(tree.tokens_of(tree.path_to(4)) == std::vector<sd::TokenId>{1, 2, 2, 2});
  CHECK(drafter.calls.size() == 4);

  // A root row of zeros: an empty tree after one call.
  TableDrafter silent(3, [](sd::TokenId, std::int32_t) { return std::vector<float>{0.0f, 0.0f, 0.0f}; });
  builder.build(silent, {.max_depth = 4, .max_nodes = 10, .verify_nodes = 10}, 5, rng, tree, rows);
  CHECK(tree.empty());
  CHECK(silent.calls.size() == 1);
  CHECK(tree.children_mode(kRoot) == sd::ChildMode::kNone);
}
