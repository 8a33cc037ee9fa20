// Tests of Sequoia's tree construction (include/specdec/tree/sequoia.hpp;
// Sequoia, arXiv 2402.12374, §3.1.1): the DP against brute force over every
// tree shape of small budgets, known optima, the expected-value formula, and
// the positional acceptance estimate against a simulated acceptance rule.
#include "specdec/tree/sequoia.hpp"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "specdec/accept/recursive_rejection_sampling.hpp"
#include "specdec/tree/static_tree_builder.hpp"
#include "support/catch.hpp"
#include "support/exceptions.hpp"
#include "unit/tree/table_drafter.hpp"

namespace sd = specdec;
using sd::testing::message_of;
using Choices = std::vector<std::vector<std::int32_t>>;

namespace {

constexpr std::int32_t kRoot = sd::DraftTree::kRoot;

// An ordered forest: the children of one node, in rank order.
struct Forest {
  std::vector<Forest> trees;
};

// Every ordered forest of exactly n nodes (Catalan(n) of them): a first tree
// (a root over a forest of a nodes) followed by a forest of n - 1 - a nodes.
const std::vector<Forest>& all_forests(int n) {
  static std::vector<std::vector<Forest>> memo{{Forest{}}};
  while (static_cast<int>(memo.size()) <= n) {
    const auto k = memo.size();
    std::vector<Forest> out;
    for (std::size_t a = 0; a < k; ++a)
      for (const auto& kids : memo[a])
        for (const auto& rest : memo[k - 1 - a]) {
          Forest f;
          f.trees.push_back(kids);
          f.trees.insert(f.trees.end(), rest.trees.begin(), rest.trees.end());
          out.push_back(std::move(f));
        }
    memo.push_back(std::move(out));
  }
  return memo[static_cast<std::size_t>(n)];
}

int height(const Forest& f) {
  int h = 0;
  for (const auto& t : f.trees) h = std::max(h, 1 + height(t));
  return h;
}

// Σ over nodes of Π p_rank along the path, p beyond its size = 0.
double value(const Forest& f, const std::vector<double>& p, double prefix = 1.0) {
  double v = 0.0;
  for (std::size_t k = 0; k < f.trees.size(); ++k) {
    const double fk = prefix * (k < p.size() ? p[k] : 0.0);
    v += fk + value(f.trees[k], p, fk);
  }
  return v;
}

double brute_best(const std::vector<double>& p, int budget, int max_depth) {
  double best = 0.0;
  for (int n = 0; n <= budget; ++n)
    for (const auto& f : all_forests(n))
      if (height(f) <= max_depth) best = std::max(best, value(f, p));
  return best;
}

Choices star(int n) {
  Choices c;
  for (int k = 0; k < n; ++k) c.push_back({k});
  return c;
}

}  // namespace

TEST_CASE("The brute-force enumeration covers every ordered tree (Catalan numbers)", "[unit][tree]") {
  const std::vector<std::size_t> catalan{1, 1, 2, 5, 14, 42, 132, 429};
  for (int n = 0; n < 8; ++n) CHECK(all_forests(n).size() == catalan[static_cast<std::size_t>(n)]);
}

TEST_CASE("sequoia_shape's optimum equals brute force over all trees of up to 7 nodes", "[unit][tree]") {
  std::vector<std::vector<double>> ps{{0.6, 0.2, 0.1},       {0.9},       {0.3, 0.3, 0.3},
                                      {0.5, 0.0, 0.4},       {0.05, 0.9}, {1.0, 0.0, 0.0},
                                      {0.2, 0.25, 0.3, 0.2}, {},          {0.0, 0.0}};
  std::mt19937 gen(99);
  for (int i = 0; i < 12; ++i) {  // random p with Σ p <= 1
    std::vector<double> p(static_cast<std::size_t>(1 + i % 5));
    double left = 1.0;
    for (auto& v : p) left -= v = std::uniform_real_distribution<double>(0.0, left)(gen);
    ps.push_back(p);
  }
  for (const auto& p : ps)
    for (int budget = 0; budget <= 7; ++budget)
      for (int depth = 0; depth <= 7; ++depth) {
        std::string text;
        for (double v : p) text += std::to_string(v) + " ";
        INFO("p = (" << text << "), budget " << budget << ", depth " << depth);
        const auto shape = sd::sequoia_shape(p, budget, depth);
        CHECK(shape.size() <= budget);
        CHECK(shape.max_depth() <= depth);
        // The shape is valid (it was constructed; re-validate through choices).
        CHECK(sd::StaticTreeShape::from_choices(shape.choices()) == shape);
        CHECK(sd::sequoia_expected_accepted(shape, p) == Approx(brute_best(p, budget, depth)).margin(1e-12));
      }
}

