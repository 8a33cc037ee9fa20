// CostAwareTree (policy/cost_aware_tree.hpp, Sequoia's hardware-aware
// objective): the plan follows the forward cost (flat: big trees; steep:
// small ones), stays within the initial budget, learns positional acceptance
// per depth from verified rounds, fits the drafting cost, and rejects bad
// setups with typed errors.
#include "specdec/policy/cost_aware_tree.hpp"

#include <cstdint>
#include <random>
#include <vector>

#include "specdec/concepts.hpp"
#include "support/catch.hpp"

namespace sd = specdec;

static_assert(sd::LengthPolicy<sd::CostAwareTree>, "CostAwareTree must satisfy LengthPolicy");

namespace {

// Lat(t) = base + slope * t over t = 1..64.
sd::VerifyLatency latency(double base, double slope) {
  std::vector<std::int32_t> tokens;
  std::vector<double> seconds;
  for (std::int32_t t = 1; t <= 64; t *= 2) {
    tokens.push_back(t);
    seconds.push_back(base + slope * t);
  }
  return sd::VerifyLatency({1}, tokens, seconds, {0.0});
}

const sd::DraftBudget kInitial{5, 24, 24, 0.0f, 4};

// p[d][r]: rank r accepted with 0.6, 0.2, 0.1, 0.05 at every depth.
std::vector<std::vector<double>> flat_p(std::size_t depths) {
  return std::vector<std::vector<double>>(depths, {0.6, 0.2, 0.1, 0.05});
}

}  // namespace

TEST_CASE("The cost-aware plan follows the forward cost", "[policy][cost]") {
  const auto p = flat_p(5);
  // GPU-like: a forward costs the same for 1 or 25 tokens, drafting is cheap:
  // the largest tree pays.
  const sd::CostAwareTree flat(latency(1.0, 0.0), kInitial);
  const auto big = flat.best_plan(p, 0.01, 0.0, 0.0);
  CHECK(big.budget.verify_nodes == 24);
  CHECK(big.budget.max_depth == 5);
  // CPU-like: every token verified costs a fifth of a step: a small tree.
  const sd::CostAwareTree steep(latency(1.0, 0.2), kInitial);
  const auto small = steep.best_plan(p, 0.01, 0.0, 0.0);
  CHECK(small.budget.verify_nodes < 8);
  CHECK(small.budget.verify_nodes >= 1);
  CHECK(small.tokens_per_second() > 0.0);
  // The chosen plan beats every other (N, B) it could have chosen: compare
  // with a chain of the same depth and a one-node tree.
  CHECK(small.expected_accepted > 0.6 - 1e-12);
  CHECK(small.budget.branch >= 1);
  CHECK(small.budget.branch <= 4);
  // Expensive drafting levels make it shallower.
  const auto shallow = steep.best_plan(p, 2.0, 0.0, 0.0);
  CHECK(shallow.budget.max_depth < small.budget.max_depth);
  // Rates: (1 + E) / seconds, E of the best-first tree: one node = p[0][0].
  const sd::CostAwareTree one(latency(1.0, 100.0), kInitial);
  const auto tiny = one.best_plan(p, 0.0, 0.0, 0.0);
  CHECK(tiny.budget.verify_nodes == 1);
  CHECK(tiny.budget.max_depth == 1);
  CHECK(tiny.expected_accepted == Approx(0.6));
  CHECK(tiny.round_seconds == Approx(1.0 + 100.0 * 2));
  // Chains only: k stays the initial branch, B = N.
  sd::CostAwareOptions chains;
  chains.chains_only = true;
  const sd::CostAwareTree chain(latency(1.0, 0.05), sd::DraftBudget{8, 8, 8, 0.0f, 0}, chains);
  const auto c = chain.best_plan(flat_p(8), 0.01, 0.0, 0.0);
  CHECK(c.budget.verify_nodes == c.budget.max_depth);
  double expect = 0.0, path = 1.0;
  for (std::int32_t d = 0; d < c.budget.max_depth; ++d) expect += (path *= 0.6);
  CHECK(c.expected_accepted == Approx(expect));
}

