// Speculative Verification's pieces on their own (arXiv 2509.24328): the
// indicators, equal-frequency binning and the acceptance table, the
// entropies, the latency profile's interpolation, and the goodput allocation.
#include <cmath>
#include <cstdint>
#include <vector>

#include "specdec/core/rng.hpp"
#include "specdec/select/acceptance_table.hpp"
#include "specdec/select/draft_indicators.hpp"
#include "specdec/select/goodput.hpp"
#include "specdec/select/verify_latency.hpp"
#include "support/catch.hpp"

namespace sd = specdec;
using Approx = Catch::Detail::Approx;

namespace {

// Lat(b, n) = base + per_token * n for every batch size, no fixed cost.
sd::VerifyLatency linear_latency(double base, double per_token, double fixed = 0.0) {
  const std::vector<std::int32_t> batches{1, 2, 4, 8}, tokens{1, 2, 4, 8};
  std::vector<double> seconds, fixeds;
  for (const auto b : batches) {
    for (const auto m : tokens) seconds.push_back(base + per_token * b * m);
    fixeds.push_back(fixed);
  }
  return sd::VerifyLatency(batches, tokens, seconds, fixeds);
}

}  // namespace

TEST_CASE("S is one minus the total variation and A the companion-side acceptance", "[select]") {
  const std::vector<float> d{0.5f, 0.3f, 0.2f, 0.0f}, c{0.25f, 0.25f, 0.25f, 0.25f};
  const auto at0 = sd::draft_indicators(d, c, 0);
  CHECK(at0.similarity == Approx(0.25 + 0.25 + 0.2));
  CHECK(at0.acceptance == Approx(0.5));
  CHECK(sd::draft_indicators(d, c, 2).acceptance == Approx(1.0));
  CHECK(sd::draft_indicators(d, d, 1).similarity == Approx(1.0));
  CHECK(sd::draft_indicators(d, c, 3).acceptance == 1.0f);  // q = 0 but the companion would draw it
  CHECK_THROWS_AS(sd::draft_indicators(d, std::vector<float>{1.0f}, 0), sd::ShapeError);
  CHECK_THROWS_AS(sd::draft_indicators(d, c, 4), sd::InvalidArgumentError);
}

TEST_CASE("Equal-frequency edges split at the quantiles and merge a point mass", "[select]") {
  std::vector<float> v;
  for (int i = 0; i < 100; ++i) v.push_back(float(i) / 100.0f);
  const auto e = sd::equal_frequency_edges(v, 4);
  REQUIRE(e.size() == 3);
  CHECK(e[0] == Approx(0.25));
  CHECK(e[1] == Approx(0.5));
  CHECK(e[2] == Approx(0.75));
  // Half the values at 1 (A's point mass): the bins above 0.5 collapse into one.
  std::vector<float> mass(50, 1.0f);
  for (int i = 0; i < 50; ++i) mass.push_back(float(i) / 50.0f);
  const auto m = sd::equal_frequency_edges(mass, 10);
  CHECK(m.size() == 5);
  for (std::size_t i = 1; i < m.size(); ++i) CHECK(m[i] > m[i - 1]);
  CHECK(sd::bin_of(m, 1.0f) == static_cast<std::int32_t>(m.size()));  // 1 is in the last bin
  CHECK(sd::bin_of(m, 0.99f) < static_cast<std::int32_t>(m.size()));
  // A point mass at the bottom shares the first bin instead of leaving it empty.
  std::vector<float> low(60, 0.0f);
  for (int i = 0; i < 40; ++i) low.push_back(0.5f + float(i) / 100.0f);
  const auto l = sd::equal_frequency_edges(low, 10);
  REQUIRE_FALSE(l.empty());
  CHECK(l.front() > 0.0f);
  CHECK(sd::bin_of(l, 0.0f) == 0);
  CHECK(sd::bin_of(l, 0.49f) == 0);
  CHECK_THROWS_AS(sd::equal_frequency_edges(v, 0), sd::InvalidArgumentError);
}

