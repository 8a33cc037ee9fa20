// Tests of the length policies (include/specdec/policy/): FixedLength,
// HeuristicLength (HF's +2 / -1 schedule, docs/methods.md) and
// ConfidenceStop (HF's assistant_confidence_threshold): exact budget
// sequences for given outcome sequences, and typed errors for bad parameters.
#include <cstdint>
#include <limits>
#include <vector>

#include "specdec/concepts.hpp"
#include "specdec/policy/confidence_stop.hpp"
#include "specdec/policy/fixed_length.hpp"
#include "specdec/policy/heuristic_length.hpp"
#include "support/catch.hpp"
#include "support/exceptions.hpp"

namespace sd = specdec;
using sd::testing::message_of;

static_assert(sd::LengthPolicy<sd::FixedLength>, "FixedLength must satisfy LengthPolicy");
static_assert(sd::LengthPolicy<sd::HeuristicLength>, "HeuristicLength must satisfy LengthPolicy");
static_assert(sd::LengthPolicy<sd::ConfidenceStop>, "ConfidenceStop must satisfy LengthPolicy");

namespace {

const float kNaN = std::numeric_limits<float>::quiet_NaN();

sd::RoundOutcome outcome(std::int32_t drafted, std::int32_t accepted) {
  sd::RoundOutcome o;
  o.num_drafted = drafted;
  o.num_verified = drafted;
  o.num_accepted = accepted;
  return o;
}

bool same(const sd::DraftBudget& a, const sd::DraftBudget& b) {
  return a.max_depth == b.max_depth && a.max_nodes == b.max_nodes && a.verify_nodes == b.verify_nodes &&
         a.stop_below == b.stop_below;
}

}  // namespace

TEST_CASE("fixed length returns its budget whatever the outcomes", "[unit][policy]") {
  const sd::DraftBudget b{6, 20, 12, 0.25f};
  sd::FixedLength p(b);
  REQUIRE(same(p.budget(), b));
  p.observe(outcome(20, 20));
  p.observe(outcome(20, 0));
  REQUIRE(same(p.budget(), b));
  REQUIRE(same(sd::FixedLength::chain(7).budget(), sd::DraftBudget{7, 7, 7, 0.0f}));
}

TEST_CASE("fixed length rejects budgets a builder cannot honour", "[unit][policy]") {
  using E = sd::InvalidArgumentError;
  REQUIRE_THAT(message_of<E>([] {
                 sd::FixedLength(sd::DraftBudget{0, 4, 4, 0.0f});
               }),
               Catch::Contains("max_depth") && Catch::Contains("got 0"));
  REQUIRE_THAT(message_of<E>([] {
                 sd::FixedLength(sd::DraftBudget{4, 0, 1, 0.0f});
               }),
               Catch::Contains("max_nodes"));
  REQUIRE_THAT(message_of<E>([] {
                 sd::FixedLength(sd::DraftBudget{4, 4, 0, 0.0f});
               }),
               Catch::Contains("verify_nodes") && Catch::Contains("got 0"));
  REQUIRE_THAT(
      message_of<E>([] {
        sd::FixedLength(sd::DraftBudget{4, 4, 5, 0.0f});
      }),
      Catch::Contains("verify_nodes") && Catch::Contains("max_nodes = 4") && Catch::Contains("got 5"));
  REQUIRE_THROWS_AS(sd::FixedLength(sd::DraftBudget{4, 4, 4, -0.1f}), E);
  REQUIRE_THROWS_AS(sd::FixedLength(sd::DraftBudget{4, 4, 4, 1.5f}), E);
  REQUIRE_THROWS_AS(sd::FixedLength(sd::DraftBudget{4, 4, 4, kNaN}), E);
  REQUIRE_THROWS_AS(sd::FixedLength::chain(0), E);
  REQUIRE_NOTHROW(sd::FixedLength(sd::DraftBudget{1, 1, 1, 1.0f}));
}

