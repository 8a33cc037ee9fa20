#include <vector>

#include "specdec/accept/greedy.hpp"
#include "support/catch.hpp"
#include "support/rows.hpp"

namespace sd = specdec;
using sd::testing::chain;
using sd::testing::matrix;

TEST_CASE("Greedy acceptance accepts the longest prefix matching the argmax", "[unit][accept][greedy]") {
  // Target argmax per row: 1, 2, 3, 0.
  const auto target = matrix({{0.1f, 0.6f, 0.2f, 0.1f},
                              {0.1f, 0.1f, 0.7f, 0.1f},
                              {0.2f, 0.1f, 0.1f, 0.6f},
                              {0.4f, 0.3f, 0.2f, 0.1f}});
  sd::GreedyAcceptance rule;
  sd::RandomStream rng(1);
  SECTION("all drafts match: bonus is the argmax after the last") {
    const auto tree = chain(0, {1, 2, 3});
    const auto r = rule.verify(tree, target.view(), {}, rng);
    CHECK(r.accepted_nodes == std::vector<std::int32_t>{0, 1, 2});
    CHECK(r.bonus_token == 0);
    CHECK(r.depth_accepted == std::vector<std::uint8_t>{1, 1, 1});
    CHECK(r.emitted_tokens(tree) == std::vector<sd::TokenId>{1, 2, 3, 0});
  }
  SECTION("mismatch at depth 2: the correction is the argmax there") {
    const auto tree = chain(0, {1, 0, 3});
    const auto r = rule.verify(tree, target.view(), {}, rng);
    CHECK(r.accepted_nodes == std::vector<std::int32_t>{0});
    CHECK(r.bonus_token == 2);
    CHECK(r.depth_accepted == std::vector<std::uint8_t>{1, 0});
  }
  SECTION("mismatch at depth 1") {
    const auto tree = chain(0, {3, 2, 3});
    const auto r = rule.verify(tree, target.view(), {}, rng);
    CHECK(r.accepted_nodes.empty());
    CHECK(r.bonus_token == 1);
    CHECK(r.depth_accepted == std::vector<std::uint8_t>{0});
  }
}

TEST_CASE("Greedy acceptance on a tree follows the deepest matching path", "[unit][accept][greedy]") {
  // root -> {a:0, b:1}; b -> {c:2, d:3}; d -> {e:1}; a -> {f:2}
  sd::DraftTree tree(5);
  const auto a = tree.add_node(sd::DraftTree::kRoot, 0, 0.5f);
  const auto b = tree.add_node(sd::DraftTree::kRoot, 1, 0.5f);
  const auto c = tree.add_node(b, 2, 0.5f);
  const auto d = tree.add_node(b, 3, 0.5f);
  const auto e = tree.add_node(d, 1, 0.5f);
  const auto f = tree.add_node(a, 2, 0.5f);
  (void)c;
  (void)f;
  // Rows: root argmax 1 (b); a argmax 2; b argmax 3 (d); c argmax 0; d argmax 1 (e); e argmax 4; f argmax 0.
  std::vector<std::vector<float>> rows(7, std::vector<float>(6, 0.0f));
  const int argmaxes[] = {1, 2, 3, 0, 1, 4, 0};
  for (int i = 0; i < 7; ++i) rows[i][argmaxes[i]] = 1.0f;
  sd::ProbMatrix target(0, 6);
  for (auto& r : rows) std::copy(r.begin(), r.end(), target.append_row().begin());
  sd::GreedyAcceptance rule;
  sd::RandomStream rng(1);
  const auto r = rule.verify(tree, target.view(), {}, rng);
  CHECK(r.accepted_nodes == std::vector<std::int32_t>{b, d, e});
  CHECK(r.bonus_token == 4);
  CHECK(r.depth_accepted == std::vector<std::uint8_t>{1, 1, 1});
}

TEST_CASE("Greedy acceptance with an empty tree emits the target argmax", "[unit][accept][greedy]") {
  const sd::DraftTree tree(3);
  const auto target = matrix({{0.1f, 0.2f, 0.7f}});
  sd::RandomStream rng(1);
  const auto r = sd::GreedyAcceptance{}.verify(tree, target.view(), {}, rng);
  CHECK(r.accepted_nodes.empty());
  CHECK(r.bonus_token == 2);
  CHECK(r.depth_accepted.empty());
}

TEST_CASE("Greedy acceptance accepts logit rows (only the argmax matters)", "[unit][accept][greedy]") {
  const auto tree = chain(0, {2});
  const auto logits = matrix({{-1.0f, 3.0f, 7.5f}, {10.0f, -2.0f, 0.0f}});
  sd::RandomStream rng(1);
  const auto r = sd::GreedyAcceptance{}.verify(tree, logits.view(), {}, rng);
  CHECK(r.num_accepted() == 1);
  CHECK(r.bonus_token == 0);
}
