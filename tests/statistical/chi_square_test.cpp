// The goodness-of-fit machinery the losslessness tests rest on.
#include <cstdint>
#include <vector>

#include "specdec/core/rng.hpp"
#include "support/catch.hpp"
#include "specdec/testing/chi_square.hpp"

using specdec::testing::chi_square_gof;
using specdec::testing::regularized_gamma_q;

TEST_CASE("Chi-square p-values match known quantiles", "[unit][statistics]") {
  // Upper-tail quantiles of the chi-square distribution (standard tables).
  CHECK(regularized_gamma_q(0.5, 0.5 * 3.841459) == Approx(0.05).epsilon(1e-5));   // df 1
  CHECK(regularized_gamma_q(1.0, 0.5 * 13.81551) == Approx(0.001).epsilon(1e-4));  // df 2
  CHECK(regularized_gamma_q(5.0, 0.5 * 18.30704) == Approx(0.05).epsilon(1e-5));   // df 10
  CHECK(regularized_gamma_q(17.5, 0.5 * 57.34207) == Approx(0.01).epsilon(1e-4));  // df 35
  CHECK(regularized_gamma_q(50.0, 0.5 * 149.4493) == Approx(0.001).epsilon(1e-3)); // df 100
  CHECK(regularized_gamma_q(2.0, 0.0) == 1.0);
}

TEST_CASE("Chi-square test accepts a fair sampler and rejects a biased one", "[unit][statistics]") {
  const std::vector<double> p{0.4, 0.3, 0.2, 0.1 - 1e-4, 1e-4};
  specdec::RandomStream rng(99);
  auto draw = [&](double bias) {
    std::vector<std::int64_t> counts(p.size(), 0);
    for (int i = 0; i < 200000; ++i) {
      double u = rng.uniform(), acc = 0;
      std::size_t k = 0;
      for (; k + 1 < p.size(); ++k) {
        acc += p[k] + (k == 0 ? bias : k == 1 ? -bias : 0.0);
        if (u < acc) break;
      }
      ++counts[k];
    }
    return counts;
  };
  const auto fair = chi_square_gof(draw(0.0), p);
  CHECK_FALSE(fair.rejects(1e-3));
  const auto biased = chi_square_gof(draw(0.01), p);  // 1% of mass moved
  CHECK(biased.rejects(1e-3));
  // An outcome of probability zero is caught even if the statistic is small.
  std::vector<std::int64_t> counts{4000, 3000, 2000, 1000, 0};
  counts.push_back(1);
  const auto impossible = chi_square_gof(counts, std::vector<double>{0.4, 0.3, 0.2, 0.1, 0.0, 0.0});
  CHECK(impossible.impossible == 1);
  CHECK(impossible.rejects(1e-3));
}