TEST_CASE("The cost-aware policy learns acceptance by depth and plans within its initial budget", "[policy][cost]") {
  // Verified trees: the root has 3 children, each accepted child 2; rank 0 is
  // accepted with 0.7 at depth 1 and 0.3 at depth 2, rank 1 with 0.2 / 0.1.
  sd::CostAwareOptions o;
  o.prior_weight = 0.0;
  std::mt19937_64 gen(7);
  std::uniform_real_distribution<double> u(0.0, 1.0);
  o.min_rounds = 1;
  o.replan_every = 1;
  sd::CostAwareTree planner(latency(1.0, 0.1), sd::DraftBudget{2, 9, 9, 0.0f, 3}, o);
  for (int round = 0; round < 4000; ++round) {
    sd::DraftTree tree(0);
    for (int r = 0; r < 3; ++r) {
      const auto child = tree.add_node(sd::DraftTree::kRoot, 10 + r, 0.5f);
      tree.add_node(child, 20, 0.5f);
      tree.add_node(child, 21, 0.5f);
    }
    std::vector<std::int32_t> accepted;
    const double a = u(gen);
    const int rank1 = a < 0.7 ? 0 : a < 0.9 ? 1 : -1;
    if (rank1 >= 0) {
      accepted.push_back(rank1 * 3);
      const double b = u(gen);
      const int rank2 = b < 0.3 ? 0 : b < 0.4 ? 1 : -1;
      if (rank2 >= 0) accepted.push_back(rank1 * 3 + 1 + rank2);
    }
    sd::RoundOutcome out;
    out.num_drafted = out.num_verified = tree.size();
    out.draft_us = 100.0;
    out.tree = &tree;
    out.accepted_nodes = accepted;
    planner.observe(out);
    const auto b = planner.budget();
    REQUIRE(b.max_depth <= 2);
    REQUIRE(b.verify_nodes <= 9);
    REQUIRE(b.max_nodes <= 9);
    REQUIRE(b.branch <= 3);
  }
  const auto& p = planner.acceptance();
  REQUIRE(p.size() == 2);
  REQUIRE(p[0].size() == 3);
  CHECK(p[0][0] == Approx(0.7).margin(0.03));
  CHECK(p[0][1] == Approx(0.2).margin(0.03));
  CHECK(p[0][2] == Approx(0.0).margin(0.01));
  CHECK(p[1][0] == Approx(0.3).margin(0.04));
  CHECK(p[1][1] == Approx(0.1).margin(0.03));
  CHECK(planner.plans() == 4000);
  // Drafting took 100 us for depth 2 and 9 nodes each time: a chain-like fit.
  const auto [per_level, per_node] = planner.draft_cost();
  CHECK(per_level * 2 + per_node * 9 == Approx(100e-6));
  // Nodes by path value: 0.7 (depth 1), 0.21 (its first child), 0.2 (the
  // second child of the root), 0.07, ... With Lat(t) = 1 + 0.1 t the rate
  // (1 + E) / Lat(B + 1) is 1.7 / 1.2 = 1.42, 1.91 / 1.3 = 1.47,
  // 2.11 / 1.4 = 1.51, 2.18 / 1.5 = 1.45 for B = 1..4: three nodes, depth 2,
  // two children at the root.
  CHECK(planner.plan().budget.verify_nodes == 3);
  CHECK(planner.plan().budget.max_depth == 2);
  CHECK(planner.plan().budget.branch == 2);
  CHECK(planner.plan().tokens_per_second() == Approx(2.11 / 1.4).epsilon(0.02));
}

TEST_CASE("The cost-aware policy rejects bad setups", "[policy][cost]") {
  CHECK_THROWS_AS(sd::CostAwareTree(sd::VerifyLatency{}, kInitial), sd::InvalidArgumentError);
  CHECK_THROWS_AS(sd::CostAwareTree(latency(1, 0), sd::DraftBudget{0, 4, 4, 0.0f, 0}), sd::InvalidArgumentError);
  CHECK_THROWS_AS(sd::CostAwareTree(latency(1, 0), sd::DraftBudget{3, 2, 4, 0.0f, 0}), sd::InvalidArgumentError);
  sd::CostAwareOptions o;
  o.replan_every = 0;
  CHECK_THROWS_AS(sd::CostAwareTree(latency(1, 0), kInitial, o), sd::InvalidArgumentError);
  // Before any round: the initial budget.
  const sd::CostAwareTree fresh(latency(1, 0), kInitial);
  CHECK(fresh.budget().verify_nodes == kInitial.verify_nodes);
  CHECK(fresh.budget().branch == kInitial.branch);
}
