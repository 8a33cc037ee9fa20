// Tests of trie_union (include/specdec/core/draft_tree_ops.hpp; Lyanna's
// verification fusion, arXiv 2602.21224, §6.2), including the structural
// mode rule that keeps the union lossless (docs/acceptance.md): a slot filled
// by more than one contributor (a and b, or two slots of b) becomes
// kDeterministic, even when b's children coincide with a's. Random cases are
// checked against brute force over root-to-node token sequences. Pruning:
// prune_to_budget_test.cpp.
#include "unit/core/tree_ops_test_util.hpp"

// --- trie_union ---------------------------------------------------------------------

TEST_CASE("trie_union requires both trees to have the same root token", "[unit][tree]") {
  DraftTree a(5), b(6);
  a.add_node(kRoot, 1, 0.5f);
  b.add_node(kRoot, 1, 0.5f);
  const auto msg = message_of<InvalidTreeError>([&] { (void)trie_union(a, b); });
  CHECK_THAT(msg, Catch::Contains("roots differ"));
  CHECK_THAT(msg, Catch::Contains("token 5 vs token 6"));
  REQUIRE_THROWS_AS(trie_union(DraftTree(5), DraftTree(6)), InvalidTreeError);
  REQUIRE_NOTHROW(trie_union(a, DraftTree(5)));
}

TEST_CASE("trie_union merges shared prefixes, keeps a's indices and appends b's new nodes in order",
          "[unit][tree]") {
  // a: root ─┬─ 0:10 ── 2:20        b: root ─┬─ 0:10 ─┬─ 1:21
  //          └─ 1:11                         │        └─ 2:20 ── 5:40
  //                                          └─ 3:12 ── 4:30
  DraftTree a(9);
  a.add_node(kRoot, 10, 0.5f);
  a.add_node(kRoot, 11, 0.25f);
  a.add_node(0, 20, 0.5f);
  DraftTree b(9);
  b.add_node(kRoot, 10, 0.125f);
  b.add_node(0, 21, 0.75f);
  b.add_node(0, 20, 0.125f);
  b.add_node(kRoot, 12, 1.0f);
  b.add_node(3, 30, 0.5f);
  b.add_node(2, 40, 0.5f);

  const auto u = trie_union(a, b);
  REQUIRE(u.tree.size() == 7);
  CHECK(u.tree.root_token() == 9);
  CHECK(u.from_a == std::vector<std::int32_t>{0, 1, 2});
  CHECK(u.from_b == std::vector<std::int32_t>{0, 3, 2, 4, 5, 6});
  const std::vector<TokenId> tokens{10, 11, 20, 21, 12, 30, 40};
  const std::vector<std::int32_t> parents{-1, -1, 0, 0, -1, 4, 2};
  for (std::int32_t i = 0; i < 7; ++i) {
    CHECK(u.tree.token(i) == tokens[static_cast<std::size_t>(i)]);
    CHECK(u.tree.parent(i) == parents[static_cast<std::size_t>(i)]);
  }
  // Merged nodes keep a's draft probability; new ones bring b's.
  CHECK(u.tree.node(0).draft_prob == 0.5f);
  CHECK(u.tree.node(2).draft_prob == 0.5f);
  CHECK(u.tree.node(3).draft_prob == 0.75f);
  CHECK(u.tree.node(4).draft_prob == 1.0f);
  CHECK(u.tree.children(kRoot) == std::vector<std::int32_t>{0, 1, 4});
  CHECK(u.tree.children(0) == std::vector<std::int32_t>{2, 3});
  CHECK(u.tree.depth(6) == 3);
  CHECK(u.tree.tokens_of(u.tree.path_to(6)) == std::vector<TokenId>{10, 20, 40});
  // No sources were recorded: slots both trees fill still become
  // deterministic; the others keep "none".
  CHECK(u.tree.children_mode(kRoot) == ChildMode::kDeterministic);
  CHECK(u.tree.children_mode(0) == ChildMode::kDeterministic);
  CHECK(u.tree.children_mode(2) == ChildMode::kNone);
  CHECK(u.tree.children_mode(4) == ChildMode::kNone);
  CHECK(u.tree.children_draft_row(4) == -1);
}