TEST_CASE("sequoia_shape makes a chain when only the first child is ever accepted, and a star under depth 1",
          "[unit][tree]") {
  const std::vector<double> first_only{1.0, 0.0, 0.0};
  for (int budget = 0; budget <= 9; ++budget)
    for (int depth = 0; depth <= 9; ++depth) {
      INFO("budget " << budget << ", depth " << depth);
      const auto shape = sd::sequoia_shape(first_only, budget, depth);
      CHECK(shape == sd::StaticTreeShape::chain(std::min(budget, depth)));
      CHECK(sd::sequoia_expected_accepted(shape, first_only) == std::min(budget, depth));
    }
  const std::vector<double> steep{0.6, 0.2, 0.1, 0.05};
  for (int budget = 0; budget <= 6; ++budget) {
    INFO("budget " << budget);
    const auto shape = sd::sequoia_shape(steep, budget, 1);
    CHECK(shape.choices() == star(std::min(budget, 4)));  // ranks beyond p add nothing
  }
}

TEST_CASE("sequoia_shape picks the hand-computed optimum on two-node budgets", "[unit][tree]") {
  // Chain {0},{0,0}: p0 + p0^2; star {0},{1}: p0 + p1.
  const std::vector<double> deep{0.9, 0.05};  // chain 1.71 > star 0.95
  CHECK(sd::sequoia_shape(deep, 2, 5).choices() == Choices{{0}, {0, 0}});
  CHECK(sd::sequoia_expected_accepted(sd::sequoia_shape(deep, 2, 5), deep) == Approx(1.71));
  const std::vector<double> wide{0.5, 0.45};  // chain 0.75 < star 0.95
  CHECK(sd::sequoia_shape(wide, 2, 5).choices() == Choices{{0}, {1}});
  // Three nodes with p = (0.5, 0.3, 0.1): {0},{1},{0,0} = 0.5 + 0.3 + 0.25 = 1.05 beats
  // the chain (0.875), the star (0.9) and {0},{0,0},{0,1} (0.5 + 0.25 + 0.15 = 0.9).
  const std::vector<double> mid{0.5, 0.3, 0.1};
  const auto s = sd::sequoia_shape(mid, 3, 5);
  CHECK(s.choices() == Choices{{0}, {1}, {0, 0}});
  CHECK(sd::sequoia_expected_accepted(s, mid) == Approx(1.05));
  // A spacer: rank 1 is never accepted but holds the slot for rank 2.
  const std::vector<double> gap{0.5, 0.0, 0.45};
  CHECK(sd::sequoia_shape(gap, 3, 1).choices() == star(3));
  CHECK(sd::sequoia_shape(gap, 2, 1).choices() == star(1));  // {0},{1} adds nothing over {0}
}

TEST_CASE("sequoia_expected_accepted sums path products of positional acceptance", "[unit][tree]") {
  const auto shape = sd::StaticTreeShape::from_choices({{0}, {1}, {2}, {0, 0}, {0, 1}, {1, 0}, {0, 0, 0}});
  const std::vector<double> p{0.5, 0.2};
  // {0} .5, {1} .2, {2} 0 (beyond p), {0,0} .25, {0,1} .1, {1,0} .1, {0,0,0} .125
  CHECK(sd::sequoia_expected_accepted(shape, p) == Approx(1.275));
  CHECK(sd::sequoia_expected_accepted(sd::StaticTreeShape(), p) == 0.0);
}