TEST_CASE("The acceptance table averages X per cell and fills empty cells from their S row", "[select]") {
  std::vector<sd::AcceptanceSample> samples;
  // X is 0.1 for the half of A below 0.4, 0.9 for the half above 0.6; S is
  // uninformative.
  sd::RandomStream rng(3, 0);
  for (int i = 0; i < 4000; ++i) {
    const auto s = static_cast<float>(rng.uniform()), u = static_cast<float>(rng.uniform());
    const bool low = i < 2000;
    samples.push_back({s, low ? 0.4f * u : 0.6f + 0.4f * u, low ? 0.1f : 0.9f});
  }
  const auto t = sd::AcceptanceTable::fit(samples, 4, 2);
  CHECK(t.s_bins() == 4);
  CHECK(t.a_bins() == 2);
  CHECK(t.lookup(0.3f, 0.2f) == Approx(0.1));
  CHECK(t.lookup(0.9f, 0.8f) == Approx(0.9));
  std::int64_t n = 0;
  for (const auto c : t.counts()) n += c;
  CHECK(n == 4000);
  const auto s_only = sd::AcceptanceTable::fit(samples, 4, 1);
  CHECK(s_only.similarity_only());
  CHECK(s_only.lookup(0.5f, 0.0f) == Approx(0.5).margin(0.05));

  // An empty cell (no sample with S high and A low) takes its S row's mean
  // (0.8), not the overall one (0.55).
  const std::vector<sd::AcceptanceSample> gap = {{0.1f, 0.1f, 0.2f}, {0.1f, 0.1f, 0.2f}, {0.1f, 0.9f, 0.4f},
                                                 {0.1f, 0.9f, 0.4f}, {0.9f, 0.9f, 0.8f}, {0.9f, 0.9f, 0.8f},
                                                 {0.9f, 0.9f, 0.8f}, {0.9f, 0.9f, 0.8f}};
  const auto g = sd::AcceptanceTable::fit(gap, 2, 2);
  REQUIRE(g.s_bins() == 2);
  REQUIRE(g.a_bins() == 2);
  CHECK(g.counts()[2] == 0);
  CHECK(g.lookup(0.9f, 0.1f) == Approx(0.8));
  CHECK(g.lookup(0.1f, 0.1f) == Approx(0.2));

  CHECK_THROWS_AS(sd::AcceptanceTable::fit({}, 4, 4), sd::InvalidArgumentError);
  const std::vector<sd::AcceptanceSample> bad = {{0.5f, 0.5f, 1.5f}};
  CHECK_THROWS_AS(sd::AcceptanceTable::fit(bad, 2, 2), sd::InvalidArgumentError);
  CHECK_THROWS_AS(sd::AcceptanceTable({0.5f, 0.4f}, {}, {0.f, 0.f, 0.f}, {0, 0, 0}), sd::InvalidArgumentError);
  CHECK_THROWS_AS(sd::AcceptanceTable({0.5f}, {}, {0.f}, {0}), sd::ShapeError);
  CHECK_THROWS_AS(sd::AcceptanceTable().lookup(0.5f, 0.5f), sd::InvalidArgumentError);
}

TEST_CASE("The entropies: an indicator that decides X removes all of H(X), a useless one none", "[select]") {
  std::vector<sd::AcceptanceSample> samples;
  sd::RandomStream rng(5, 0);
  for (int i = 0; i < 20000; ++i) {  // X is a function of A's bin; S is noise
    const auto s = static_cast<float>(rng.uniform()), u = static_cast<float>(rng.uniform());
    const bool low = i < 10000;
    samples.push_back({s, low ? 0.4f * u : 0.6f + 0.4f * u, low ? 0.05f : 0.95f});
  }
  const auto t = sd::AcceptanceTable::fit(samples, 4, 2);
  const auto e = sd::entropies(samples, t, 10);
  CHECK(e.h_x == Approx(1.0));  // two equally likely X bins
  CHECK(e.h_x_a == Approx(0.0).margin(1e-9));
  CHECK(e.h_x_sa == Approx(0.0).margin(1e-9));
  CHECK(e.h_x_s == Approx(1.0).margin(0.01));  // S says nothing
  CHECK(e.gain() == Approx(1.0).margin(0.01));
  CHECK_THROWS_AS(sd::entropies({}, t), sd::InvalidArgumentError);
}