TEST_CASE("trie_union keeps the draft source of a slot whose children come from one contributor",
          "[unit][tree]") {
  // a: root ── 0:1 ─┬─ 1:2             b: root ── 0:1 ─┬─ 1:2 ── 3:5
  //                 └─ 2:3 ── 3:4                      └─ 2:3
  //                                    b: root ── 4:7 ── 5:8   (added below)
  DraftTree a(0);
  a.add_node(kRoot, 1, 0.5f);
  a.add_node(0, 2, 0.5f);
  a.add_node(0, 3, 0.5f);
  a.add_node(2, 4, 0.5f);
  a.set_children_source(kRoot, 0, ChildMode::kSampledWithReplacement);
  a.set_children_source(0, 1, ChildMode::kSampledWithoutReplacement);
  a.set_children_source(2, 2, ChildMode::kSampledWithReplacement);

  DraftTree b(0);
  b.add_node(kRoot, 1, 0.25f);
  b.add_node(0, 2, 0.25f);
  b.add_node(0, 3, 0.25f);
  b.add_node(1, 5, 0.25f);
  b.set_children_source(kRoot, 0, ChildMode::kSampledWithReplacement);
  b.set_children_source(0, 1, ChildMode::kSampledWithoutReplacement);
  b.set_children_source(1, 2, ChildMode::kSampledWithoutReplacement);

  SECTION("a-only and b-only slots keep their source; slots both fill are deterministic") {
    const auto u = trie_union(a, b, 10);
    REQUIRE(u.tree.size() == 5);
    CHECK(u.from_b == std::vector<std::int32_t>{0, 1, 2, 4});
    // a-only slot: a's source, untouched by the offset.
    CHECK(u.tree.children(2) == std::vector<std::int32_t>{3});
    CHECK(u.tree.children_mode(2) == ChildMode::kSampledWithReplacement);
    CHECK(u.tree.children_draft_row(2) == 2);
    // b-only children under a leaf of a: b's source, row shifted.
    CHECK(u.tree.children(1) == std::vector<std::int32_t>{4});
    CHECK(u.tree.children_mode(1) == ChildMode::kSampledWithoutReplacement);
    CHECK(u.tree.children_draft_row(1) == 12);
    // The root and node 0 get children from both trees (b only repeats a's,
    // in the same modes): deterministic.
    CHECK(u.tree.children_mode(kRoot) == ChildMode::kDeterministic);
    CHECK(u.tree.children_mode(0) == ChildMode::kDeterministic);
    // Leaves have none.
    CHECK(u.tree.children_mode(3) == ChildMode::kNone);
    CHECK(u.tree.children_draft_row(3) == -1);
    CHECK(u.tree.children_mode(4) == ChildMode::kNone);
    CHECK(u.tree.children_draft_row(4) == -1);
  }
  SECTION("children under a node new from b keep b's source; row -1 stays -1") {
    b.add_node(kRoot, 7, 0.5f);  // 4
    b.add_node(4, 8, 0.5f);      // 5
    b.set_children_source(4, -1, ChildMode::kSampledWithReplacement);
    const auto u = trie_union(a, b, 10);
    REQUIRE(u.tree.size() == 7);
    const auto n7 = u.from_b[4];
    CHECK(n7 == 5);
    CHECK(u.tree.children(n7) == std::vector<std::int32_t>{6});
    CHECK(u.tree.children_mode(n7) == ChildMode::kSampledWithReplacement);
    CHECK(u.tree.children_draft_row(n7) == -1);
    CHECK(u.tree.children(kRoot) == std::vector<std::int32_t>{0, 5});
    CHECK(u.tree.children_mode(kRoot) == ChildMode::kDeterministic);
  }
  SECTION("a union of a with an empty tree changes no source") {
    const auto u = trie_union(a, DraftTree(0), 10);
    require_same_tree(u.tree, a);
    CHECK(u.from_a == std::vector<std::int32_t>{0, 1, 2, 3});
    CHECK(u.from_b.empty());
  }
  SECTION("a union of an empty tree with b is b with its rows shifted") {
    const auto u = trie_union(DraftTree(0), b, 10);
    require_same_tree(u.tree, b, 10);
    CHECK(u.from_a.empty());
    CHECK(u.from_b == std::vector<std::int32_t>{0, 1, 2, 3});
  }
}

