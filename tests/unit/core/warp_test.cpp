#include <cmath>
#include <limits>
#include <numeric>
#include <vector>

#include "specdec/core/error.hpp"
#include "specdec/core/warp.hpp"
#include "support/catch.hpp"

using specdec::SamplingParams;

namespace {
std::vector<float> warped(const std::vector<float>& logits, SamplingParams p) {
  std::vector<float> out(logits.size());
  specdec::warp(logits, p, out);
  return out;
}
double sum(const std::vector<float>& v) { return std::accumulate(v.begin(), v.end(), 0.0); }
}  // namespace

TEST_CASE("warp at temperature 1 is the softmax", "[unit][warp]") {
  const std::vector<float> logits{1.0f, 2.0f, 3.0f, -1.0f};
  const auto p = warped(logits, {});
  double z = 0;
  for (float l : logits) z += std::exp(l);
  for (std::size_t i = 0; i < logits.size(); ++i) CHECK(p[i] == Approx(std::exp(logits[i]) / z));
}

TEST_CASE("warp temperature sharpens and flattens", "[unit][warp]") {
  const std::vector<float> logits{0.0f, 1.0f};
  const auto cold = warped(logits, {.temperature = 0.5f});
  const auto hot = warped(logits, {.temperature = 2.0f});
  CHECK(cold[1] == Approx(std::exp(2.0) / (1 + std::exp(2.0))));
  CHECK(hot[1] == Approx(std::exp(0.5) / (1 + std::exp(0.5))));
}

TEST_CASE("warp at temperature 0 is one-hot at the argmax, ties to the lowest id", "[unit][warp]") {
  const auto p = warped({0.5f, 3.0f, 3.0f, 1.0f}, {.temperature = 0.0f});
  CHECK(p == std::vector<float>{0, 1, 0, 0});
}

TEST_CASE("top_k keeps the k largest and every token tied at the boundary", "[unit][warp]") {
  const auto p = warped({1.0f, 4.0f, 3.0f, 3.0f, 0.0f}, {.top_k = 2});
  CHECK(p[0] == 0.0f);
  CHECK(p[4] == 0.0f);
  CHECK(p[1] > 0.0f);
  CHECK(p[2] > 0.0f);
  CHECK(p[3] == p[2]);  // tied with the 2nd largest: kept
  CHECK(sum(p) == Approx(1.0));
  const auto off = warped({1.0f, 4.0f, 3.0f}, {.top_k = 3});  // k >= vocab: off
  CHECK(off == warped({1.0f, 4.0f, 3.0f}, {}));
}

TEST_CASE("top_p keeps the smallest prefix reaching the mass, plus ties", "[unit][warp]") {
  // probabilities 0.5, 0.25, 0.125, 0.125 from log-probabilities
  const std::vector<float> logits{std::log(0.5f), std::log(0.25f), std::log(0.125f), std::log(0.125f)};
  const auto a = warped(logits, {.top_p = 0.5f});
  CHECK(a == std::vector<float>{1, 0, 0, 0});
  const auto b = warped(logits, {.top_p = 0.6f});
  CHECK(b[0] == Approx(2.0 / 3));
  CHECK(b[1] == Approx(1.0 / 3));
  CHECK(b[2] == 0.0f);
  const auto c = warped(logits, {.top_p = 0.8f});  // reaches 0.875 at token 2; token 3 ties: kept
  CHECK(c[2] == Approx(0.125));
  CHECK(c[3] == Approx(0.125));
}

TEST_CASE("top_p applies after temperature and top_k", "[unit][warp]") {
  std::vector<float> logits(200);
  for (std::size_t i = 0; i < logits.size(); ++i) logits[i] = -0.05f * static_cast<float>(i);
  const auto p = warped(logits, {.temperature = 0.7f, .top_k = 150, .top_p = 0.9f});
  CHECK(sum(p) == Approx(1.0));
  std::size_t kept = 0;
  for (std::size_t i = 0; i < p.size(); ++i) kept += p[i] > 0;
  CHECK(kept < 150);
  for (std::size_t i = 1; i < p.size(); ++i) CHECK(p[i] <= p[i - 1]);  // monotone logits stay monotone
  // The kept set is a prefix whose mass (before renormalisation) first reaches 0.9.
  const auto t = warped(logits, {.temperature = 0.7f, .top_k = 150});
  double mass_without_last = 0;
  for (std::size_t i = 0; i + 1 < kept; ++i) mass_without_last += t[i];
  CHECK(mass_without_last < 0.9);
  CHECK(mass_without_last + t[kept - 1] >= 0.9 - 1e-6);
}