TEST_CASE("The latency profile interpolates in tokens and batch size and extrapolates beyond", "[select]") {
  const auto lat = linear_latency(1.0, 0.5, 2.0);
  CHECK(lat.seconds(1, 1) == Approx(1.5));
  CHECK(lat.seconds(1, 3) == Approx(2.5));   // between 2 and 4 tokens
  CHECK(lat.seconds(4, 12) == Approx(7.0));  // 3 tokens per sequence
  CHECK(lat.seconds(3, 6) == Approx(4.0));   // between batch 2 and 4: both linear in n
  CHECK(lat.seconds(2, 32) == Approx(17.0)); // 16 per sequence: the last segment's slope
  CHECK(lat.seconds(16, 16) == Approx(2.0 * (1.0 + 0.5 * 8)));  // twice batch 8's time
  CHECK(lat.fixed_seconds(3) == Approx(2.0));
  CHECK_THROWS_AS(lat.seconds(0, 1), sd::InvalidArgumentError);
  CHECK_THROWS_AS(sd::VerifyLatency().seconds(1, 1), sd::InvalidArgumentError);
  CHECK_THROWS_AS(sd::VerifyLatency({2, 1}, {1}, {1.0, 1.0}, {0.0, 0.0}), sd::InvalidArgumentError);
  CHECK_THROWS_AS(sd::VerifyLatency({1}, {1, 2}, {1.0}, {0.0}), sd::ShapeError);
}

TEST_CASE("E[N | g] is the sum of prefix products of the acceptance estimates", "[select]") {
  const std::vector<float> p{0.9f, 0.5f, 0.2f};
  // By definition: sum_n n P(N = n), P(N = n) = (1 - p_{n+1}) prod_{i<=n} p_i, P(N = g) = prod p.
  for (std::size_t g = 0; g <= p.size(); ++g) {
    double e = 0.0, prefix = 1.0;
    for (std::size_t n = 0; n <= g; ++n) {
      const double pn = n < g ? prefix * (1.0 - p[n]) : prefix;
      e += double(n) * pn;
      if (n < g) prefix *= p[n];
    }
    CHECK(sd::expected_accepted(p, g) == Approx(e));
  }
}

TEST_CASE("One request: the goodput search verifies while (E[N] + 1) / Lat rises", "[select]") {
  // Lat(1, n) = 1 + 0.1 n: g = 0, 1, 2, 3 give 0.91, 1.58, 1.81, 1.71 tokens per second.
  const std::vector<std::vector<float>> p{{0.9f, 0.5f, 0.1f}};
  const auto a = sd::allocate_goodput(p, linear_latency(1.0, 0.1));
  REQUIRE(a.lengths.size() == 1);
  CHECK(a.lengths[0] == 2);
  CHECK(a.expected_tokens == Approx(1.0 + 0.9 + 0.45));
  CHECK(a.seconds == Approx(1.3));
  // A flat latency verifies everything; with a fixed cost even a steep one verifies more.
  CHECK(sd::allocate_goodput(p, linear_latency(1.0, 0.0)).lengths[0] == 3);
  CHECK(sd::allocate_goodput(p, linear_latency(0.0, 1.0)).lengths[0] == 0);
  CHECK(sd::allocate_goodput(p, linear_latency(0.0, 1.0), 0, /*fixed_seconds=*/10.0).lengths[0] >= 1);
  CHECK_THROWS_AS(sd::allocate_goodput(p, linear_latency(0.0, 1.0), 0, -1.0), sd::InvalidArgumentError);
  // min_verify is honoured, never beyond the drafts.
  CHECK(sd::allocate_goodput(p, linear_latency(0.0, 1.0), 2).lengths[0] == 2);
  CHECK(sd::allocate_goodput(p, linear_latency(0.0, 1.0), 9).lengths[0] == 3);
  CHECK_THROWS_AS(sd::allocate_goodput(p, linear_latency(0.0, 1.0), -1), sd::InvalidArgumentError);
}

