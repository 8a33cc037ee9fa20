// Speculative Verification's profiled acceptance table (Kim et al., arXiv
// 2509.24328, §4.2): for every drafted token of a profiling run, (S, A, X)
// with S, A the draft indicators (select/draft_indicators.hpp) and X the
// probability that the target's rule accepts the token; S and A are binned
// with equal-frequency (adaptive) bins, and each cell holds the mean X of its
// samples. At run time p = table(S, A) is one lookup.
//
// A table with one A bin is the similarity-only table (S alone), the one
// that may steer the verification of sampled drafts (docs/acceptance.md).
//
// entropies() reports the paper's Table 2 figures for a sample: H(X),
// H(X|S), H(X|A), H(X|S,A), with X quantised into equal-width bins.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <span>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "specdec/core/error.hpp"

namespace specdec {

struct AcceptanceSample {
  float s = 0.0f;  // S, draft/companion similarity
  float a = 0.0f;  // A, companion-side acceptance of the drafted token
  float x = 0.0f;  // the target rule's acceptance probability of the token
};

// Equal-frequency bin edges of `values` into at most `bins` bins: the inner
// edges at the quantiles k / bins, repeated edges merged (a point mass at
// the top, such as A = 1, gets a bin of its own instead of several empty
// ones; one at the bottom shares the first bin). A value v falls in bin
// upper_bound(edges, v).
inline std::vector<float> equal_frequency_edges(std::vector<float> values, std::int32_t bins) {
  if (bins < 1) throw InvalidArgumentError(fmt::format("equal_frequency_edges: {} bins (need >= 1)", bins));
  std::vector<float> edges;
  if (values.empty()) return edges;
  std::sort(values.begin(), values.end());
  for (std::int32_t k = 1; k < bins; ++k) {
    const auto at = static_cast<std::size_t>(static_cast<double>(k) * static_cast<double>(values.size()) / bins);
    const float e = values[std::min(at, values.size() - 1)];
    if (e > values.front() && (edges.empty() || e > edges.back())) edges.push_back(e);  // bin 0 never empty
  }
  return edges;
}

inline std::int32_t bin_of(std::span<const float> edges, float v) {
  return static_cast<std::int32_t>(std::upper_bound(edges.begin(), edges.end(), v) - edges.begin());
}

class AcceptanceTable {
 public:
  AcceptanceTable() = default;
  // s_edges, a_edges: strictly increasing inner edges; mean, counts:
  // [s bins][a bins] row-major, mean in [0, 1].
  AcceptanceTable(std::vector<float> s_edges, std::vector<float> a_edges, std::vector<float> mean,
                  std::vector<std::int64_t> counts)
      : s_edges_(std::move(s_edges)), a_edges_(std::move(a_edges)), mean_(std::move(mean)), counts_(std::move(counts)) {
    check_edges(s_edges_, "S");
    check_edges(a_edges_, "A");
    const auto cells = static_cast<std::size_t>(s_bins()) * static_cast<std::size_t>(a_bins());
    if (mean_.size() != cells || counts_.size() != cells)
      throw ShapeError(fmt::format("AcceptanceTable: {} x {} bins need {} cells, got {} means and {} counts",
                                   s_bins(), a_bins(), cells, mean_.size(), counts_.size()));
    for (const float m : mean_)
      if (!(m >= 0.0f && m <= 1.0f))
        throw InvalidArgumentError(fmt::format("AcceptanceTable: a cell's mean acceptance {} is not in [0, 1]", m));
  }

  // Bins the samples (s_bins bins for S, a_bins for A; a_bins 1 gives the
  // similarity-only table) and averages X per cell. A cell no sample fell in
  // takes the mean of its S row, or else the overall mean.
  static AcceptanceTable fit(std::span<const AcceptanceSample> samples, std::int32_t s_bins, std::int32_t a_bins) {
    if (samples.empty()) throw InvalidArgumentError("AcceptanceTable::fit: no samples");
    std::vector<float> s, a;
    for (const auto& x : samples) {
      check_sample(x);
      s.push_back(x.s);
      a.push_back(x.a);
    }
    auto s_edges = equal_frequency_edges(std::move(s), s_bins);
    auto a_edges = equal_frequency_edges(std::move(a), a_bins);
    const auto ns = static_cast<std::size_t>(s_edges.size() + 1), na = static_cast<std::size_t>(a_edges.size() + 1);
    std::vector<double> sum(ns * na, 0.0);
    std::vector<std::int64_t> counts(ns * na, 0);
    double total = 0.0;
    for (const auto& x : samples) {
      const auto cell = static_cast<std::size_t>(bin_of(s_edges, x.s)) * na + static_cast<std::size_t>(bin_of(a_edges, x.a));
      sum[cell] += x.x;
      ++counts[cell];
      total += x.x;
    }
    const double overall = total / static_cast<double>(samples.size());
    std::vector<float> mean(ns * na);
    for (std::size_t i = 0; i < ns; ++i) {
      double row_sum = 0.0;
      std::int64_t row_count = 0;
      for (std::size_t j = 0; j < na; ++j) row_sum += sum[i * na + j], row_count += counts[i * na + j];
      const double fallback = row_count ? row_sum / static_cast<double>(row_count) : overall;
      for (std::size_t j = 0; j < na; ++j) {
        const auto c = i * na + j;
        mean[c] = static_cast<float>(counts[c] ? sum[c] / static_cast<double>(counts[c]) : fallback);
      }
    }
    return AcceptanceTable(std::move(s_edges), std::move(a_edges), std::move(mean), std::move(counts));
  }