TEST_CASE("warp treats -inf logits as masked tokens", "[unit][warp]") {
  const float ninf = -std::numeric_limits<float>::infinity();
  const auto p = warped({ninf, 0.0f, ninf, 0.0f}, {});
  CHECK(p == std::vector<float>{0, 0.5f, 0, 0.5f});
}

TEST_CASE("warp rejects bad logits and bad parameters with typed errors", "[unit][warp]") {
  const float nan = std::numeric_limits<float>::quiet_NaN();
  const float inf = std::numeric_limits<float>::infinity();
  std::vector<float> out(3);
  using specdec::InvalidArgumentError;
  using specdec::InvalidDistributionError;
  REQUIRE_THROWS_AS(specdec::warp(std::vector<float>{}, {}, std::span<float>{}), InvalidDistributionError);
  REQUIRE_THROWS_WITH(specdec::warp(std::vector<float>{0, nan, 0}, {}, out),
                      Catch::Contains("logit of token 1"));
  REQUIRE_THROWS_AS(specdec::warp(std::vector<float>{0, inf, 0}, {}, out), InvalidDistributionError);
  REQUIRE_THROWS_WITH(specdec::warp(std::vector<float>{-inf, -inf, -inf}, {}, out),
                      Catch::Contains("every logit is -inf"));
  REQUIRE_THROWS_AS(specdec::warp(std::vector<float>{0, 1}, {}, out), specdec::ShapeError);
  REQUIRE_THROWS_WITH(specdec::warp(std::vector<float>{0, 1, 2}, {.temperature = -1.0f}, out),
                      Catch::Contains("temperature"));
  REQUIRE_THROWS_WITH(specdec::warp(std::vector<float>{0, 1, 2}, {.top_k = -2}, out),
                      Catch::Contains("top_k"));
  REQUIRE_THROWS_WITH(specdec::warp(std::vector<float>{0, 1, 2}, {.top_p = 0.0f}, out),
                      Catch::Contains("top_p"));
  REQUIRE_THROWS_AS(specdec::warp(std::vector<float>{0, 1, 2}, {.top_p = 1.5f}, out),
                    InvalidArgumentError);
  REQUIRE_THROWS_AS(specdec::warp(std::vector<float>{0, 1, 2}, {.temperature = nan}, out),
                    InvalidArgumentError);
}

TEST_CASE("top_p that needs every surviving token keeps them all", "[unit][warp]") {
  // Regression: the nucleus reaching top_p exactly at the last candidate.
  const std::vector<float> logits{std::log(0.3f), std::log(0.3f), std::log(0.2f), std::log(0.2f), -30.0f};
  const auto p = warped(logits, {.top_k = 4, .top_p = 0.99f});
  CHECK(p[0] == Approx(0.3));
  CHECK(p[3] == Approx(0.2));
  CHECK(p[4] == 0.0f);
}

TEST_CASE("exp_nonpositive is within 2 ulp of exp and exact at the edges", "[unit][warp]") {
  double worst = 0.0;
  for (int k = 0; k <= 400000; ++k) {
    const float x = -87.0f * static_cast<float>(k) / 400000.0f;
    const double e = std::exp(static_cast<double>(x));
    worst = std::max(worst, std::abs(static_cast<double>(specdec::exp_nonpositive(x)) - e) / e);
  }
  CHECK(worst < 2.0 * 5.97e-8);  // 2 ulp of float
  CHECK(specdec::exp_nonpositive(0.0f) == 1.0f);
  CHECK(specdec::exp_nonpositive(-0.0f) == 1.0f);
  CHECK(specdec::exp_nonpositive(-std::numeric_limits<float>::infinity()) == 0.0f);
  CHECK(specdec::exp_nonpositive(-90.0f) == 0.0f);
  CHECK(specdec::exp_nonpositive(-87.0f) > 0.0f);
}
