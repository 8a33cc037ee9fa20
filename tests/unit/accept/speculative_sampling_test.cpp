#include <cmath>
#include <vector>

#include "specdec/accept/row_math.hpp"
#include "specdec/accept/speculative_sampling.hpp"
#include "support/catch.hpp"
#include "support/rows.hpp"

namespace sd = specdec;
using sd::testing::chain;
using sd::testing::matrix;

TEST_CASE("Speculative sampling accepts every draft when draft and target agree", "[unit][accept][chain]") {
  const auto rows = matrix({{0.2f, 0.3f, 0.5f}, {0.6f, 0.2f, 0.2f}, {0.1f, 0.1f, 0.8f}, {0.3f, 0.3f, 0.4f}});
  const auto tree = chain(0, {2, 0, 2});
  sd::SpeculativeSampling rule;
  sd::RandomStream rng(5);
  for (int i = 0; i < 1000; ++i) {
    const auto r = rule.verify(tree, rows.view(), rows.view(), rng);
    REQUIRE(r.num_accepted() == 3);
    REQUIRE(r.depth_accepted == std::vector<std::uint8_t>{1, 1, 1});
  }
}

TEST_CASE("Speculative sampling never accepts a token the target rules out", "[unit][accept][chain]") {
  const auto target = matrix({{0.5f, 0.5f, 0.0f}, {0.3f, 0.3f, 0.4f}});
  const auto draft = matrix({{0.1f, 0.1f, 0.8f}});
  const auto tree = chain(0, {2});
  sd::SpeculativeSampling rule;
  sd::RandomStream rng(9);
  for (int i = 0; i < 1000; ++i) {
    const auto r = rule.verify(tree, target.view(), draft.view(), rng);
    REQUIRE(r.num_accepted() == 0);
    REQUIRE(r.depth_accepted == std::vector<std::uint8_t>{0});
    REQUIRE(r.bonus_token != 2);  // the residual max(0, p - q) has no mass on token 2
  }
}

TEST_CASE("Speculative sampling accepts with probability min(1, p/q)", "[unit][accept][chain]") {
  // p(x) = 0.3, q(x) = 0.6: acceptance 0.5. Binomial sd over 100k trials: 0.0016.
  const auto target = matrix({{0.3f, 0.7f}, {0.5f, 0.5f}});
  const auto draft = matrix({{0.6f, 0.4f}});
  const auto tree = chain(0, {0});
  sd::SpeculativeSampling rule;
  sd::RandomStream rng(11);
  int accepted = 0;
  const int n = 100000;
  for (int i = 0; i < n; ++i) accepted += rule.verify(tree, target.view(), draft.view(), rng).num_accepted();
  CHECK(std::fabs(accepted / double(n) - 0.5) < 0.008);
}

TEST_CASE("Speculative sampling draws exactly gamma + 1 uniforms per call, like the CUDA kernel",
          "[unit][accept][chain]") {
  const auto target = matrix({{0.25f, 0.25f, 0.5f}, {0.6f, 0.2f, 0.2f}, {0.1f, 0.4f, 0.5f}, {0.3f, 0.3f, 0.4f}});
  const auto draft = matrix({{0.5f, 0.25f, 0.25f}, {0.2f, 0.6f, 0.2f}, {0.5f, 0.4f, 0.1f}});
  const auto tree = chain(1, {0, 1, 0});
  sd::SpeculativeSampling rule;
  sd::RandomStream rng(77, 3);
  for (int i = 0; i < 200; ++i) {
    const auto start = rng.offset();
    const auto r = rule.verify(tree, target.view(), draft.view(), rng);
    REQUIRE(rng.offset() == start + 4);
    // The shared row function with the same Philox window gives the same result.
    const sd::TokenId tokens[] = {0, 1, 0};
    sd::TokenId out[4];
    const auto n = sd::row_math::chain_speculative_sampling_row(
        sd::row_math::StridedRows{draft.view().data(), 3}, tokens, sd::row_math::StridedRows{target.view().data(), 3},
        3, 3, sd::PhiloxUniforms{77, 3, start}, out);
    REQUIRE(n == r.num_accepted());
    REQUIRE(out[n] == r.bonus_token);
    for (int j = n + 1; j < 4; ++j) REQUIRE(out[j] == sd::kNoToken);
  }
}

TEST_CASE("Speculative sampling with deterministic drafts treats q as one-hot", "[unit][accept][chain]") {
  // q = one-hot at the drafted token: accept with probability p(x); the
  // residual is p without x. With a one-hot target this is greedy matching.
  const auto target = matrix({{0.0f, 1.0f, 0.0f}, {0.0f, 0.0f, 1.0f}, {1.0f, 0.0f, 0.0f}});
  sd::SpeculativeSampling rule;
  sd::RandomStream rng(3);
  const auto match = chain(0, {1, 2}, sd::ChildMode::kDeterministic);
  const auto r = rule.verify(match, target.view(), {}, rng);
  CHECK(r.num_accepted() == 2);
  CHECK(r.bonus_token == 0);
  const auto miss = chain(0, {1, 0}, sd::ChildMode::kDeterministic);
  const auto m = rule.verify(miss, target.view(), {}, rng);
  CHECK(m.num_accepted() == 1);
  CHECK(m.bonus_token == 2);
}

TEST_CASE("Speculative sampling with no drafts samples the target row", "[unit][accept][chain]") {
  const auto target = matrix({{0.0f, 0.0f, 1.0f}});
  sd::RandomStream rng(3);
  const auto r = sd::SpeculativeSampling{}.verify(sd::DraftTree(1), target.view(), {}, rng);
  CHECK(r.accepted_nodes.empty());
  CHECK(r.bonus_token == 2);
}
