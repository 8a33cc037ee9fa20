// Tests of prune_to_budget (include/specdec/core/draft_tree_ops.hpp; EAGLE-2's
// rerank, arXiv 2406.16858, §4.2) and the structural mode rule that keeps
// pruned trees lossless (docs/acceptance.md): a prune that selects makes every
// kept slot kDeterministic. Random cases are checked against a brute-force
// sort.
#include "unit/core/tree_ops_test_util.hpp"

// --- prune_to_budget ----------------------------------------------------------------

namespace {

// root ─┬─ 0 (0.6) ─┬─ 2 (0.4: 0.24) ── 5 (0.5: 0.12)
//       │           └─ 3 (0.25: 0.15)
//       └─ 1 (0.3) ── 4 (0.9: 0.27)
// Ranking by path probability: 0, 1, 4, 2, 3, 5.
DraftTree scored_tree() {
  DraftTree t(42);
  t.add_node(kRoot, 10, 0.6f);
  t.add_node(kRoot, 11, 0.3f);
  t.add_node(0, 20, 0.4f);
  t.add_node(0, 21, 0.25f);
  t.add_node(1, 22, 0.9f);
  t.add_node(2, 30, 0.5f);
  t.set_children_source(kRoot, 0, ChildMode::kSampledWithReplacement);
  t.set_children_source(0, 1, ChildMode::kSampledWithoutReplacement);
  t.set_children_source(1, 2, ChildMode::kSampledWithReplacement);
  t.set_children_source(2, 3, ChildMode::kSampledWithoutReplacement);
  return t;
}

}  // namespace

TEST_CASE("prune_to_budget keeps the best nodes by path probability", "[unit][tree]") {
  const auto t = scored_tree();
  const std::vector<std::vector<std::int32_t>> expected{
      {}, {0}, {0, 1}, {0, 1, 4}, {0, 1, 2, 4}, {0, 1, 2, 3, 4}, {0, 1, 2, 3, 4, 5}};
  for (std::int32_t budget = 0; budget <= 8; ++budget) {
    INFO("budget " << budget);
    const auto p = prune_to_budget(t, budget);
    CHECK(p.kept == expected[static_cast<std::size_t>(std::min(budget, 6))]);
    CHECK(p.tree.size() == std::min(budget, 6));
    CHECK(p.tree.root_token() == 42);
  }

  const auto p = prune_to_budget(t, 4);  // keeps 0, 1, 2, 4
  REQUIRE(p.tree.size() == 4);
  CHECK(p.tree.tokens_of(p.tree.path_to(2)) == std::vector<TokenId>{10, 20});
  CHECK(p.tree.tokens_of(p.tree.path_to(3)) == std::vector<TokenId>{11, 22});
  CHECK(p.tree.parent(3) == 1);
  CHECK(p.tree.node(3).draft_prob == 0.9f);
  CHECK(p.tree.node(3).cum_logprob == t.node(4).cum_logprob);
  // A selecting prune makes every slot that keeps children deterministic,
  // with its draft row kept: the root kept both children, node 0 lost child 3,
  // node 1 kept its only child.
  CHECK(p.tree.children_mode(kRoot) == ChildMode::kDeterministic);
  CHECK(p.tree.children_draft_row(kRoot) == 0);
  CHECK(p.tree.children_mode(0) == ChildMode::kDeterministic);
  CHECK(p.tree.children_draft_row(0) == 1);
  CHECK(p.tree.children_mode(1) == ChildMode::kDeterministic);
  CHECK(p.tree.children_draft_row(1) == 2);
  // Node 2 lost its only child: no children, no source.
  CHECK(p.tree.num_children(2) == 0);
  CHECK(p.tree.children_mode(2) == ChildMode::kNone);
  CHECK(p.tree.children_draft_row(2) == -1);
  CHECK(p.tree.children_mode(3) == ChildMode::kNone);
}

