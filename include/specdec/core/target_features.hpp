// The target's hidden states of the tokens it last committed: what
// feature-level drafters (EAGLE, Lyanna) condition on (Lyanna §4.1: h_0 is
// the target's last hidden state). A verifier writes them (the prompt prefix
// at begin, then the root and the accepted path at every commit); the drafter
// reads them in its own begin / commit, right after. Row i is the state of
// the i-th committed token, the one *before* the i-th token the drafter is
// handed, so row i pairs with token i in fuse(h, E(t)).
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include <fmt/format.h>

#include "specdec/core/error.hpp"

namespace specdec {

class TargetFeatures {
 public:
  void clear() { rows_ = 0; data_.clear(); }
  // Replaces the rows with `n` rows of `dim` floats.
  void assign(const float* rows, std::int64_t n, std::int64_t dim) {
    if (n < 0 || dim <= 0) throw ShapeError(fmt::format("TargetFeatures: {} rows of width {}", n, dim));
    data_.assign(rows, rows + n * dim);
    rows_ = n;
    dim_ = dim;
  }
  // Appends one row (widths must agree).
  void append(std::span<const float> row) {
    if (rows_ > 0 && static_cast<std::int64_t>(row.size()) != dim_)
      throw ShapeError(fmt::format("TargetFeatures: a row of {} floats after rows of {}", row.size(), dim_));
    dim_ = static_cast<std::int64_t>(row.size());
    data_.insert(data_.end(), row.begin(), row.end());
    ++rows_;
  }
  std::int64_t rows() const { return rows_; }
  std::int64_t dim() const { return dim_; }
  std::span<const float> all() const { return data_; }

 private:
  std::vector<float> data_;
  std::int64_t rows_ = 0, dim_ = 0;
};

}  // namespace specdec