TEST_CASE(
    "sequoia_shape and sequoia_expected_accepted reject probabilities outside [0, 1] and negative sizes",
    "[unit][tree]") {
  const std::vector<double> bad{0.5, 1.5};
  auto msg = message_of<sd::InvalidArgumentError>([&] { (void)sd::sequoia_shape(bad, 3, 3); });
  CHECK(msg.find("p[1] must be in [0, 1], got 1.5") != std::string::npos);
  const std::vector<double> nan{std::numeric_limits<double>::quiet_NaN()};
  CHECK_THROWS_AS(sd::sequoia_expected_accepted(sd::StaticTreeShape::chain(1), nan),
                  sd::InvalidArgumentError);
  const std::vector<double> ok{0.5};
  msg = message_of<sd::InvalidArgumentError>([&] { (void)sd::sequoia_shape(ok, -1, 3); });
  CHECK(msg.find("got -1 and 3") != std::string::npos);
  CHECK_THROWS_AS(sd::sequoia_shape(ok, 3, -2), sd::InvalidArgumentError);
}

// --- PositionalAcceptance ------------------------------------------------------------

namespace {
// root -> a(0) b(1) c(2); a -> d(3) e(4); b -> f(5)
sd::DraftTree small_tree() {
  sd::DraftTree t(9);
  for (sd::TokenId x : {10, 11, 12}) t.add_node(kRoot, x, 0.2f);
  t.add_node(0, 13, 0.2f);
  t.add_node(0, 14, 0.2f);
  t.add_node(1, 15, 0.2f);
  return t;
}
sd::VerifyResult result(std::vector<std::int32_t> nodes, std::vector<std::uint8_t> outcomes) {
  sd::VerifyResult r;
  r.accepted_nodes = std::move(nodes);
  r.depth_accepted = std::move(outcomes);
  r.bonus_token = 0;
  return r;
}
}  // namespace

TEST_CASE("PositionalAcceptance counts accepted ranks and per-rank exposures, and drops the none slot",
          "[unit][tree]") {
  const auto t = small_tree();
  sd::PositionalAcceptance acc;
  acc.observe(t, result({0, 4}, {1, 1}));  // rank 0 of 3, then rank 1 of 2; ends at a leaf
  acc.observe(t, result({1}, {1, 0}));     // rank 1 of 3, then none of 1
  acc.observe(t, result({}, {0}));         // none of 3
  acc.observe(t, result({2}, {1}));        // rank 2 of 3; leaf
  CHECK(acc.num_steps() == 6);
  CHECK(acc.num_none() == 2);
  CHECK(std::vector<std::int64_t>(acc.counts().begin(), acc.counts().end()) ==
        std::vector<std::int64_t>{1, 2, 1});
  CHECK(std::vector<std::int64_t>(acc.exposures().begin(), acc.exposures().end()) ==
        std::vector<std::int64_t>{6, 5, 4});
  const auto p = acc.probabilities();
  REQUIRE(p.size() == 3);
  CHECK(p[0] == Approx(1.0 / 6));
  CHECK(p[1] == Approx(2.0 / 5));
  CHECK(p[2] == Approx(1.0 / 4));
  acc.reset();
  CHECK(acc.probabilities().empty());
  CHECK(acc.num_steps() == 0);
}

TEST_CASE("PositionalAcceptance on a fixed-width tree is Sequoia's count / steps", "[unit][tree]") {
  sd::DraftTree t(9);  // a star of three leaves
  for (sd::TokenId x : {10, 11, 12}) t.add_node(kRoot, x, 0.2f);
  sd::PositionalAcceptance acc;
  for (const auto& r : {result({}, {0}), result({}, {0}), result({2}, {1}), result({1}, {1}),
                        result({0}, {1}), result({1}, {1})})
    acc.observe(t, r);
  CHECK(acc.num_steps() == 6);
  CHECK(acc.num_none() == 2);
  const auto p = acc.probabilities();
  CHECK(p == std::vector<double>{1.0 / 6, 2.0 / 6, 1.0 / 6});  // the none slot (2 / 6) dropped
}