TEST_CASE("trie_union makes a slot deterministic when b's children all coincide with a's",
          "[unit][tree]") {
  // a: root ── 0:1 ─┬─ 1:2
  //                 └─ 2:3
  DraftTree a(0);
  a.add_node(kRoot, 1, 0.5f);
  a.add_node(0, 2, 0.5f);
  a.add_node(0, 3, 0.5f);
  a.set_children_source(kRoot, 0, ChildMode::kSampledWithReplacement);
  a.set_children_source(0, 1, ChildMode::kSampledWithoutReplacement);

  SECTION("b repeats a's child set in the same modes") {
    DraftTree b(0);
    b.add_node(kRoot, 1, 0.25f);
    b.add_node(0, 2, 0.25f);
    b.add_node(0, 3, 0.25f);
    b.set_children_source(kRoot, 0, ChildMode::kSampledWithReplacement);
    b.set_children_source(0, 1, ChildMode::kSampledWithoutReplacement);
    const auto u = trie_union(a, b, 7);
    // No node is added and every node keeps a's data...
    REQUIRE(u.tree.size() == 3);
    CHECK(u.from_b == std::vector<std::int32_t>{0, 1, 2});
    for (std::int32_t i = 0; i < 3; ++i) {
      CHECK(u.tree.token(i) == a.token(i));
      CHECK(u.tree.parent(i) == a.parent(i));
      CHECK(u.tree.node(i).draft_prob == a.node(i).draft_prob);
    }
    CHECK(u.tree.children(kRoot) == a.children(kRoot));
    CHECK(u.tree.children(0) == a.children(0));
    // ...but both slots with children had two contributors.
    CHECK(u.tree.children_mode(kRoot) == ChildMode::kDeterministic);
    CHECK(u.tree.children_mode(0) == ChildMode::kDeterministic);
    CHECK(u.tree.children_mode(1) == ChildMode::kNone);
    CHECK(u.tree.children_mode(2) == ChildMode::kNone);
  }
  SECTION("b's children are a strict subset of a's") {
    DraftTree b(0);
    b.add_node(kRoot, 1, 0.25f);
    b.add_node(0, 3, 0.25f);
    b.set_children_source(0, 4, ChildMode::kSampledWithReplacement);
    const auto u = trie_union(a, b, 7);
    REQUIRE(u.tree.size() == 3);
    CHECK(u.from_b == std::vector<std::int32_t>{0, 2});
    CHECK(u.tree.children(0) == std::vector<std::int32_t>{1, 2});
    CHECK(u.tree.children_mode(0) == ChildMode::kDeterministic);
    CHECK(u.tree.children_mode(kRoot) == ChildMode::kDeterministic);
  }
  SECTION("b adds a sibling to a's children") {
    DraftTree b(0);
    b.add_node(kRoot, 1, 0.5f);
    b.add_node(0, 9, 0.5f);  // new sibling of a's nodes 1 and 2
    b.set_children_source(kRoot, 0, ChildMode::kSampledWithReplacement);
    b.set_children_source(0, 1, ChildMode::kSampledWithReplacement);
    const auto u = trie_union(a, b, 5);
    CHECK(u.from_b == std::vector<std::int32_t>{0, 3});
    CHECK(u.tree.children(0) == std::vector<std::int32_t>{1, 2, 3});
    CHECK(u.tree.children_mode(0) == ChildMode::kDeterministic);
    CHECK(u.tree.children_mode(kRoot) == ChildMode::kDeterministic);
    CHECK(u.tree.children_mode(3) == ChildMode::kNone);
  }
}