  // p = P(accepted | S, A), the mean X of the cell.
  float lookup(float s, float a) const {
    if (mean_.empty()) throw InvalidArgumentError("AcceptanceTable: the table is empty (fit or load one)");
    return mean_[cell(s, a)];
  }
  std::size_t cell(float s, float a) const {
    return static_cast<std::size_t>(bin_of(s_edges_, s)) * static_cast<std::size_t>(a_bins()) +
           static_cast<std::size_t>(bin_of(a_edges_, a));
  }

  bool empty() const { return mean_.empty(); }
  std::int32_t s_bins() const { return static_cast<std::int32_t>(s_edges_.size()) + 1; }
  std::int32_t a_bins() const { return static_cast<std::int32_t>(a_edges_.size()) + 1; }
  // One A bin: the table reads S only.
  bool similarity_only() const { return a_edges_.empty(); }
  const std::vector<float>& s_edges() const { return s_edges_; }
  const std::vector<float>& a_edges() const { return a_edges_; }
  const std::vector<float>& mean() const { return mean_; }
  const std::vector<std::int64_t>& counts() const { return counts_; }

 private:
  static void check_edges(const std::vector<float>& e, const char* which) {
    for (std::size_t i = 0; i < e.size(); ++i)
      if (!std::isfinite(e[i]) || (i > 0 && !(e[i] > e[i - 1])))
        throw InvalidArgumentError(
            fmt::format("AcceptanceTable: the {} bin edges are not finite and strictly increasing (edge {})", which, i));
  }
  static void check_sample(const AcceptanceSample& x) {
    for (const float v : {x.s, x.a, x.x})
      if (!(v >= 0.0f && v <= 1.0f))
        throw InvalidArgumentError(
            fmt::format("AcceptanceTable::fit: a sample (S {}, A {}, X {}) is outside [0, 1]", x.s, x.a, x.x));
  }

  std::vector<float> s_edges_, a_edges_;
  std::vector<float> mean_;
  std::vector<std::int64_t> counts_;
};

// The conditional entropies of Table 2 (arXiv 2509.24328), in bits, of X
// quantised into `x_bins` equal-width bins ([0, 1/x_bins), ..., with 1 in the
// last), given the table's S and A bins.
struct AcceptanceEntropies {
  double h_x = 0.0, h_x_s = 0.0, h_x_a = 0.0, h_x_sa = 0.0;
  double gain() const { return h_x - h_x_sa; }  // the information gain of (S, A)
};

inline AcceptanceEntropies entropies(std::span<const AcceptanceSample> samples, const AcceptanceTable& table,
                                     std::int32_t x_bins = 10) {
  if (samples.empty()) throw InvalidArgumentError("entropies: no samples");
  if (x_bins < 2) throw InvalidArgumentError(fmt::format("entropies: {} X bins (need >= 2)", x_bins));
  const auto xb = static_cast<std::size_t>(x_bins);
  const auto ns = static_cast<std::size_t>(table.s_bins()), na = static_cast<std::size_t>(table.a_bins());
  // joint counts [condition][x bin] for the four conditionings
  auto conditional = [&](std::size_t conditions, auto condition_of) {
    std::vector<double> joint(conditions * xb, 0.0);
    for (const auto& x : samples) {
      const auto bx = std::min(xb - 1, static_cast<std::size_t>(x.x * static_cast<float>(x_bins)));
      joint[condition_of(x) * xb + bx] += 1.0;
    }
    const double n = static_cast<double>(samples.size());
    double h = 0.0;
    for (std::size_t c = 0; c < conditions; ++c) {
      double row = 0.0;
      for (std::size_t b = 0; b < xb; ++b) row += joint[c * xb + b];
      for (std::size_t b = 0; b < xb; ++b)
        if (const double v = joint[c * xb + b]; v > 0) h -= v / n * std::log2(v / row);
    }
    return h;
  };
  const auto& se = table.s_edges();
  const auto& ae = table.a_edges();
  AcceptanceEntropies e;
  e.h_x = conditional(1, [](const AcceptanceSample&) { return std::size_t{0}; });
  e.h_x_s = conditional(ns, [&](const AcceptanceSample& x) { return static_cast<std::size_t>(bin_of(se, x.s)); });
  e.h_x_a = conditional(na, [&](const AcceptanceSample& x) { return static_cast<std::size_t>(bin_of(ae, x.a)); });
  e.h_x_sa = conditional(ns * na, [&](const AcceptanceSample& x) { return table.cell(x.s, x.a); });
  return e;
}

}  // namespace specdec
