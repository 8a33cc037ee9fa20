// The regime map's round model (policy/round_shape.hpp), against rounds
// worked out by hand: a chain, a one-pass drafter, an overlapped drafter and
// a shorter verification, their speedups and break-even draft steps.
#include <cmath>

#include "specdec/core/error.hpp"
#include "specdec/policy/round_shape.hpp"
#include "support/catch.hpp"

namespace sd = specdec;

namespace {

// chain:k=4 with tau 3.6 and 0.05 target steps of host work a round.
sd::RoundShape chain() {
  return {3.6, 4.0, 0.0, 5.0, 1.0, 0.05};
}

}  // namespace

TEST_CASE("A round costs its serial drafts, the larger of verification and overlapped drafts, and the rest",
          "[unit][policy]") {
  // 4 c + (1 + 4 s) + 0.05 at c = 0.1, s = 0.2.
  CHECK(chain().steps(0.1, 0.2) == Approx(0.4 + 1.8 + 0.05));
  CHECK(chain().tokens_per_step(0.1, 0.2) == Approx(3.6 / 2.25));
  // Autoregressive decoding: one token a step whatever the hardware.
  const sd::RoundShape ar{};
  CHECK(ar.tokens_per_step(0.3, 0.4) == 1.0);
  // An overlapped drafter hides behind the verification until it is longer:
  // 8 draft steps beside a 1.6-step verification (1.2 slowdown x (1 + 3 s)).
  const sd::RoundShape duo{3.0, 0.0, 8.0, 4.0, 1.2, 0.1};
  CHECK(duo.steps(0.1, 0.1) == Approx(1.2 * 1.3 + 0.1));  // 0.8 steps of drafting hidden
  CHECK(duo.steps(0.3, 0.1) == Approx(8 * 0.3 + 0.1));    // 2.4 > 1.56: the target waits
}

TEST_CASE("A one-pass drafter beats the chain past a draft step it solves for", "[unit][policy]") {
  // Lyanna-like: tau 3.0, a head pass of 1.5 draft steps, 13 verified tokens.
  const sd::RoundShape head{3.0, 1.5, 0.0, 13.0, 1.0, 0.1};
  // At s = 0 (a memory-bound verification) both verify in one step:
  // 3.6 (1.5 c + 1.1) = 3.0 (4 c + 1.05) -> c (12 - 5.4) = 3.96 - 3.15 -> c = 0.1227...
  const auto c0 = sd::break_even_draft_step(head, chain(), 0.0, 1.0);
  REQUIRE(c0.has_value());
  CHECK(*c0 == Approx(0.81 / 6.6).epsilon(1e-6));
  CHECK(sd::speedup_over(head, chain(), *c0, 0.0) == Approx(1.0));
  CHECK(sd::speedup_over(head, chain(), 0.3, 0.0) > 1.0);
  CHECK(sd::speedup_over(head, chain(), 0.05, 0.0) < 1.0);
  // A costlier verification per token moves the break-even up (13 tokens
  // against 5): at s = 0.1, 3.6 (1.5 c + 2.3) = 3.0 (4 c + 1.45) -> c = 3.93 / 6.6.
  const auto c1 = sd::break_even_draft_step(head, chain(), 0.1, 1.0);
  REQUIRE(c1.has_value());
  CHECK(*c1 == Approx(3.93 / 6.6).epsilon(1e-6));
  // Outside the range asked about: no break-even.
  CHECK_FALSE(sd::break_even_draft_step(head, chain(), 0.1, 0.5).has_value());
  // A method that is never faster has none either.
  const sd::RoundShape worse{3.0, 4.0, 0.0, 5.0, 1.0, 0.05};
  CHECK_FALSE(sd::break_even_draft_step(worse, chain(), 0.0, 10.0).has_value());
}

TEST_CASE("Verifying fewer tokens pays where each verified token costs", "[unit][policy]") {
  // SV-like: one more draft step (a companion's pass), 3 verified tokens, tau 3.3.
  const sd::RoundShape sv{3.3, 5.0, 0.0, 3.0, 1.0, 0.05};
  // At c = 0.1: chain 1.45 + 4 s, sv 1.55 + 2 s; equal speed where
  // 3.6 (1.55 + 2 s) = 3.3 (1.45 + 4 s) -> s = (5.58 - 4.785) / (13.2 - 7.2).
  CHECK(sd::speedup_over(sv, chain(), 0.1, 0.0) < 1.0);
  CHECK(sd::speedup_over(sv, chain(), 0.1, 0.5) > 1.0);
  const double s_star = (5.58 - 4.785) / 6.0;
  CHECK(sd::speedup_over(sv, chain(), 0.1, s_star) == Approx(1.0));
}

TEST_CASE("A round shape refuses values no round has", "[unit][policy]") {
  CHECK_THROWS_AS((sd::RoundShape{0.5}.steps(0.1, 0.1)), sd::InvalidArgumentError);  // tau < 1
  CHECK_THROWS_AS((sd::RoundShape{2.0, -1.0}.steps(0.1, 0.1)), sd::InvalidArgumentError);
  CHECK_THROWS_AS((sd::RoundShape{2.0, 1.0, 0.0, 0.5}.steps(0.1, 0.1)), sd::InvalidArgumentError);  // n < 1
  CHECK_THROWS_AS((sd::RoundShape{2.0, 1.0, 0.0, 3.0, 0.0}.steps(0.1, 0.1)), sd::InvalidArgumentError);
  CHECK_THROWS_AS((sd::RoundShape{2.0, 1.0, 0.0, 3.0, 1.0, NAN}.steps(0.1, 0.1)), sd::InvalidArgumentError);
  CHECK_THROWS_AS(chain().steps(-0.1, 0.1), sd::InvalidArgumentError);
  CHECK_THROWS_AS(chain().steps(0.1, INFINITY), sd::InvalidArgumentError);
  CHECK_THROWS_AS(sd::break_even_draft_step(chain(), chain(), 0.1, 0.0), sd::InvalidArgumentError);
}
