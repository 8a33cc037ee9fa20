// Unit tests of block verification (arXiv 2403.10444) and traversal
// verification (arXiv 2505.12398): the paper's two-token example, the cases
// the formulas settle exactly, the flat tree the CUDA kernel walks, and bad
// input. Their losslessness is in tests/statistical/lossless_sequence_test.cpp.
#include <cmath>
#include <random>
#include <vector>

#include "specdec/accept/block_verification.hpp"
#include "specdec/accept/same_drafts_comparison.hpp"
#include "specdec/accept/sequence_row_math.hpp"
#include "specdec/accept/speculative_sampling.hpp"
#include "specdec/accept/traversal_verification.hpp"
#include "support/catch.hpp"
#include "support/random_tree.hpp"
#include "support/rows.hpp"

namespace sd = specdec;
using Catch::Contains;
using sd::testing::chain;
using sd::testing::matrix;

namespace {

// Mean accepted drafts of `rule` over n rounds on a context-free pair.
template <class Rule>
double mean_accepted(Rule rule, const sd::DraftTree& tree, const sd::ProbMatrix& target,
                     const sd::ProbMatrix& draft, int n, std::uint64_t seed) {
  sd::RandomStream rng(seed);
  double sum = 0.0;
  for (int i = 0; i < n; ++i) sum += rule.verify(tree, target.view(), draft.view(), rng).num_accepted();
  return sum / n;
}

}  // namespace

TEST_CASE(
    "Block verification accepts 11/9 tokens where token verification accepts 10/9 (the paper's example)",
    "[unit][accept][chain]") {
  // arXiv 2403.10444, §1 (the motivating example): context-free
  // M_s = (2/3, 1/3), M_b = (1/3, 2/3), gamma = 2. The four draft blocks,
  // weighted by their draft probability, give E[tau] = 11/9 for block and
  // 10/9 for token verification.
  const std::vector<float> s = {2.0f / 3, 1.0f / 3}, b = {1.0f / 3, 2.0f / 3};
  const auto draft = matrix({{s[0], s[1]}, {s[0], s[1]}});
  const auto target = matrix({{b[0], b[1]}, {b[0], b[1]}, {b[0], b[1]}});
  constexpr int kRounds = 100000;
  double block = 0.0, token = 0.0;
  for (sd::TokenId x1 = 0; x1 < 2; ++x1)
    for (sd::TokenId x2 = 0; x2 < 2; ++x2) {
      const double weight =
          static_cast<double>(s[static_cast<std::size_t>(x1)]) * s[static_cast<std::size_t>(x2)];
      const auto tree = chain(0, {x1, x2});
      block += weight * mean_accepted(sd::BlockVerification{}, tree, target, draft, kRounds, 3);
      token += weight * mean_accepted(sd::SpeculativeSampling{}, tree, target, draft, kRounds, 3);
    }
  // Per-block standard deviation of tau is below 1, so the weighted mean's is below 1/sqrt(kRounds).
  const double tolerance = 5.0 / std::sqrt(static_cast<double>(kRounds));
  CHECK(block == Catch::Detail::Approx(11.0 / 9).margin(tolerance));
  CHECK(token == Catch::Detail::Approx(10.0 / 9).margin(tolerance));
}

