// Bad input to the acceptance rules raises a typed error naming the problem;
// nothing is silently clamped or sampled from garbage.
#include <limits>
#include <vector>

#include "specdec/accept/greedy.hpp"
#include "specdec/accept/recursive_rejection_sampling.hpp"
#include "specdec/accept/speculative_sampling.hpp"
#include "specdec/accept/traversal_verification.hpp"
#include "specdec/accept/typical_acceptance.hpp"
#include "specdec/core/acceptance_stats.hpp"
#include "support/catch.hpp"
#include "support/rows.hpp"

namespace sd = specdec;
using Catch::Contains;
using sd::testing::chain;
using sd::testing::matrix;

namespace {
const float kNaN = std::numeric_limits<float>::quiet_NaN();
const float kInf = std::numeric_limits<float>::infinity();

// Runs `rule` on (tree, target, draft) and returns what it threw.
template <class Rule>
void verify(Rule rule, const sd::DraftTree& tree, const sd::ProbMatrix& target, const sd::ProbMatrix& draft) {
  sd::RandomStream rng(1);
  (void)rule.verify(tree, target.view(), draft.view(), rng);
}
}  // namespace

TEST_CASE("Rules reject a target with the wrong number of rows", "[unit][accept][errors]") {
  const auto tree = chain(0, {1, 2});
  const auto target = matrix({{0.5f, 0.5f, 0.0f}, {0.5f, 0.5f, 0.0f}});  // needs 3 rows
  const auto draft = matrix({{0.5f, 0.5f, 0.0f}, {0.5f, 0.5f, 0.0f}});
  REQUIRE_THROWS_WITH(verify(sd::SpeculativeSampling{}, tree, target, draft), Contains("target has 2 rows, expected 3"));
  REQUIRE_THROWS_AS(verify(sd::RecursiveRejectionSampling{}, tree, target, draft), sd::ShapeError);
  REQUIRE_THROWS_AS(verify(sd::GreedyAcceptance{}, tree, target, draft), sd::ShapeError);
  REQUIRE_THROWS_AS(verify(sd::TypicalAcceptance{}, tree, target, draft), sd::ShapeError);
}

TEST_CASE("Rules reject empty distributions", "[unit][accept][errors]") {
  const sd::DraftTree tree(0);
  sd::ProbMatrix empty(1, 0);
  REQUIRE_THROWS_AS(verify(sd::SpeculativeSampling{}, tree, empty, {}), sd::InvalidDistributionError);
  REQUIRE_THROWS_AS(verify(sd::RecursiveRejectionSampling{}, tree, empty, {}), sd::InvalidDistributionError);
  REQUIRE_THROWS_AS(verify(sd::GreedyAcceptance{}, tree, empty, {}), sd::InvalidDistributionError);
}

TEST_CASE("Rules reject NaN, infinite and negative probabilities, naming the row and token",
          "[unit][accept][errors]") {
  const auto tree = chain(0, {1});
  const auto draft = matrix({{0.25f, 0.75f, 0.0f}});
  const auto nan_target = matrix({{0.5f, kNaN, 0.5f}, {0.2f, 0.3f, 0.5f}});
  REQUIRE_THROWS_WITH(verify(sd::SpeculativeSampling{}, tree, nan_target, draft),
                      Contains("target row 0") && Contains("token 1") && Contains("not finite"));
  REQUIRE_THROWS_AS(verify(sd::RecursiveRejectionSampling{}, tree, nan_target, draft), sd::InvalidDistributionError);
  REQUIRE_THROWS_AS(verify(sd::GreedyAcceptance{}, tree, nan_target, draft), sd::InvalidDistributionError);
  const auto inf_target = matrix({{0.5f, kInf, 0.5f}, {0.2f, 0.3f, 0.5f}});
  REQUIRE_THROWS_AS(verify(sd::GreedyAcceptance{}, tree, inf_target, draft), sd::InvalidDistributionError);
  REQUIRE_THROWS_AS(verify(sd::TypicalAcceptance{}, tree, inf_target, draft), sd::InvalidDistributionError);
  const auto negative = matrix({{0.7f, 0.5f, -0.2f}, {0.2f, 0.3f, 0.5f}});
  REQUIRE_THROWS_WITH(verify(sd::RecursiveRejectionSampling{}, tree, negative, draft), Contains("negative"));
  REQUIRE_THROWS_WITH(verify(sd::SpeculativeSampling{}, tree, negative, draft), Contains("negative"));
  const auto nan_draft = matrix({{kNaN, 0.75f, 0.25f}});
  const auto target = matrix({{0.2f, 0.3f, 0.5f}, {0.2f, 0.3f, 0.5f}});
  REQUIRE_THROWS_WITH(verify(sd::RecursiveRejectionSampling{}, tree, target, nan_draft), Contains("draft row 0"));
}

TEST_CASE("Rules reject rows that do not sum to one", "[unit][accept][errors]") {
  const auto tree = chain(0, {1});
  const auto draft = matrix({{0.25f, 0.75f, 0.0f}});
  const auto target = matrix({{0.2f, 0.3f, 0.3f}, {0.2f, 0.3f, 0.5f}});
  REQUIRE_THROWS_WITH(verify(sd::SpeculativeSampling{}, tree, target, draft), Contains("sum to 0.8"));
  REQUIRE_THROWS_AS(verify(sd::RecursiveRejectionSampling{}, tree, target, draft), sd::InvalidDistributionError);
}