TEST_CASE("trie_union never merges b's nodes with each other", "[unit][tree]") {
  // a: root ── 0:1 ── 1:2
  DraftTree a(0);
  a.add_node(kRoot, 1, 0.5f);  // 0
  a.add_node(0, 2, 0.5f);      // 1
  a.set_children_source(kRoot, 3, ChildMode::kSampledWithReplacement);
  a.set_children_source(0, 4, ChildMode::kSampledWithoutReplacement);

  SECTION("duplicate siblings of b under a node that is new in the union stay distinct") {
    // b: root ─┬─ 0:1
    //          └─ 1:7 ─┬─ 2:5      7 is new in the union; b's two draws of
    //                  ├─ 3:5      token 5 under it stay two nodes.
    //                  └─ 4:6
    DraftTree b(0);
    b.add_node(kRoot, 1, 0.5f);
    b.add_node(kRoot, 7, 0.5f);
    b.add_node(1, 5, 0.5f);
    b.add_node(1, 5, 0.25f);
    b.add_node(1, 6, 0.5f);
    b.set_children_source(kRoot, 0, ChildMode::kSampledWithReplacement);
    b.set_children_source(1, 2, ChildMode::kSampledWithReplacement);
    const auto u = trie_union(a, b, 5);
    REQUIRE(u.tree.size() == 6);
    CHECK(u.from_b == std::vector<std::int32_t>{0, 2, 3, 4, 5});
    CHECK(u.tree.children(2) == std::vector<std::int32_t>{3, 4, 5});
    CHECK(u.tree.token(3) == 5);
    CHECK(u.tree.token(4) == 5);
    CHECK(u.tree.node(4).draft_prob == 0.25f);
    // One contributor (b's slot 1): its source, row shifted.
    CHECK(u.tree.children_mode(2) == ChildMode::kSampledWithReplacement);
    CHECK(u.tree.children_draft_row(2) == 7);
    CHECK(u.tree.children_mode(kRoot) == ChildMode::kDeterministic);
    CHECK(u.tree.children_mode(0) == ChildMode::kSampledWithoutReplacement);
    CHECK(u.tree.children_draft_row(0) == 4);
    const auto seqs = sequences(u.tree);
    CHECK(seqs.count(Sequence{7, 5}) == 2);
  }
  SECTION("duplicate siblings of b under a leaf of a stay distinct") {
    // b: root ── 0:1 ── 1:2 ─┬─ 2:5      a's node 1 (token 2) is a leaf; b's
    //                        ├─ 3:5      three draws 5, 5, 6 stay three nodes.
    //                        └─ 4:6
    DraftTree b(0);
    b.add_node(kRoot, 1, 0.5f);
    b.add_node(0, 2, 0.5f);
    b.add_node(1, 5, 0.5f);
    b.add_node(1, 5, 0.5f);
    b.add_node(1, 6, 0.5f);
    b.set_children_source(1, 2, ChildMode::kSampledWithReplacement);
    const auto u = trie_union(a, b, 5);
    REQUIRE(u.tree.size() == 5);
    CHECK(u.from_b == std::vector<std::int32_t>{0, 1, 2, 3, 4});
    CHECK(u.tree.children(1) == std::vector<std::int32_t>{2, 3, 4});
    CHECK(u.tree.children_mode(1) == ChildMode::kSampledWithReplacement);
    CHECK(u.tree.children_draft_row(1) == 7);
  }
  SECTION("duplicate siblings of b under a node of a with other children stay distinct") {
    // b: root ── 0:1 ─┬─ 1:3 ── 3:8      a's node 0 has one child (token 2);
    //                 └─ 2:3 ── 4:9      b's two 3s are two new nodes, each
    //                                    keeping its own children's source.
    DraftTree b(0);
    b.add_node(kRoot, 1, 0.5f);
    b.add_node(0, 3, 0.5f);
    b.add_node(0, 3, 0.5f);
    b.add_node(1, 8, 0.5f);
    b.add_node(2, 9, 0.5f);
    b.set_children_source(0, 0, ChildMode::kSampledWithReplacement);
    b.set_children_source(1, 6, ChildMode::kSampledWithReplacement);
    b.set_children_source(2, 7, ChildMode::kSampledWithoutReplacement);
    const auto u = trie_union(a, b, 5);
    REQUIRE(u.tree.size() == 6);
    CHECK(u.from_b == std::vector<std::int32_t>{0, 2, 3, 4, 5});
    CHECK(u.tree.children(0) == std::vector<std::int32_t>{1, 2, 3});
    CHECK(u.tree.children_mode(0) == ChildMode::kDeterministic);
    CHECK(u.tree.children(2) == std::vector<std::int32_t>{4});
    CHECK(u.tree.children_mode(2) == ChildMode::kSampledWithReplacement);
    CHECK(u.tree.children_draft_row(2) == 11);
    CHECK(u.tree.children(3) == std::vector<std::int32_t>{5});
    CHECK(u.tree.children_mode(3) == ChildMode::kSampledWithoutReplacement);
    CHECK(u.tree.children_draft_row(3) == 12);
  }
  SECTION("b's duplicates that both match a node of a merge into it; their slots are mixed") {
    // a': root ── 0:1 ── 1:3 (leaf)
    // b:  root ── 0:1 ─┬─ 1:3 ── 3:8     both 3s merge into a's node 1; their
    //                  └─ 2:3 ── 4:8     children (two 8s) stay two nodes,
    //                                    and node 1 has two contributors.
    DraftTree a2(0);
    a2.add_node(kRoot, 1, 0.5f);
    a2.add_node(0, 3, 0.5f);
    DraftTree b(0);
    b.add_node(kRoot, 1, 0.5f);
    b.add_node(0, 3, 0.5f);
    b.add_node(0, 3, 0.5f);
    b.add_node(1, 8, 0.5f);
    b.add_node(2, 8, 0.5f);
    b.set_children_source(1, 6, ChildMode::kSampledWithReplacement);
    b.set_children_source(2, 7, ChildMode::kSampledWithReplacement);
    const auto u = trie_union(a2, b, 5);
    REQUIRE(u.tree.size() == 4);
    CHECK(u.from_b == std::vector<std::int32_t>{0, 1, 1, 2, 3});
    CHECK(u.tree.children(1) == std::vector<std::int32_t>{2, 3});
    CHECK(u.tree.token(2) == 8);
    CHECK(u.tree.token(3) == 8);
    CHECK(u.tree.children_mode(1) == ChildMode::kDeterministic);
  }
  SECTION("a childless duplicate of b does not disturb its twin's source") {
    // a': root ── 0:1 ── 1:3 (leaf)
    // b:  root ── 0:1 ─┬─ 1:3            both 3s merge into a's node 1; only
    //                  └─ 2:3 ── 3:8     b's node 2 brings children there.
    DraftTree a2(0);
    a2.add_node(kRoot, 1, 0.5f);
    a2.add_node(0, 3, 0.5f);
    DraftTree b(0);
    b.add_node(kRoot, 1, 0.5f);
    b.add_node(0, 3, 0.5f);
    b.add_node(0, 3, 0.5f);
    b.add_node(2, 8, 0.5f);
    b.set_children_source(2, 7, ChildMode::kSampledWithoutReplacement);
    const auto u = trie_union(a2, b, 5);
    CHECK(u.from_b == std::vector<std::int32_t>{0, 1, 1, 2});
    CHECK(u.tree.children(1) == std::vector<std::int32_t>{2});
    CHECK(u.tree.children_mode(1) == ChildMode::kSampledWithoutReplacement);
    CHECK(u.tree.children_draft_row(1) == 12);
  }
}

