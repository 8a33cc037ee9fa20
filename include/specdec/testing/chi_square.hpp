// Pearson's chi-square goodness-of-fit test: what specdec's statistical tests
// of the lossless rules use, public so that a rule or composition of one's
// own can be tested the same way (Python: specdec.testing, docs/python.md).
// Written from the textbook definitions: the p-value is the regularized upper
// incomplete gamma function Q(df / 2, statistic / 2).
#pragma once

#include <cmath>
#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include "specdec/core/error.hpp"

namespace specdec::testing {

// Q(a, x) = Gamma(a, x) / Gamma(a): a power series below a + 1, a continued
// fraction (modified Lentz) above.
inline double regularized_gamma_q(double a, double x) {
  if (x <= 0.0) return 1.0;
  const double log_prefix = -x + a * std::log(x) - std::lgamma(a);
  if (x < a + 1.0) {
    double term = 1.0 / a, sum = term;
    for (int n = 1; n < 10000; ++n) {
      term *= x / (a + n);
      sum += term;
      if (std::fabs(term) < std::fabs(sum) * 1e-16) break;
    }
    return 1.0 - sum * std::exp(log_prefix);
  }
  const double tiny = 1e-300;
  double b = x + 1.0 - a, c = 1.0 / tiny, d = 1.0 / b, h = d;
  for (int i = 1; i < 10000; ++i) {
    const double an = -i * (i - a);
    b += 2.0;
    d = an * d + b;
    if (std::fabs(d) < tiny) d = tiny;
    c = b + an / c;
    if (std::fabs(c) < tiny) c = tiny;
    d = 1.0 / d;
    const double delta = d * c;
    h *= delta;
    if (std::fabs(delta - 1.0) < 1e-16) break;
  }
  return std::exp(log_prefix) * h;
}

struct ChiSquareResult {
  double statistic = 0.0;
  int degrees_of_freedom = 0;
  double p_value = 1.0;
  // Observations in a bin the expected distribution gives probability 0: the
  // sample is impossible under it, whatever the statistic says.
  std::int64_t impossible = 0;
  std::string describe() const {
    return "chi2 = " + std::to_string(statistic) + ", df = " + std::to_string(degrees_of_freedom) +
           ", p = " + std::to_string(p_value) + ", impossible outcomes = " + std::to_string(impossible);
  }
  bool rejects(double alpha) const { return impossible > 0 || p_value < alpha; }
};

// Goodness of fit of `observed` counts to probabilities `expected`. Bins whose
// expected count is below 5 are pooled into one bin (the usual validity rule),
// so near-zero probabilities are still tested in aggregate.
inline ChiSquareResult chi_square_gof(std::span<const std::int64_t> observed, std::span<const double> expected) {
  if (observed.size() != expected.size())
    throw ShapeError("chi_square_gof: " + std::to_string(observed.size()) + " observed counts, " +
                     std::to_string(expected.size()) + " expected probabilities");
  std::int64_t n = 0;
  for (auto o : observed) n += o;
  ChiSquareResult r;
  double pooled_obs = 0.0, pooled_exp = 0.0;
  int bins = 0;
  for (std::size_t i = 0; i < observed.size(); ++i) {
    const double e = expected[i] * static_cast<double>(n);
    if (expected[i] <= 0.0) {
      r.impossible += observed[i];
      continue;
    }
    if (e < 5.0) {
      pooled_obs += static_cast<double>(observed[i]);
      pooled_exp += e;
      continue;
    }
    const double d = static_cast<double>(observed[i]) - e;
    r.statistic += d * d / e;
    ++bins;
  }
  if (pooled_exp > 0.0) {
    const double d = pooled_obs - pooled_exp;
    r.statistic += d * d / pooled_exp;
    ++bins;
  }
  r.degrees_of_freedom = bins - 1;
  r.p_value = r.degrees_of_freedom > 0 ? regularized_gamma_q(0.5 * r.degrees_of_freedom, 0.5 * r.statistic) : 1.0;
  return r;
}

}  // namespace specdec::testing