TEST_CASE("heuristic length grows by 2 on full acceptance and shrinks by 1 otherwise", "[unit][policy]") {
  sd::HeuristicLength p;  // k = 5, cap 32
  REQUIRE(same(p.budget(), sd::DraftBudget{5, 5, 5, 0.0f}));
  struct Step {
    std::int32_t drafted, accepted, k_after;
  };
  const std::vector<Step> steps{
      {5, 5, 7},   // all accepted: +2
      {7, 7, 9},   //
      {9, 3, 8},   // a rejection: -1
      {8, 0, 7},   //
      {0, 0, 7},   // nothing drafted (n-gram miss): unchanged
      {7, 6, 6},   //
      {6, 6, 8},   //
      {3, 3, 10},  // fewer drafted than granted (confidence stop), all accepted: +2
  };
  for (const auto& s : steps) {
    p.observe(outcome(s.drafted, s.accepted));
    REQUIRE(p.k() == s.k_after);
    REQUIRE(same(p.budget(), sd::DraftBudget{s.k_after, s.k_after, s.k_after, 0.0f}));
  }
  p.reset();
  REQUIRE(p.k() == 5);
}

TEST_CASE("heuristic length stays within [1, max_k]", "[unit][policy]") {
  sd::HeuristicLength p(2, 6);
  std::vector<std::int32_t> ks;
  for (int i = 0; i < 4; ++i) {
    p.observe(outcome(p.k(), p.k()));
    ks.push_back(p.k());
  }
  for (int i = 0; i < 8; ++i) {
    p.observe(outcome(p.k(), 0));
    ks.push_back(p.k());
  }
  REQUIRE(ks == std::vector<std::int32_t>{4, 6, 6, 6, 5, 4, 3, 2, 1, 1, 1, 1});
  p.observe(outcome(1, 1));
  REQUIRE(p.k() == 3);
}

TEST_CASE("heuristic length rejects bad parameters and inconsistent outcomes", "[unit][policy]") {
  using E = sd::InvalidArgumentError;
  REQUIRE_THROWS_AS(sd::HeuristicLength(0, 10), E);
  REQUIRE_THAT(message_of<E>([] { sd::HeuristicLength(11, 10); }),
               Catch::Contains("initial_k = 11") && Catch::Contains("max_k = 10"));
  REQUIRE_NOTHROW(sd::HeuristicLength(1, 1));
  sd::HeuristicLength p;
  REQUIRE_THAT(message_of<E>([&] { p.observe(outcome(3, 4)); }), Catch::Contains("4 accepted of 3 drafted"));
  REQUIRE_THROWS_AS(p.observe(outcome(-1, 0)), E);
  REQUIRE_THROWS_AS(p.observe(outcome(3, -1)), E);
  REQUIRE(p.k() == 5);  // a rejected outcome changes nothing
}

TEST_CASE("confidence stop is a fixed budget with stop_below at the threshold", "[unit][policy]") {
  sd::ConfidenceStop hf;  // HF defaults: 20-token chain, threshold 0.4
  REQUIRE(same(hf.budget(), sd::DraftBudget{20, 20, 20, 0.4f}));
  REQUIRE(hf.threshold() == 0.4f);
  sd::ConfidenceStop p(sd::DraftBudget{4, 16, 8, 0.0f}, 0.1f);
  p.observe(outcome(16, 0));
  REQUIRE(same(p.budget(), sd::DraftBudget{4, 16, 8, 0.1f}));
  REQUIRE(same(sd::ConfidenceStop(sd::DraftBudget{3, 3, 3, 0.0f}).budget(), sd::DraftBudget{3, 3, 3, 0.4f}));
}

TEST_CASE("confidence stop rejects bad thresholds and budgets", "[unit][policy]") {
  using E = sd::InvalidArgumentError;
  const sd::DraftBudget base{4, 4, 4, 0.0f};
  REQUIRE_THAT(message_of<E>([&] { sd::ConfidenceStop(base, 1.5f); }), Catch::Contains("threshold"));
  REQUIRE_THROWS_AS(sd::ConfidenceStop(base, -0.01f), E);
  REQUIRE_THROWS_AS(sd::ConfidenceStop(base, kNaN), E);
  REQUIRE_THAT(message_of<E>([] {
                 sd::ConfidenceStop(sd::DraftBudget{4, 4, 4, 0.3f}, 0.5f);
               }),
               Catch::Contains("stop_below = 0.3"));
  REQUIRE_THROWS_AS(sd::ConfidenceStop(sd::DraftBudget{4, 2, 3, 0.0f}), E);
  REQUIRE_NOTHROW(sd::ConfidenceStop(base, 0.0f));
  REQUIRE_NOTHROW(sd::ConfidenceStop(base, 1.0f));
}