TEST_CASE("trie_union with duplicates in a merges b's nodes into a's first matching child",
          "[unit][tree]") {
  // a: root ─┬─ 0:1 ── 2:5        union(a, a): b's node 1 (the second 1)
  //          └─ 1:1 ── 3:6        merges into a's node 0, so its child 6 is
  //                               new under node 0; a's node 1 is left alone.
  DraftTree a(0);
  a.add_node(kRoot, 1, 0.5f);
  a.add_node(kRoot, 1, 0.5f);
  a.add_node(0, 5, 0.5f);
  a.add_node(1, 6, 0.25f);
  a.set_children_source(kRoot, 0, ChildMode::kSampledWithReplacement);
  a.set_children_source(0, 1, ChildMode::kSampledWithReplacement);
  a.set_children_source(1, 2, ChildMode::kSampledWithoutReplacement);
  const auto u = trie_union(a, a, 10);
  REQUIRE(u.tree.size() == 5);
  CHECK(u.from_a == std::vector<std::int32_t>{0, 1, 2, 3});
  CHECK(u.from_b == std::vector<std::int32_t>{0, 0, 2, 4});
  CHECK(u.tree.parent(4) == 0);
  CHECK(u.tree.token(4) == 6);
  CHECK(u.tree.node(4).draft_prob == 0.25f);
  CHECK(u.tree.children(0) == std::vector<std::int32_t>{2, 4});
  CHECK(u.tree.children_mode(kRoot) == ChildMode::kDeterministic);
  CHECK(u.tree.children_mode(0) == ChildMode::kDeterministic);
  // Only a fills node 1: a's source.
  CHECK(u.tree.children(1) == std::vector<std::int32_t>{3});
  CHECK(u.tree.children_mode(1) == ChildMode::kSampledWithoutReplacement);
  CHECK(u.tree.children_draft_row(1) == 2);
}

