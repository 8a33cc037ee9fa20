// Validation of probability rows. Every rule checks the rows it reads, so a
// NaN from a broken model or a row of the wrong size is reported, not sampled.
#pragma once

#include <cmath>
#include <cstdint>
#include <span>
#include <string_view>

#include <fmt/format.h>

#include "specdec/core/error.hpp"

namespace specdec {

// A float32 softmax over 128k entries sums to 1 within ~1e-5; rows that come
// through f16 within ~1e-3. Anything further off is not a distribution.
inline constexpr double kDistributionSumTolerance = 1e-3;

// Throws InvalidDistributionError unless `row` is non-empty, finite,
// non-negative and sums to 1 within kDistributionSumTolerance. `what` names the
// row in the message ("target row 3").
inline void check_distribution(std::span<const float> row, std::string_view what) {
  if (row.empty()) throw InvalidDistributionError(fmt::format("{}: empty distribution", what));
  double sum = 0.0;
  for (std::size_t i = 0; i < row.size(); ++i) {
    const float v = row[i];
    if (!std::isfinite(v))
      throw InvalidDistributionError(
          fmt::format("{}: probability of token {} is not finite ({})", what, i, v));
    if (v < 0.0f)
      throw InvalidDistributionError(
          fmt::format("{}: probability of token {} is negative ({})", what, i, v));
    sum += v;
  }
  if (std::fabs(sum - 1.0) > kDistributionSumTolerance)
    throw InvalidDistributionError(
        fmt::format("{}: probabilities sum to {}, expected 1 (tolerance {})", what, sum,
                    kDistributionSumTolerance));
}

// Throws ShapeError unless `row` has `vocab` entries.
inline void check_vocab(std::span<const float> row, std::int64_t vocab, std::string_view what) {
  if (static_cast<std::int64_t>(row.size()) != vocab)
    throw ShapeError(
        fmt::format("{}: has {} entries, expected the vocabulary size {}", what, row.size(), vocab));
}

}  // namespace specdec