TEST_CASE("Rules reject sizes that disagree", "[unit][accept][errors]") {
  const auto target = matrix({{0.2f, 0.3f, 0.5f}, {0.2f, 0.3f, 0.5f}});
  SECTION("a drafted token outside the vocabulary") {
    const auto tree = chain(0, {7});
    REQUIRE_THROWS_WITH(verify(sd::GreedyAcceptance{}, tree, target, {}), Contains("outside the target vocabulary"));
    REQUIRE_THROWS_AS(verify(sd::SpeculativeSampling{}, tree, target, {}), sd::ShapeError);
  }
  SECTION("draft rows of another vocabulary") {
    const auto tree = chain(0, {1});
    const auto draft = matrix({{0.5f, 0.5f}});
    REQUIRE_THROWS_WITH(verify(sd::SpeculativeSampling{}, tree, target, draft),
                        Contains("draft vocabulary 2 differs from target vocabulary 3"));
    REQUIRE_THROWS_AS(verify(sd::RecursiveRejectionSampling{}, tree, target, draft), sd::ShapeError);
  }
  SECTION("a slot referring to a draft row that does not exist") {
    sd::DraftTree tree(0);
    tree.add_node(sd::DraftTree::kRoot, 1, 0.5f);
    tree.set_children_source(sd::DraftTree::kRoot, 4, sd::ChildMode::kSampledWithReplacement);
    const auto draft = matrix({{0.2f, 0.3f, 0.5f}});
    REQUIRE_THROWS_WITH(verify(sd::RecursiveRejectionSampling{}, tree, target, draft), Contains("draft row 4"));
  }
}

TEST_CASE("Rules reject trees they cannot verify", "[unit][accept][errors]") {
  const auto target3 = matrix({{0.2f, 0.3f, 0.5f}, {0.2f, 0.3f, 0.5f}, {0.2f, 0.3f, 0.5f}});
  SECTION("speculative sampling needs a chain") {
    sd::DraftTree tree(0);
    tree.set_children_source(sd::DraftTree::kRoot, 0, sd::ChildMode::kSampledWithReplacement);
    tree.add_node(sd::DraftTree::kRoot, 1, 0.3f);
    tree.add_node(sd::DraftTree::kRoot, 2, 0.5f);
    const auto draft = matrix({{0.2f, 0.3f, 0.5f}});
    REQUIRE_THROWS_WITH(verify(sd::SpeculativeSampling{}, tree, target3, draft), Contains("not a chain"));
  }
  SECTION("children without a recorded source") {
    sd::DraftTree tree(0);
    tree.add_node(sd::DraftTree::kRoot, 1, 0.3f);
    const auto target = matrix({{0.2f, 0.3f, 0.5f}, {0.2f, 0.3f, 0.5f}});
    REQUIRE_THROWS_WITH(verify(sd::RecursiveRejectionSampling{}, tree, target, {}), Contains("no recorded source"));
  }
  SECTION("sampled children without a draft row") {
    sd::DraftTree tree(0);
    tree.set_children_source(sd::DraftTree::kRoot, -1, sd::ChildMode::kSampledWithoutReplacement);
    tree.add_node(sd::DraftTree::kRoot, 1, 0.3f);
    const auto target = matrix({{0.2f, 0.3f, 0.5f}, {0.2f, 0.3f, 0.5f}});
    REQUIRE_THROWS_WITH(verify(sd::RecursiveRejectionSampling{}, tree, target, {}), Contains("record no draft row"));
  }
  SECTION("a sampled child its own draft distribution could not produce") {
    sd::DraftTree tree(0);
    tree.set_children_source(sd::DraftTree::kRoot, 0, sd::ChildMode::kSampledWithReplacement);
    tree.add_node(sd::DraftTree::kRoot, 2, 0.0f);
    const auto target = matrix({{0.0f, 0.5f, 0.5f}, {0.2f, 0.3f, 0.5f}});
    const auto draft = matrix({{0.5f, 0.5f, 0.0f}});
    REQUIRE_THROWS_WITH(verify(sd::RecursiveRejectionSampling{}, tree, target, draft),
                        Contains("cannot have been sampled"));
    REQUIRE_THROWS_WITH(verify(sd::SpeculativeSampling{}, tree, target, draft), Contains("cannot have been sampled"));
  }
  SECTION("a token twice among children drawn without replacement") {
    const auto draft = matrix({{0.2f, 0.3f, 0.5f}});
    for (const auto mode : {sd::ChildMode::kSampledWithoutReplacement, sd::ChildMode::kSampledWithReplacement}) {
      sd::DraftTree tree(0);
      tree.set_children_source(sd::DraftTree::kRoot, 0, mode);
      tree.add_node(sd::DraftTree::kRoot, 2, 0.5f);
      tree.add_node(sd::DraftTree::kRoot, 1, 0.3f);
      tree.add_node(sd::DraftTree::kRoot, 2, 0.5f);
      const auto target = matrix({{0.3f, 0.3f, 0.4f}, {0.2f, 0.3f, 0.5f}, {0.2f, 0.3f, 0.5f}, {0.2f, 0.3f, 0.5f}});
      if (mode == sd::ChildMode::kSampledWithoutReplacement) {
        REQUIRE_THROWS_WITH(verify(sd::RecursiveRejectionSampling{}, tree, target, draft),
                            Contains("children 0 and 2 of slot -1 are both token 2"));
        REQUIRE_THROWS_AS(verify(sd::TraversalVerification{}, tree, target, draft), sd::InvalidTreeError);
      } else {  // i.i.d. draws repeat tokens: verified as they are
        REQUIRE_NOTHROW(verify(sd::RecursiveRejectionSampling{}, tree, target, draft));
        REQUIRE_NOTHROW(verify(sd::TraversalVerification{}, tree, target, draft));
      }
    }
  }
}