TEST_CASE("trie_union of a tree with itself keeps its nodes and makes every filled slot "
          "deterministic, and with an empty tree it is the tree",
          "[unit][tree][property]") {
  std::mt19937 rng(0x0a11);
  int sampled_slots = 0;
  for (int k = 0; k < 200; ++k) {
    const auto n = std::uniform_int_distribution<std::int32_t>(0, 80)(rng);
    const auto a = random_tree(rng, n, /*distinct_siblings=*/true);
    const auto offset = std::uniform_int_distribution<std::int32_t>(0, 40)(rng);
    INFO("tree " << k << " of " << n << " nodes");

    const auto self = trie_union(a, a, offset);
    REQUIRE(self.tree.root_token() == a.root_token());
    REQUIRE(self.tree.size() == a.size());
    for (std::int32_t i = 0; i < n; ++i) {
      REQUIRE(self.tree.token(i) == a.token(i));
      REQUIRE(self.tree.parent(i) == a.parent(i));
      REQUIRE(self.tree.node(i).draft_prob == a.node(i).draft_prob);
      REQUIRE(self.tree.node(i).depth == a.node(i).depth);
      REQUIRE(self.tree.node(i).cum_logprob == a.node(i).cum_logprob);
    }
    for (std::int32_t s = kRoot; s < n; ++s) {
      REQUIRE(self.tree.children(s) == a.children(s));
      if (a.num_children(s) > 0) {
        if (a.children_mode(s) == ChildMode::kSampledWithReplacement ||
            a.children_mode(s) == ChildMode::kSampledWithoutReplacement)
          ++sampled_slots;
        REQUIRE(self.tree.children_mode(s) == ChildMode::kDeterministic);
      } else {
        REQUIRE(self.tree.children_mode(s) == a.children_mode(s));
        REQUIRE(self.tree.children_draft_row(s) == a.children_draft_row(s));
      }
    }
    std::vector<std::int32_t> identity(static_cast<std::size_t>(n));
    std::iota(identity.begin(), identity.end(), 0);
    REQUIRE(self.from_a == identity);
    REQUIRE(self.from_b == identity);

    const auto with_empty = trie_union(a, DraftTree(a.root_token()), offset);
    require_same_tree(with_empty.tree, a);
    REQUIRE(with_empty.from_a == identity);
    REQUIRE(with_empty.from_b.empty());

    // The other way round, b's tree comes back with its rows shifted.
    const auto onto_empty = trie_union(DraftTree(a.root_token()), a, offset);
    require_same_tree(onto_empty.tree, a, offset);
    REQUIRE(onto_empty.from_a.empty());
    REQUIRE(onto_empty.from_b == identity);
  }
  REQUIRE(sampled_slots > 100);  // the sampled -> deterministic change was exercised
}

