#include <vector>

#include "specdec/accept/recursive_rejection_sampling.hpp"
#include "support/catch.hpp"
#include "support/rows.hpp"

namespace sd = specdec;
using sd::testing::matrix;

namespace {
// root(4) -> {0, 1, 2}, node 1 -> {3}; deterministic children.
sd::DraftTree small_tree(sd::ChildMode mode) {
  sd::DraftTree t(4);
  t.set_children_source(sd::DraftTree::kRoot, 0, mode);
  t.add_node(sd::DraftTree::kRoot, 0, 0.4f);
  const auto b = t.add_node(sd::DraftTree::kRoot, 1, 0.3f);
  t.add_node(sd::DraftTree::kRoot, 2, 0.2f);
  t.set_children_source(b, 1, mode);
  t.add_node(b, 3, 0.5f);
  return t;
}
}  // namespace

TEST_CASE("Recursive rejection sampling with a one-hot target walks the argmax path", "[unit][accept][tree]") {
  const auto tree = small_tree(sd::ChildMode::kDeterministic);
  // rows: root, node0, node1, node2, node3 — root argmax 1, node1 argmax 3, node3 argmax 0.
  const auto target = matrix({{0, 1, 0, 0, 0}, {1, 0, 0, 0, 0}, {0, 0, 0, 1, 0}, {1, 0, 0, 0, 0}, {1, 0, 0, 0, 0}});
  sd::RecursiveRejectionSampling rule;
  sd::RandomStream rng(8);
  for (int i = 0; i < 100; ++i) {
    const auto r = rule.verify(tree, target.view(), {}, rng);
    REQUIRE(r.accepted_nodes == std::vector<std::int32_t>{1, 3});
    REQUIRE(r.bonus_token == 0);
    REQUIRE(r.depth_accepted == std::vector<std::uint8_t>{1, 1});
  }
}

TEST_CASE("Recursive rejection sampling never emits a rejected deterministic child as the correction",
          "[unit][accept][tree]") {
  const auto tree = small_tree(sd::ChildMode::kDeterministic);
  // Root row puts mass on the children 0, 1, 2 and on token 4.
  const auto target = matrix({{0.2f, 0.2f, 0.2f, 0.0f, 0.4f}, {1, 0, 0, 0, 0}, {0, 0, 0, 0, 1},
                              {1, 0, 0, 0, 0}, {1, 0, 0, 0, 0}});
  sd::RecursiveRejectionSampling rule;
  sd::RandomStream rng(2);
  int rejected_all = 0;
  for (int i = 0; i < 5000; ++i) {
    const auto r = rule.verify(tree, target.view(), {}, rng);
    if (r.accepted_nodes.empty()) {
      ++rejected_all;
      REQUIRE(r.bonus_token == 4);  // the only token left once 0, 1, 2 are rejected
    }
  }
  // P(no child accepted) = 0.4: sd over 5000 trials is 0.007.
  CHECK(std::abs(rejected_all / 5000.0 - 0.4) < 0.035);
}

TEST_CASE("Recursive rejection sampling draws one uniform per tested child plus one", "[unit][accept][tree]") {
  const auto tree = small_tree(sd::ChildMode::kDeterministic);
  const auto target = matrix({{0, 0, 0, 0, 1}, {1, 0, 0, 0, 0}, {1, 0, 0, 0, 0}, {1, 0, 0, 0, 0}, {1, 0, 0, 0, 0}});
  sd::RecursiveRejectionSampling rule;
  sd::RandomStream rng(2);
  const auto r = rule.verify(tree, target.view(), {}, rng);
  CHECK(r.accepted_nodes.empty());
  CHECK(r.bonus_token == 4);
  CHECK(rng.offset() == 4);  // three children tested, one final draw
}

TEST_CASE("Recursive rejection sampling accepts identical sampled distributions outright", "[unit][accept][tree]") {
  const auto tree = small_tree(sd::ChildMode::kSampledWithReplacement);
  const std::initializer_list<float> root{0.3f, 0.3f, 0.2f, 0.1f, 0.1f};
  const auto rows = matrix({root, {0.2f, 0.2f, 0.2f, 0.2f, 0.2f}, {0.1f, 0.1f, 0.1f, 0.6f, 0.1f},
                            {0.2f, 0.2f, 0.2f, 0.2f, 0.2f}, {0.2f, 0.2f, 0.2f, 0.2f, 0.2f}});
  // Draft row 0 = target root row, draft row 1 = target row of node 1.
  const auto draft = matrix({root, {0.1f, 0.1f, 0.1f, 0.6f, 0.1f}});
  sd::RecursiveRejectionSampling rule;
  sd::RandomStream rng(4);
  for (int i = 0; i < 500; ++i) {
    const auto r = rule.verify(tree, rows.view(), draft.view(), rng);
    REQUIRE_FALSE(r.accepted_nodes.empty());
    REQUIRE(r.accepted_nodes[0] == 0);  // the first child passes min(1, p/q) = 1
  }
}