TEST_CASE("prune_to_budget makes every slot with children deterministic, even when the budget covers the tree",
          "[unit][tree]") {
  const auto t = scored_tree();
  // A sampled tree's size depends on its draws (a builder that stops early),
  // so a mode that depended on whether the budget covered the tree would
  // depend on the draws: lossy (the statistical test of pruned static trees).
  SECTION("budget >= size: same nodes and rows, every sampled mode now deterministic") {
    for (std::int32_t budget : {6, 7, 100}) {
      INFO("budget " << budget);
      const auto p = prune_to_budget(t, budget);
      CHECK(p.kept == std::vector<std::int32_t>{0, 1, 2, 3, 4, 5});
      REQUIRE(p.tree.size() == t.size());
      REQUIRE(t.children_mode(kRoot) == ChildMode::kSampledWithReplacement);
      REQUIRE(t.children_mode(0) == ChildMode::kSampledWithoutReplacement);
      for (const std::int32_t slot : {kRoot, 0, 1, 2}) CHECK(p.tree.children_mode(slot) == ChildMode::kDeterministic);
      CHECK(p.tree.children_draft_row(kRoot) == 0);
      CHECK(p.tree.children_draft_row(0) == 1);
      CHECK(p.tree.children_draft_row(1) == 2);
      CHECK(p.tree.children_draft_row(2) == 3);
    }
  }
  SECTION("budget = size - 1: only node 5 goes, yet the root, 0 and 1 become deterministic") {
    const auto p = prune_to_budget(t, 5);
    REQUIRE(p.kept == std::vector<std::int32_t>{0, 1, 2, 3, 4});
    // The root, node 0 and node 1 keep all their children.
    CHECK(p.tree.children(kRoot) == std::vector<std::int32_t>{0, 1});
    CHECK(p.tree.children(0) == std::vector<std::int32_t>{2, 3});
    CHECK(p.tree.children(1) == std::vector<std::int32_t>{4});
    CHECK(p.tree.children_mode(kRoot) == ChildMode::kDeterministic);
    CHECK(p.tree.children_draft_row(kRoot) == 0);
    CHECK(p.tree.children_mode(0) == ChildMode::kDeterministic);
    CHECK(p.tree.children_draft_row(0) == 1);
    CHECK(p.tree.children_mode(1) == ChildMode::kDeterministic);
    CHECK(p.tree.children_draft_row(1) == 2);
    // Node 2 lost its only child.
    CHECK(p.tree.num_children(2) == 0);
    CHECK(p.tree.children_mode(2) == ChildMode::kNone);
    CHECK(p.tree.children_draft_row(2) == -1);
  }
  SECTION("a slot with children and no recorded source also becomes deterministic") {
    DraftTree u(1);
    u.add_node(kRoot, 2, 0.5f);
    u.add_node(kRoot, 3, 0.25f);
    const auto p = prune_to_budget(u, 1);
    REQUIRE(p.kept == std::vector<std::int32_t>{0});
    CHECK(p.tree.children_mode(kRoot) == ChildMode::kDeterministic);
    CHECK(p.tree.children_draft_row(kRoot) == -1);
    const auto whole = prune_to_budget(u, 2);
    CHECK(whole.tree.children_mode(kRoot) == ChildMode::kDeterministic);
  }
}

TEST_CASE("prune_to_budget breaks score ties by the lower index", "[unit][tree]") {
  SECTION("all scores equal: the first nodes win") {
    DraftTree t(0);
    for (std::int32_t p : {-1, -1, 0, 1, 0, 2}) t.add_node(p, 1, 1.0f);
    CHECK(prune_to_budget(t, 3).kept == std::vector<std::int32_t>{0, 1, 2});
    CHECK(prune_to_budget(t, 5).kept == std::vector<std::int32_t>{0, 1, 2, 3, 4});
  }
  SECTION("a deeper node of lower index beats a shallower tied node") {
    // root ─┬─ 0 (1.0) ── 1 (0.5)      1 and 2 both score log 0.5.
    //       └─ 2 (0.5)
    DraftTree t(0);
    t.add_node(kRoot, 1, 1.0f);
    t.add_node(0, 2, 0.5f);
    t.add_node(kRoot, 3, 0.5f);
    REQUIRE(t.node(1).cum_logprob == t.node(2).cum_logprob);
    CHECK(prune_to_budget(t, 2).kept == std::vector<std::int32_t>{0, 1});
  }
  SECTION("zero-probability nodes tie at -inf and come last") {
    DraftTree t(0);
    t.add_node(kRoot, 1, 0.0f);  // 0: -inf
    t.add_node(kRoot, 2, 0.1f);  // 1
    t.add_node(1, 3, 0.0f);      // 2: -inf
    t.add_node(0, 4, 0.5f);      // 3: -inf
    CHECK(prune_to_budget(t, 1).kept == std::vector<std::int32_t>{1});
    CHECK(prune_to_budget(t, 2).kept == std::vector<std::int32_t>{0, 1});
    CHECK(prune_to_budget(t, 3).kept == std::vector<std::int32_t>{0, 1, 2});
    CHECK(prune_to_budget(t, 4).kept == std::vector<std::int32_t>{0, 1, 2, 3});
  }
}