TEST_CASE("Random pairs: trie_union holds every token sequence of both trees exactly once",
          "[unit][tree][property]") {
  std::mt19937 rng(0x0a12);
  UnionSourceCases cases;
  for (int k = 0; k < 500; ++k) {
    // Small alphabets make the trees overlap a lot; larger ones rarely.
    const auto alphabet = std::uniform_int_distribution<TokenId>(2, 8)(rng);
    const auto a =
        random_tree(rng, std::uniform_int_distribution<std::int32_t>(0, 80)(rng), true, alphabet);
    const auto b =
        random_tree(rng, std::uniform_int_distribution<std::int32_t>(0, 80)(rng), true, alphabet);
    REQUIRE_FALSE(has_duplicate_siblings(a));
    REQUIRE_FALSE(has_duplicate_siblings(b));
    const auto offset = std::uniform_int_distribution<std::int32_t>(0, 40)(rng);
    const auto u = trie_union(a, b, offset);
    INFO("pair " << k << ": |a| = " << a.size() << ", |b| = " << b.size());

    // a is a prefix of the union, node for node.
    REQUIRE(u.tree.root_token() == a.root_token());
    REQUIRE(u.from_a.size() == static_cast<std::size_t>(a.size()));
    REQUIRE(u.from_b.size() == static_cast<std::size_t>(b.size()));
    for (std::int32_t i = 0; i < a.size(); ++i) {
      REQUIRE(u.from_a[static_cast<std::size_t>(i)] == i);
      REQUIRE(u.tree.token(i) == a.token(i));
      REQUIRE(u.tree.parent(i) == a.parent(i));
      REQUIRE(u.tree.node(i).draft_prob == a.node(i).draft_prob);
    }

    // Sequences: each exactly once, and exactly those of a and b.
    const auto in_union = sequences(u.tree);
    const std::set<Sequence> distinct(in_union.begin(), in_union.end());
    REQUIRE(distinct.size() == in_union.size());
    std::set<Sequence> expected;
    for (const auto& s : sequences(a)) expected.insert(s);
    for (const auto& s : sequences(b)) expected.insert(s);
    REQUIRE(distinct == expected);

    // from_b lands on the node with the same sequence; b's new nodes come
    // after a's, in b's order; a node new from b keeps b's draft probability.
    std::int32_t next_new = a.size();
    for (std::int32_t i = 0; i < b.size(); ++i) {
      const auto ui = u.from_b[static_cast<std::size_t>(i)];
      REQUIRE(ui >= 0);
      REQUIRE(ui < u.tree.size());
      REQUIRE(sequence_of(u.tree, ui) == sequence_of(b, i));
      if (ui >= a.size()) {
        REQUIRE(ui == next_new++);
        REQUIRE(u.tree.node(ui).draft_prob == b.node(i).draft_prob);
      }
    }
    REQUIRE(next_new == u.tree.size());
    require_union_sources(a, b, u, offset, cases);
  }
  // Every case of the rule was met, coinciding child sets included. (b has no
  // duplicate siblings, so no two of its slots map to the same union slot.)
  CHECK(cases.a_alone > 0);
  CHECK(cases.one_b_slot > 0);
  CHECK(cases.a_and_b > 0);
  CHECK(cases.coinciding > 0);
  CHECK(cases.two_b_slots == 0);
}

