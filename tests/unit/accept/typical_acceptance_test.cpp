#include <cmath>
#include <vector>

#include "specdec/accept/typical_acceptance.hpp"
#include "specdec/core/acceptance_stats.hpp"
#include "support/catch.hpp"
#include "support/rows.hpp"

namespace sd = specdec;
using sd::testing::matrix;

TEST_CASE("Typical acceptance threshold is min(epsilon, delta * exp(-entropy))", "[unit][accept][typical]") {
  const sd::TypicalAcceptance rule;  // epsilon 0.09, delta 0.3
  const std::vector<float> uniform4(4, 0.25f);
  CHECK(rule.threshold(uniform4) == Approx(0.3 / 4));  // exp(-log 4) = 1/4
  const std::vector<float> one_hot{0.0f, 1.0f, 0.0f};
  CHECK(rule.threshold(one_hot) == Approx(0.09));  // entropy 0: epsilon binds
}

TEST_CASE("Typical acceptance picks the longest typical path, ties by log-probability",
          "[unit][accept][typical]") {
  // root(5) -> {a:0, b:1}; a -> {c:2}; b -> {d:3}
  sd::DraftTree tree(5);
  const auto a = tree.add_node(sd::DraftTree::kRoot, 0, 0.5f);
  const auto b = tree.add_node(sd::DraftTree::kRoot, 1, 0.5f);
  const auto c = tree.add_node(a, 2, 0.5f);
  const auto d = tree.add_node(b, 3, 0.5f);
  (void)c;
  // Root: P(0) = 0.3, P(1) = 0.6 (both typical); a: P(2) = 0.9; b: P(3) = 0.9.
  const auto target = matrix({{0.3f, 0.6f, 0.05f, 0.05f, 0.0f, 0.0f},
                              {0.02f, 0.02f, 0.9f, 0.02f, 0.02f, 0.02f},
                              {0.02f, 0.02f, 0.02f, 0.9f, 0.02f, 0.02f},
                              {0.0f, 0.0f, 0.0f, 0.0f, 1.0f, 0.0f},
                              {0.0f, 0.0f, 0.0f, 0.0f, 0.0f, 1.0f}});
  sd::TypicalAcceptance rule;
  sd::RandomStream rng(1);
  const auto r = rule.verify(tree, target.view(), {}, rng);
  CHECK(r.accepted_nodes == std::vector<std::int32_t>{b, d});  // same length, larger sum of log P
  CHECK(r.bonus_token == 5);
  CHECK(r.depth_accepted == std::vector<std::uint8_t>{1, 1});
}

TEST_CASE("Typical acceptance accepts tokens speculative sampling could reject, and says it is lossy",
          "[unit][accept][typical]") {
  // P(x) = 0.2 is above the threshold of a flat-ish row, so x is always accepted.
  sd::DraftTree tree(0);
  tree.add_node(sd::DraftTree::kRoot, 1, 0.9f);
  const auto target = matrix({{0.4f, 0.2f, 0.4f}, {1.0f, 0.0f, 0.0f}});
  sd::TypicalAcceptance rule;
  sd::RandomStream rng(1);
  sd::AcceptanceStats stats;
  for (int i = 0; i < 100; ++i) {
    const auto r = rule.verify(tree, target.view(), {}, rng);
    REQUIRE(r.num_accepted() == 1);
    stats.record(r, sd::TypicalAcceptance::kLossless);
  }
  CHECK_FALSE(stats.lossless);
  CHECK(stats.mean_emitted() == 2.0);
  CHECK(stats.acceptance_rate() == 1.0);
}

TEST_CASE("Typical acceptance rejects invalid parameters", "[unit][accept][typical]") {
  REQUIRE_THROWS_AS(sd::TypicalAcceptance({0.0f, 0.3f}), sd::InvalidArgumentError);
  REQUIRE_THROWS_AS(sd::TypicalAcceptance({0.09f, -1.0f}), sd::InvalidArgumentError);
  REQUIRE_THROWS_WITH(sd::TypicalAcceptance({1.5f, 0.3f}), Catch::Contains("posterior_threshold"));
}