TEST_CASE("Block verification's exact cases", "[unit][accept][chain]") {
  SECTION("a block whose weights stay 1 is accepted whole") {
    // p_i = 1 whenever M_b(x_i) >= p_{i-1} M_s(x_i).
    const auto target = matrix({{0.1f, 0.9f}, {0.2f, 0.8f}, {0.5f, 0.5f}});
    const auto draft = matrix({{0.5f, 0.5f}, {0.5f, 0.5f}});
    sd::BlockVerification rule;
    sd::RandomStream rng(1);
    for (int i = 0; i < 1000; ++i)
      REQUIRE(rule.verify(chain(0, {1, 1}), target.view(), draft.view(), rng).num_accepted() == 2);
  }
  SECTION("a token the target rules out ends the block before it, and its correction avoids it") {
    const auto target = matrix({{0.5f, 0.5f, 0.0f}, {0.2f, 0.3f, 0.5f}});
    const auto draft = matrix({{0.1f, 0.1f, 0.8f}});
    sd::BlockVerification rule;
    sd::RandomStream rng(2);
    for (int i = 0; i < 1000; ++i) {
      const auto r = rule.verify(chain(0, {2}), target.view(), draft.view(), rng);
      REQUIRE(r.num_accepted() == 0);
      REQUIRE(r.depth_accepted == std::vector<std::uint8_t>{0});
      REQUIRE(r.bonus_token != 2);
    }
  }
  SECTION("a later draft can rescue an earlier one that token verification would reject") {
    // x_1 = 0: p_1 = 0.5 (token level: accepted half the time). x_2 = 1 has
    // M_b / M_s = 2, so p_2 = 1: block verification accepts both every time.
    const auto target = matrix({{0.3f, 0.7f}, {0.2f, 0.8f}, {0.5f, 0.5f}});
    const auto draft = matrix({{0.6f, 0.4f}, {0.6f, 0.4f}});
    sd::RandomStream rng(3);
    sd::BlockVerification rule;
    for (int i = 0; i < 1000; ++i)
      REQUIRE(rule.verify(chain(0, {0, 1}), target.view(), draft.view(), rng).num_accepted() == 2);
    CHECK(mean_accepted(sd::SpeculativeSampling{}, chain(0, {0, 1}), target, draft, 4000, 4) < 1.2);
  }
}

TEST_CASE("Traversal verification falls back to a sibling's subtree after a rejection",
          "[unit][accept][tree]") {
  // Root children 0 (ruled out by the target) and 1 (one-hot drafts): the
  // first fails whatever lies below it; the second holds with its weight.
  sd::DraftTree tree(0);
  tree.set_children_source(sd::DraftTree::kRoot, -1, sd::ChildMode::kDeterministic);
  const auto a = tree.add_node(sd::DraftTree::kRoot, 0, 1.0f);
  const auto b = tree.add_node(sd::DraftTree::kRoot, 1, 1.0f);
  tree.set_children_source(a, -1, sd::ChildMode::kDeterministic);
  tree.add_node(a, 1, 1.0f);
  const auto target =
      matrix({{0.0f, 1.0f, 0.0f}, {0.3f, 0.3f, 0.4f}, {0.0f, 0.0f, 1.0f}, {0.1f, 0.1f, 0.8f}});
  sd::TraversalVerification rule;
  sd::RandomStream rng(6);
  for (int i = 0; i < 200; ++i) {
    const auto r = rule.verify(tree, target.view(), {}, rng);
    REQUIRE(r.accepted_nodes == std::vector<std::int32_t>{b});
    REQUIRE(r.bonus_token == 2);
    REQUIRE(r.depth_accepted == std::vector<std::uint8_t>{1});  // b is a leaf
  }
}

TEST_CASE("The flat tree the CUDA kernel walks gives what the host rule gives", "[unit][accept][tree]") {
  constexpr std::int64_t kVocab = 5;
  std::mt19937 gen(17);
  sd::TraversalVerification rule;
  std::int64_t accepted = 0;
  for (int i = 0; i < 2000; ++i) {
    const auto t = sd::testing::random_tree(gen, kVocab, 12);
    const auto n = t.tree.size();
    const sd::ProbRows target(t.target_rows.data(), n + 1, kVocab);
    sd::RandomStream rng(11, static_cast<std::uint64_t>(i));
    const auto expected = rule.verify(t.tree, target, t.draft_matrix.view(), rng);

    const auto flat = t.flat(kVocab);
    const auto levels = static_cast<std::size_t>(t.tree.max_depth()) + 1;
    std::vector<sd::row_math::TraversalLevel> level(levels);
    std::vector<double> scratch(2 * levels * kVocab);
    std::vector<std::int32_t> path(levels);
    sd::TokenId emitted = sd::kNoToken;
    const auto k = sd::row_math::traversal_verification_row(
        flat, sd::row_math::StridedRows{t.target_rows.data(), kVocab}, kVocab,
        sd::PhiloxUniforms{11, static_cast<std::uint64_t>(i), 0}, level.data(), scratch.data(), path.data(),
        &emitted);
    REQUIRE(std::vector<std::int32_t>(path.begin(), path.begin() + k) == expected.accepted_nodes);
    REQUIRE(emitted == expected.bonus_token);
    accepted += k;
  }
  CHECK(accepted > 500);
}