TEST_CASE("prune_to_budget with budget 0 gives an empty tree and rejects a negative budget",
          "[unit][tree]") {
  const auto t = scored_tree();
  const auto p = prune_to_budget(t, 0);
  CHECK(p.tree.empty());
  CHECK(p.kept.empty());
  CHECK(p.tree.root_token() == 42);
  CHECK(p.tree.children_mode(kRoot) == ChildMode::kNone);
  CHECK(prune_to_budget(DraftTree(3), 5).tree.empty());

  CHECK_THAT(message_of<InvalidArgumentError>([&] { (void)prune_to_budget(t, -1); }),
             Catch::Contains("budget must be >= 0, got -1"));
  REQUIRE_THROWS_AS(prune_to_budget(DraftTree(3), -7), InvalidArgumentError);
}

TEST_CASE("Random trees: prune_to_budget keeps the top nodes by cum_logprob and their ancestors",
          "[unit][tree][property]") {
  std::mt19937 rng(0x9e11);
  int unchanged = 0;                // budget >= size
  int sampled_slot_kept_whole = 0;  // a sampled slot that kept all children, budget < size
  for (int k = 0; k < 500; ++k) {
    const auto n = std::uniform_int_distribution<std::int32_t>(1, 80)(rng);
    const auto t = random_tree(rng, n, /*distinct_siblings=*/false, 5);
    const auto budget = std::uniform_int_distribution<std::int32_t>(0, n + 3)(rng);
    INFO("tree " << k << " of " << n << " nodes, budget " << budget);
    const auto p = prune_to_budget(t, budget);

    REQUIRE(p.tree.size() == std::min(budget, n));
    REQUIRE(p.kept.size() == static_cast<std::size_t>(p.tree.size()));
    REQUIRE(std::is_sorted(p.kept.begin(), p.kept.end()));
    REQUIRE(std::adjacent_find(p.kept.begin(), p.kept.end()) == p.kept.end());
    REQUIRE(p.kept == top_by_score(t, budget));

    // Closure, and the kept nodes form the induced subtree.
    std::vector<std::int32_t> new_index(static_cast<std::size_t>(n), -1);
    for (std::size_t j = 0; j < p.kept.size(); ++j)
      new_index[static_cast<std::size_t>(p.kept[j])] = static_cast<std::int32_t>(j);
    for (std::int32_t j = 0; j < p.tree.size(); ++j) {
      const auto& old = t.node(p.kept[static_cast<std::size_t>(j)]);
      if (old.parent != kRoot) REQUIRE(new_index[static_cast<std::size_t>(old.parent)] >= 0);
      const auto expected_parent =
          old.parent == kRoot ? kRoot : new_index[static_cast<std::size_t>(old.parent)];
      REQUIRE(p.tree.parent(j) == expected_parent);
      REQUIRE(p.tree.token(j) == old.token);
      REQUIRE(p.tree.node(j).draft_prob == old.draft_prob);
      REQUIRE(p.tree.node(j).depth == old.depth);
      REQUIRE(p.tree.node(j).cum_logprob == old.cum_logprob);
    }

    if (budget >= n) {
      // Nothing cut: every node is kept, in order.
      REQUIRE(p.tree.size() == n);
      ++unchanged;
    }
    // Every slot that keeps a child is deterministic with its row kept,
    // whether or not it lost any (even when nothing was cut); a slot that
    // keeps none has no source.
    for (std::int32_t s = kRoot; s < n; ++s) {
      const auto ns = s == kRoot ? kRoot : new_index[static_cast<std::size_t>(s)];
      if (ns == -1 && s != kRoot) continue;
      const auto kept_children = p.tree.num_children(ns);
      REQUIRE(kept_children <= t.num_children(s));
      if (kept_children == 0) {
        REQUIRE(p.tree.children_mode(ns) == ChildMode::kNone);
        REQUIRE(p.tree.children_draft_row(ns) == -1);
      } else {
        if (kept_children == t.num_children(s) &&
            (t.children_mode(s) == ChildMode::kSampledWithReplacement ||
             t.children_mode(s) == ChildMode::kSampledWithoutReplacement))
          ++sampled_slot_kept_whole;
        REQUIRE(p.tree.children_mode(ns) == ChildMode::kDeterministic);
        REQUIRE(p.tree.children_draft_row(ns) == t.children_draft_row(s));
      }
    }
  }
  CHECK(unchanged > 0);
  CHECK(sampled_slot_kept_whole > 0);
}