TEST_CASE("A batch: tokens go to the request whose next one adds the most expected tokens", "[select]") {
  // Gains in order: r0 t1 0.9, r0 t2 0.81, r2 t1 0.6, r1 t1 0.3, r2 t2 0.3, r1 t2 0.27.
  const std::vector<std::vector<float>> p{{0.9f, 0.9f}, {0.3f, 0.9f}, {0.6f, 0.5f}, {}};
  // Lat(4, n) = 1 + 0.1 n: goodputs 2.86, 3.27, 3.57, 3.71, then 3.67 with
  // the 0.3 (r1 before r2 on the tie).
  const auto a = sd::allocate_goodput(p, linear_latency(1.0, 0.1));
  REQUIRE(a.lengths.size() == 4);
  CHECK(a.lengths[0] == 2);
  CHECK(a.lengths[1] == 0);
  CHECK(a.lengths[2] == 1);
  CHECK(a.lengths[3] == 0);  // nothing drafted: still emits its one token
  CHECK(a.expected_tokens == Approx(4.0 + 0.9 + 0.81 + 0.6));
  CHECK(a.seconds == Approx(1.7));
  CHECK(a.goodput() == Approx(6.31 / 1.7));
  // The stopping rule: a latency bump stops the search even where verifying
  // all three would pay (3.44 / 3.1 > 1 / 1); it never looks past the drop.
  const std::vector<std::vector<float>> p3{{0.9f, 0.9f, 0.9f}};
  const sd::VerifyLatency bump({1}, {1, 2, 4}, {1.0, 3.0, 3.1}, {0.0});
  CHECK(sd::allocate_goodput(p3, bump).lengths[0] == 0);
}

TEST_CASE("Later estimates: a taken token's after-estimate, not its own, scales the next tokens' gains",
          "[select]") {
  // Lat(1, n) = 1 + 0.1 n. Alone, p verifies all three (gains 0.5, 0.45,
  // 0.405). With after, token 1 still gains 0.5, but tokens 2 and 3 gain
  // 0.05 * 0.9 and 0.05 * 0.81: (1.5 + 0.045) / 1.3 < 1.5 / 1.2 stops at 1.
  const std::vector<std::vector<float>> p{{0.5f, 0.9f, 0.9f}};
  const std::vector<std::vector<float>> after{{0.05f, 0.9f, 0.9f}};
  CHECK(sd::allocate_goodput(p, linear_latency(1.0, 0.1)).lengths[0] == 3);
  const auto a = sd::allocate_goodput(p, linear_latency(1.0, 0.1), 0, 0.0, after);
  CHECK(a.lengths[0] == 1);
  CHECK(a.expected_tokens == Approx(1.5));
  // A high after-estimate lets the later tokens in where p alone would not.
  const std::vector<std::vector<float>> low{{0.5f, 0.3f, 0.3f}}, high{{0.99f, 0.99f, 0.99f}};
  CHECK(sd::allocate_goodput(low, linear_latency(1.0, 0.3)).lengths[0] == 1);
  CHECK(sd::allocate_goodput(low, linear_latency(1.0, 0.3), 0, 0.0, high).lengths[0] == 3);
  // after shaped as p, or refused.
  const std::vector<std::vector<float>> short_after{{0.5f, 0.9f}}, two{{0.5f}, {0.5f}};
  CHECK_THROWS_AS(sd::allocate_goodput(p, linear_latency(1.0, 0.1), 0, 0.0, short_after), sd::ShapeError);
  CHECK_THROWS_AS(sd::allocate_goodput(p, linear_latency(1.0, 0.1), 0, 0.0, two), sd::ShapeError);
}