TEST_CASE("PositionalAcceptance rejects results that are not walks of the tree, counting nothing",
          "[unit][tree]") {
  const auto t = small_tree();
  sd::PositionalAcceptance acc;
  auto msg = message_of<sd::InvalidArgumentError>([&] { acc.observe(t, result({0, 5}, {1, 1})); });
  CHECK(msg.find("accepted node 5 at depth 2 is not a child of slot 0") != std::string::npos);
  msg = message_of<sd::InvalidArgumentError>([&] { acc.observe(t, result({0}, {1, 1, 0})); });
  CHECK(msg.find("1 accepted nodes but 3 depth outcomes") != std::string::npos);
  msg = message_of<sd::InvalidArgumentError>([&] { acc.observe(t, result({2}, {1, 0})); });
  CHECK(msg.find("slot 2 has no children") != std::string::npos);
  msg = message_of<sd::InvalidArgumentError>([&] { acc.observe(t, result({0}, {0})); });
  CHECK(msg.find("depth 1 outcome is 0") != std::string::npos);
  CHECK(acc.num_steps() == 0);
  CHECK(acc.counts().empty());
}

TEST_CASE(
    "PositionalAcceptance measures p_k = P(child k) of the target-only rule, and the expected value "
    "predicts the mean accepted length",
    "[unit][tree]") {
  // Every slot's draft row ranks tokens 2 > 0 > 3 > 1, so the rank-k child is
  // always the same token; every target row is P. Under the target-only rule
  // (mode (c) of docs/methods.md) the k-th child is accepted with probability
  // P(c_k) exactly, the same at every depth: Sequoia's assumption holds, so
  // Σ_v Π p must match the mean accepted length. Seeded; tolerances are ~5
  // standard deviations.
  const std::vector<float> q{0.3f, 0.1f, 0.4f, 0.2f, 0.0f};
  const std::vector<float> P{0.35f, 0.05f, 0.3f, 0.2f, 0.1f};
  const std::vector<double> p_true{0.3, 0.35, 0.2};  // P(2), P(0), P(3)
  sd::testing::TableDrafter drafter(5, [&](sd::TokenId, std::int32_t) { return q; });
  const auto shape = sd::StaticTreeShape::from_choices({{0}, {1}, {2}, {0, 0}, {0, 1}, {1, 0}, {0, 0, 0}});
  sd::StaticTreeBuilder builder(shape);
  sd::RecursiveRejectionSampling rule;
  sd::PositionalAcceptance acc;
  sd::RandomStream rng(5), verify_rng(6);
  sd::DraftTree t;
  sd::ProbMatrix rows, target;
  constexpr int kRounds = 40000;
  double accepted = 0.0;
  for (int i = 0; i < kRounds; ++i) {
    builder.build(drafter, {.max_depth = 8, .max_nodes = 100, .verify_nodes = 100}, 0, rng, t, rows);
    target.resize(0, 5);
    for (std::int32_t n = 0; n <= t.size(); ++n) {
      auto r = target.append_row();
      std::copy(P.begin(), P.end(), r.begin());
    }
    const auto v = rule.verify(t, target.view(), rows.view(), verify_rng);
    acc.observe(t, v);
    accepted += v.num_accepted();
  }
  const auto p = acc.probabilities();
  REQUIRE(p.size() == 3);
  for (std::size_t k = 0; k < 3; ++k) {
    INFO("rank " << k);
    const double n = static_cast<double>(acc.exposures()[k]);
    const double sd_k = std::sqrt(p_true[k] * (1 - p_true[k]) / n);
    CHECK(std::abs(p[k] - p_true[k]) < 5 * sd_k);
  }
  const double predicted = sd::sequoia_expected_accepted(shape, p_true);
  CHECK(predicted == Approx(0.3 + 0.35 + 0.2 + 0.09 + 0.105 + 0.105 + 0.027));
  CHECK(accepted / kRounds == Approx(predicted).margin(0.02));
}
