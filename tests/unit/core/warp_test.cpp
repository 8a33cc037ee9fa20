#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <random>
#include <limits>
#include <numeric>
#include <vector>

#include "specdec/core/bitexact.hpp"
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

namespace {

// The warp without its bucketed selections: top-k by std::nth_element over
// every logit, top-p by a partial sort of every positive token grown by
// doubling, summing fixed-point masses in sorted order. The reference the
// bucketed selection must match bit for bit.
std::vector<float> sorting_warp(const std::vector<float>& logits, const SamplingParams& params) {
  const std::size_t vocab = logits.size();
  std::vector<float> probs(vocab);
  const float max_logit = *std::max_element(logits.begin(), logits.end());
  float threshold = -std::numeric_limits<float>::infinity();
  if (params.top_k > 0 && static_cast<std::size_t>(params.top_k) < vocab) {
    std::vector<float> values(logits);
    const auto kth = values.begin() + (params.top_k - 1);
    std::nth_element(values.begin(), kth, values.end(), std::greater<float>());
    threshold = *kth;
  }
  // The softmax chunk by chunk (bitexact.hpp): exponents against each chunk's
  // largest logit, chunk sums weighted by e^((m_c - M) / T), then scaled.
  const float inv_t = 1.0f / params.temperature;
  constexpr std::size_t kChunk = 8192;
  std::vector<float> scale;
  double z = 0.0;
  for (std::size_t c = 0; c < vocab; c += kChunk) {
    const std::size_t end = std::min(vocab, c + kChunk);
    const float m = *std::max_element(logits.begin() + static_cast<std::ptrdiff_t>(c),
                                      logits.begin() + static_cast<std::ptrdiff_t>(end));
    for (std::size_t i = c; i < end; ++i)
      probs[i] = std::isinf(m) || logits[i] < threshold ? 0.0f : specdec::exp_nonpositive((logits[i] - m) * inv_t);
    const double s = specdec::bitexact::lane_sum(probs.data() + c, static_cast<std::int64_t>(end - c));
    scale.push_back(std::isinf(m) ? 0.0f : specdec::exp_nonpositive((m - max_logit) * inv_t));
    z += s * static_cast<double>(scale.back());
  }
  for (std::size_t i = 0; i < vocab; ++i) probs[i] *= static_cast<float>(static_cast<double>(scale[i / kChunk]) / z);
  const auto normalize = [&](double total) {
    const float inv = static_cast<float>(1.0 / total);
    for (float& p : probs) p *= inv;
  };
  if (params.top_p >= 1.0f) return probs;
  std::vector<specdec::TokenId> order;
  for (std::size_t t = 0; t < vocab; ++t)
    if (probs[t] > 0.0f) order.push_back(static_cast<specdec::TokenId>(t));
  const auto by_prob = [&](specdec::TokenId a, specdec::TokenId b) {
    return probs[a] > probs[b] || (probs[a] == probs[b] && a < b);
  };
  // Masses in fixed point (exact in any order), as the warp defines them.
  const std::uint64_t target = specdec::bitexact::fixed_mass(params.top_p);
  std::size_t sorted = 0, cut = 0;
  std::uint64_t mass = 0;
  for (std::size_t want = 64; cut == 0 && sorted < order.size(); want *= 2) {
    const std::size_t upto = std::min(want, order.size());
    std::partial_sort(order.begin() + static_cast<std::ptrdiff_t>(sorted),
                      order.begin() + static_cast<std::ptrdiff_t>(upto), order.end(), by_prob);
    for (; sorted < upto && cut == 0; ++sorted) {
      mass += specdec::bitexact::fixed_mass(probs[order[sorted]]);
      if (mass >= target) cut = sorted + 1;
    }
  }
  if (cut == 0 || cut == order.size()) return probs;
  const float last = probs[order[cut - 1]];
  std::uint64_t kept = 0;
  for (float& p : probs) {
    if (p < last) p = 0.0f;
    kept += specdec::bitexact::fixed_mass(p);
  }
  if (std::count_if(order.begin(), order.end(), [&](specdec::TokenId t) { return probs[t] == 0.0f; }) == 0)
    return probs;  // every positive token ties with the last admitted one
  normalize(static_cast<double>(kept) * 0x1p-60);
  return probs;
}

}  // namespace

TEST_CASE("top-k and top-p select exactly what sorting the whole vocabulary selects", "[unit][warp]") {
  // Random rows of many shapes: peaked and flat, integer logits (ties
  // everywhere, also at the boundaries), masked tokens, tiny and large
  // vocabularies, every kind of setting.
  std::mt19937 gen(23);
  specdec::Warper warp;
  int cut_by_top_p = 0;
  for (int trial = 0; trial < 3000; ++trial) {
    const std::size_t vocab = std::vector<std::size_t>{2, 5, 64, 1000, 8192, 32000, 40000}[static_cast<std::size_t>(trial % 7)];
    std::vector<float> logits(vocab);
    const int shape = static_cast<int>(gen() % 4);
    std::normal_distribution<float> normal(0.0f, shape == 0 ? 0.3f : shape == 1 ? 3.0f : 8.0f);
    for (auto& l : logits) l = shape == 3 ? static_cast<float>(gen() % 7) : normal(gen);
    if (gen() % 3 == 0)
      for (std::size_t m = 0; m < vocab / 4; ++m) logits[gen() % vocab] = -std::numeric_limits<float>::infinity();
    if (vocab > 8192 && gen() % 4 == 0)  // a chunk of the softmax with no finite logit
      std::fill(logits.begin() + 8192, logits.begin() + 16384, -std::numeric_limits<float>::infinity());
    if (std::all_of(logits.begin(), logits.end(), [](float l) { return std::isinf(l); })) logits[0] = 0.0f;
    SamplingParams p;
    p.temperature = std::vector<float>{0.3f, 0.8f, 1.0f, 2.5f}[gen() % 4];
    p.top_k = gen() % 2 == 0 ? 0 : static_cast<std::int32_t>(1 + gen() % (vocab + 2));
    p.top_p = gen() % 4 == 0 ? 1.0f : std::vector<float>{0.05f, 0.5f, 0.9f, 0.95f, 0.999f}[gen() % 5];
    std::vector<float> got(vocab);
    warp(logits, p, got);
    const auto want = sorting_warp(logits, p);
    INFO("trial " << trial << ", vocab " << vocab << ", T " << p.temperature << ", top_k " << p.top_k << ", top_p "
                  << p.top_p);
    REQUIRE(std::memcmp(got.data(), want.data(), vocab * sizeof(float)) == 0);
    cut_by_top_p += p.top_p < 1.0f && p.top_k == 0 && std::count(got.begin(), got.end(), 0.0f) >
                                          std::count_if(logits.begin(), logits.end(), [](float l) { return std::isinf(l); });
  }
  CHECK(cut_by_top_p > 300);  // the nucleus alone really cut tokens, often
}