TEST_CASE("Block and traversal verification reject bad input with a typed error", "[unit][accept][errors]") {
  sd::RandomStream rng(1);
  SECTION("block verification verifies chains only") {
    sd::DraftTree tree(0);
    tree.set_children_source(sd::DraftTree::kRoot, 0, sd::ChildMode::kSampledWithReplacement);
    tree.add_node(sd::DraftTree::kRoot, 1, 0.5f);
    tree.add_node(sd::DraftTree::kRoot, 2, 0.5f);
    const auto target = matrix({{0.2f, 0.4f, 0.4f}, {0.2f, 0.4f, 0.4f}, {0.2f, 0.4f, 0.4f}});
    const auto draft = matrix({{0.2f, 0.4f, 0.4f}});
    REQUIRE_THROWS_AS(sd::BlockVerification{}.verify(tree, target.view(), draft.view(), rng),
                      sd::InvalidTreeError);
    REQUIRE_THROWS_WITH(sd::BlockVerification{}.verify(tree, target.view(), draft.view(), rng),
                        Contains("not a chain") && Contains("traversal"));
  }
  SECTION("children with no recorded source are refused") {
    sd::DraftTree tree(0);
    tree.add_node(sd::DraftTree::kRoot, 1, 0.5f);
    const auto target = matrix({{0.5f, 0.5f}, {0.5f, 0.5f}});
    REQUIRE_THROWS_WITH(sd::TraversalVerification{}.verify(tree, target.view(), {}, rng),
                        Contains("no recorded source"));
    REQUIRE_THROWS_AS(sd::BlockVerification{}.verify(tree, target.view(), {}, rng), sd::InvalidTreeError);
  }
  SECTION("a sampled token with draft probability 0 cannot have been drawn") {
    const auto target = matrix({{0.5f, 0.5f}, {0.5f, 0.5f}});
    const auto draft = matrix({{1.0f, 0.0f}});
    REQUIRE_THROWS_WITH(sd::TraversalVerification{}.verify(chain(0, {1}), target.view(), draft.view(), rng),
                        Contains("cannot have been sampled"));
    REQUIRE_THROWS_WITH(sd::BlockVerification{}.verify(chain(0, {1}), target.view(), draft.view(), rng),
                        Contains("cannot have been sampled"));
  }
  SECTION("rows that are not distributions are named") {
    const auto target = matrix({{0.5f, 0.5f}, {0.5f, std::nanf("")}});
    const auto draft = matrix({{0.5f, 0.5f}});
    REQUIRE_THROWS_WITH(sd::TraversalVerification{}.verify(chain(0, {1}), target.view(), draft.view(), rng),
                        Contains("target row 1") && Contains("not finite"));
    REQUIRE_THROWS_WITH(sd::BlockVerification{}.verify(chain(0, {1}), target.view(), draft.view(), rng),
                        Contains("target row 1"));
    const auto bad_draft = matrix({{0.5f, 0.6f}});
    REQUIRE_THROWS_WITH(
        sd::BlockVerification{}.verify(chain(0, {1}), matrix({{0.5f, 0.5f}, {0.5f, 0.5f}}).view(),
                                       bad_draft.view(), rng),
        Contains("draft row 0") && Contains("sum"));
  }
}

