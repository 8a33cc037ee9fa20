// Validation of probability rows. Every rule checks the rows it reads, so a
// NaN from a broken model or a row of the wrong size is reported, not sampled.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <span>
#include <string_view>

#include <fmt/format.h>

#include "specdec/core/error.hpp"
#include "specdec/core/row_kernels.hpp"

namespace specdec {

// A float32 softmax over 128k entries sums to 1 within ~1e-5; rows that come
// through f16 within ~1e-3. Anything further off is not a distribution.
inline constexpr double kDistributionSumTolerance = 1e-3;

// Throws InvalidDistributionError unless `row` is non-empty, finite,
// non-negative and sums to 1 within kDistributionSumTolerance; returns the sum
// (in double) so callers that need the exact mass do not sum twice. `what`
// names the row in the message ("target row 3").
inline double check_distribution(std::span<const float> row, std::string_view what) {
  if (row.empty()) throw InvalidDistributionError(fmt::format("{}: empty distribution", what));
  // One branch-free pass with independent accumulators (rules call this on
  // every row they read, so it must run at memory speed;
  // row_kernels::distribution_scan).
  const std::size_t n = row.size();
  const auto scan = row_kernels::distribution_scan(row.data(), static_cast<std::int64_t>(n));
  const double total = scan.sum;
  const bool finite = scan.finite, negative = scan.negative;
  if (!finite || negative) {  // slow path: name the first offending token
    for (std::size_t i = 0; i < n; ++i) {
      if (!std::isfinite(row[i]))
        throw InvalidDistributionError(
            fmt::format("{}: probability of token {} is not finite ({})", what, i, row[i]));
      if (row[i] < 0.0f)
        throw InvalidDistributionError(
            fmt::format("{}: probability of token {} is negative ({})", what, i, row[i]));
    }
  }
  if (std::fabs(total - 1.0) > kDistributionSumTolerance)
    throw InvalidDistributionError(fmt::format("{}: probabilities sum to {}, expected 1 (tolerance {})", what,
                                               total, kDistributionSumTolerance));
  return total;
}

// Throws ShapeError unless `row` has `vocab` entries.
inline void check_vocab(std::span<const float> row, std::int64_t vocab, std::string_view what) {
  if (static_cast<std::int64_t>(row.size()) != vocab)
    throw ShapeError(
        fmt::format("{}: has {} entries, expected the vocabulary size {}", what, row.size(), vocab));
}

}  // namespace specdec