TEST_CASE("Random pairs with duplicate siblings: trie_union merges b only into a's nodes",
          "[unit][tree][property]") {
  std::mt19937 rng(0x0a13);
  UnionSourceCases cases;
  int distinct_b_duplicates = 0;  // new nodes that share parent and token with an earlier new one
  for (int k = 0; k < 500; ++k) {
    const auto a =
        random_tree(rng, std::uniform_int_distribution<std::int32_t>(0, 60)(rng), false, 3);
    const auto b =
        random_tree(rng, std::uniform_int_distribution<std::int32_t>(0, 60)(rng), false, 3);
    const auto offset = std::uniform_int_distribution<std::int32_t>(0, 40)(rng);
    const auto u = trie_union(a, b, offset);
    INFO("pair " << k << ": |a| = " << a.size() << ", |b| = " << b.size());

    // a is a prefix of the union, node for node, duplicates included.
    REQUIRE(u.tree.root_token() == a.root_token());
    REQUIRE(u.from_a.size() == static_cast<std::size_t>(a.size()));
    REQUIRE(u.from_b.size() == static_cast<std::size_t>(b.size()));
    for (std::int32_t i = 0; i < a.size(); ++i) {
      REQUIRE(u.from_a[static_cast<std::size_t>(i)] == i);
      REQUIRE(u.tree.token(i) == a.token(i));
      REQUIRE(u.tree.parent(i) == a.parent(i));
      REQUIRE(u.tree.node(i).draft_prob == a.node(i).draft_prob);
    }

    // Node i of b, under union slot P (the image of its parent), goes to a's
    // first child of P with its token when P is a's and has one; otherwise it
    // is a new node (appended in b's order, b's token and probability), even
    // when an earlier node of b with the same token was appended under P.
    std::int32_t next_new = a.size();
    for (std::int32_t i = 0; i < b.size(); ++i) {
      const auto bp = b.parent(i);
      const auto parent = bp == kRoot ? kRoot : u.from_b[static_cast<std::size_t>(bp)];
      const auto match = parent < a.size() ? a.find_child(parent, b.token(i)) : -1;
      const auto ui = u.from_b[static_cast<std::size_t>(i)];
      if (match >= 0) {
        REQUIRE(ui == match);
      } else {
        REQUIRE(ui == next_new++);
        REQUIRE(u.tree.parent(ui) == parent);
        REQUIRE(u.tree.token(ui) == b.token(i));
        REQUIRE(u.tree.node(ui).draft_prob == b.node(i).draft_prob);
        if (u.tree.find_child(parent, b.token(i)) != ui) ++distinct_b_duplicates;
      }
      REQUIRE(sequence_of(u.tree, ui) == sequence_of(b, i));
    }
    REQUIRE(next_new == u.tree.size());

    // Nothing beyond a's and b's sequences, and a node new from b never
    // shares its token with a child of a under the same parent.
    std::set<Sequence> known;
    for (const auto& s : sequences(a)) known.insert(s);
    for (const auto& s : sequences(b)) known.insert(s);
    for (std::int32_t i = 0; i < u.tree.size(); ++i)
      REQUIRE(known.count(sequence_of(u.tree, i)) == 1);
    for (std::int32_t i = a.size(); i < u.tree.size(); ++i) {
      const auto parent = u.tree.parent(i);
      if (parent < a.size()) REQUIRE(a.find_child(parent, u.tree.token(i)) == -1);
    }
    require_union_sources(a, b, u, offset, cases);
  }
  CHECK(distinct_b_duplicates > 0);
  CHECK(cases.a_alone > 0);
  CHECK(cases.one_b_slot > 0);
  CHECK(cases.a_and_b > 0);
  CHECK(cases.coinciding > 0);
  CHECK(cases.two_b_slots > 0);
}