TEST_CASE("The same-drafts comparison finds the paper's 11/9 against 10/9 on identical rounds",
          "[unit][accept]") {
  const std::vector<float> s = {2.0f / 3, 1.0f / 3}, b = {1.0f / 3, 2.0f / 3};
  const auto draft = matrix({{s[0], s[1]}, {s[0], s[1]}});
  const auto target = matrix({{b[0], b[1]}, {b[0], b[1]}, {b[0], b[1]}});
  sd::SameDraftsComparison cmp(5);
  std::mt19937 gen(1);
  std::discrete_distribution<sd::TokenId> q(s.begin(), s.end());
  constexpr int kRounds = 100000;
  for (int i = 0; i < kRounds; ++i) {
    const auto tree = chain(0, {q(gen), q(gen)});
    cmp.observe(sd::RoundView{0, &tree, target.view(), draft.view(), nullptr});
  }
  const double tolerance = 5.0 / std::sqrt(static_cast<double>(kRounds));
  CHECK(cmp.token_level().rounds == kRounds);
  CHECK(cmp.block().rounds == kRounds);
  CHECK(cmp.block().tau() == Catch::Detail::Approx(1.0 + 11.0 / 9).margin(tolerance));
  CHECK(cmp.token_level().tau() == Catch::Detail::Approx(1.0 + 10.0 / 9).margin(tolerance));
  CHECK(cmp.traversal().accepted == cmp.block().accepted);  // same uniforms: the same tokens on chains
  CHECK(cmp.token_level_on_chains().accepted == cmp.token_level().accepted);
  // The paired difference: 1/9 accepted per round more, well beyond its error.
  CHECK(cmp.block_gain().mean() ==
        Catch::Detail::Approx(1.0 / 9).margin(5 * cmp.block_gain().standard_error()));
  CHECK(cmp.block_gain().mean() > 5 * cmp.block_gain().standard_error());
  CHECK(cmp.traversal_gain().mean() == Catch::Detail::Approx(cmp.block_gain().mean()));
}

TEST_CASE("The same-drafts comparison knows the exact mean of one-hot rounds", "[unit][accept]") {
  // Root children 1 and 2 (one-hot), node 0 has child 0: expected accepted
  // = P(1) + P(2) + P(1) P(0 | 1) = 0.5 + 0.2 + 0.5 * 0.4.
  sd::DraftTree tree(0);
  tree.set_children_source(sd::DraftTree::kRoot, -1, sd::ChildMode::kDeterministic);
  const auto a = tree.add_node(sd::DraftTree::kRoot, 1, 1.0f);
  tree.add_node(sd::DraftTree::kRoot, 2, 1.0f);
  tree.set_children_source(a, -1, sd::ChildMode::kDeterministic);
  tree.add_node(a, 0, 1.0f);
  const auto target =
      matrix({{0.3f, 0.5f, 0.2f}, {0.4f, 0.3f, 0.3f}, {0.1f, 0.1f, 0.8f}, {0.2f, 0.2f, 0.6f}});
  sd::SameDraftsComparison cmp(3);
  for (int i = 0; i < 20000; ++i) cmp.observe(sd::RoundView{0, &tree, target.view(), {}, nullptr});
  CHECK(cmp.one_hot_exact().rounds == 20000);
  CHECK(cmp.one_hot_exact().tau() == Catch::Detail::Approx(1.9));
  // Both rules' empirical means agree with it (sd of accepted per round < 1).
  const double tolerance = 5.0 / std::sqrt(20000.0);
  CHECK(cmp.token_level().tau() == Catch::Detail::Approx(1.9).margin(tolerance));
  CHECK(cmp.traversal().tau() == Catch::Detail::Approx(1.9).margin(tolerance));
}
