// DuoDecoding's dynamic multi-sequence drafting (arXiv 2503.00784, §3.2):
// k from theta = q1(c_1) * max q2, snapped to a divisor of gamma; sequences
// of gamma / k tokens, deterministic first tokens, sampled continuations, one
// drafter forward per level; and growing below a carried tail.
#include <cstdint>
#include <vector>

#include "specdec/tree/multi_sequence_builder.hpp"
#include "support/catch.hpp"
#include "table_drafter.hpp"

namespace sd = specdec;
using sd::testing::TableDrafter;

namespace {

constexpr std::int64_t kVocab = 10;

// q1 (the root's row, depth 0) ranks 0 > 1 > 2 > ... with the given masses;
// every other row puts `top` on token 9 and spreads the rest.
TableDrafter drafter(std::vector<float> q1, float top) {
  return TableDrafter(kVocab, [q1, top](sd::TokenId, std::int32_t depth) {
    if (depth == 0) return q1;
    std::vector<float> row(kVocab, (1.0f - top) / float(kVocab - 1));
    row[9] = top;
    return row;
  });
}

sd::DraftBudget gamma_of(std::int32_t g) { return sd::DraftBudget{g, g, g, 0.0f}; }

}  // namespace

TEST_CASE("snap_to_divisor rounds k down to a divisor of gamma", "[tree][duo]") {
  CHECK(sd::snap_to_divisor(1, 6) == 1);
  CHECK(sd::snap_to_divisor(4, 6) == 3);
  CHECK(sd::snap_to_divisor(5, 6) == 3);
  CHECK(sd::snap_to_divisor(6, 6) == 6);
  CHECK(sd::snap_to_divisor(8, 6) == 6);
  CHECK(sd::snap_to_divisor(3, 5) == 1);  // a prime budget: one sequence or gamma of them
  CHECK(sd::snap_to_divisor(7, 16) == 4);
  CHECK(sd::snap_to_divisor(7, 24) == 6);
}

TEST_CASE("The number of sequences follows theta = q1(c1) * max q2", "[tree][duo]") {
  // q1: 0.4, 0.25, 0.2, 0.1, 0.05; q2's top is 0.5, so theta = 0.2: ranks 2
  // (0.25) beats it, rank 3 (0.2) does not -> k = 2.
  const std::vector<float> q1 = {0.4f, 0.25f, 0.2f, 0.1f, 0.05f, 0, 0, 0, 0, 0};
  auto d = drafter(q1, 0.5f);
  sd::MultiSequenceBuilder b(sd::MultiSequenceOptions{8, 0, sd::ChainPick::kSample});
  sd::DraftTree tree;
  sd::ProbMatrix rows;
  sd::RandomStream rng(1, 1);
  b.build(d, gamma_of(6), 7, rng, tree, rows);
  REQUIRE(b.last_sequences() == 2);
  REQUIRE(tree.num_children(sd::DraftTree::kRoot) == 2);
  CHECK(tree.children_mode(sd::DraftTree::kRoot) == sd::ChildMode::kDeterministic);
  const auto firsts = tree.children(sd::DraftTree::kRoot);
  CHECK(tree.token(firsts[0]) == 0);
  CHECK(tree.token(firsts[1]) == 1);
  CHECK(tree.size() == 6);  // two sequences of 3
  CHECK(tree.max_depth() == 3);
  for (const auto first : firsts) {
    auto v = first;
    std::int32_t length = 1;
    while (tree.num_children(v) > 0) {
      CHECK(tree.num_children(v) == 1);
      CHECK(tree.children_mode(v) == sd::ChildMode::kSampledWithReplacement);
      v = tree.first_child(v);
      ++length;
    }
    CHECK(length == 3);
  }
  // Forwards: the root, c_1 (for theta), c_2, then one level of both.
  REQUIRE(d.calls.size() == 4);
  CHECK(d.calls[1].frontier.size() == 1);
  CHECK(d.calls[2].frontier.size() == 1);
  CHECK(d.calls[3].frontier.size() == 2);

  SECTION("a flatter q2 lowers theta: more sequences, snapped to a divisor of gamma") {
    auto flat = drafter(q1, 0.2f);  // theta = 0.08: ranks 2, 3, 4 beat it (0.25, 0.2, 0.1) -> 4 -> 3 for gamma 6
    b.build(flat, gamma_of(6), 7, rng, tree, rows);
    CHECK(b.last_sequences() == 3);
    CHECK(tree.num_children(sd::DraftTree::kRoot) == 3);
    CHECK(tree.size() == 6);
    b.build(flat, gamma_of(8), 7, rng, tree, rows);
    CHECK(b.last_sequences() == 4);
    CHECK(tree.size() == 8);
  }
  SECTION("a static count skips theta") {
    sd::MultiSequenceBuilder two(sd::MultiSequenceOptions{8, 2, sd::ChainPick::kSample});
    auto e = drafter(q1, 0.99f);
    two.build(e, gamma_of(4), 7, rng, tree, rows);
    CHECK(two.last_sequences() == 2);
    CHECK(tree.size() == 4);
    REQUIRE(e.calls.size() == 2);  // the root, then both first tokens in one forward
  }
  SECTION("greedy continuations are the draft's top-1, marked deterministic") {
    sd::MultiSequenceBuilder greedy(sd::MultiSequenceOptions{8, 1, sd::ChainPick::kTop1});
    greedy.build(d, gamma_of(3), 7, rng, tree, rows);
    REQUIRE(tree.size() == 3);
    CHECK(tree.token(1) == 9);
    CHECK(tree.token(2) == 9);
    CHECK(tree.children_mode(0) == sd::ChildMode::kDeterministic);
  }
}

TEST_CASE("grow() drafts below a carried tail, staging it in the round's first forward", "[tree][duo]") {
  auto d = drafter({0.7f, 0.3f, 0, 0, 0, 0, 0, 0, 0, 0}, 0.9f);
  sd::DraftTree tree(7);
  sd::ProbMatrix rows(0, kVocab);
  // a two-token tail with its own rows
  for (std::int32_t i = 0; i < 2; ++i) {
    auto r = rows.append_row();
    r[3] = 1.0f;
    tree.set_children_source(i - 1, i, sd::ChildMode::kSampledWithReplacement);
    tree.add_node(i - 1, 3, 1.0f);
  }
  sd::MultiSequenceBuilder b;
  sd::RandomStream rng(2, 1);
  b.grow(d, gamma_of(2), rng, tree, rows);
  REQUIRE(d.calls.size() >= 1);
  CHECK(d.calls[0].frontier == std::vector<std::int32_t>{sd::DraftTree::kRoot, 0, 1});
  CHECK(tree.children_draft_row(0) == 1);  // the tail's own rows are untouched
  CHECK(tree.num_children(1) >= 1);        // the sequences hang below the tail's tip
  CHECK(tree.children_mode(1) == sd::ChildMode::kDeterministic);
  CHECK(tree.children_draft_row(1) == 2 + 2);  // the tip's row: after the two carried ones and the root's and node 0's
  CHECK(tree.size() == 4);
  SECTION("a tail that is not a chain is refused") {
    sd::DraftTree fork(7);
    fork.add_node(-1, 1, 0.5f);
    fork.add_node(-1, 2, 0.5f);
    sd::ProbMatrix none(0, kVocab);
    CHECK_THROWS_AS(b.grow(d, gamma_of(2), rng, fork, none), sd::InvalidTreeError);
  }
}
