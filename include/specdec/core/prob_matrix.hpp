// Row-major matrices of probability distributions: `ProbRows` is the
// non-owning view every rule reads, `ProbMatrix` the owning buffer drafters and
// verifiers fill. Row r of a [rows, vocab] matrix is one distribution.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include <fmt/format.h>

#include "specdec/core/error.hpp"

namespace specdec {

class ProbRows {
 public:
  ProbRows() = default;
  // data: [num_rows, vocab] with rows `row_stride` floats apart.
  ProbRows(const float* data, std::int64_t num_rows, std::int64_t vocab, std::int64_t row_stride)
      : data_(data), num_rows_(num_rows), vocab_(vocab), row_stride_(row_stride) {
    if (num_rows < 0 || vocab < 0 || row_stride < vocab)
      throw ShapeError(fmt::format(
          "ProbRows: need num_rows >= 0, vocab >= 0 and row_stride >= vocab, got {}, {}, {}",
          num_rows, vocab, row_stride));
    if (data == nullptr && num_rows > 0 && vocab > 0)
      throw ShapeError("ProbRows: null data for a non-empty matrix");
  }
  ProbRows(const float* data, std::int64_t num_rows, std::int64_t vocab)
      : ProbRows(data, num_rows, vocab, vocab) {}

  std::int64_t num_rows() const { return num_rows_; }
  std::int64_t vocab() const { return vocab_; }
  std::int64_t row_stride() const { return row_stride_; }
  const float* data() const { return data_; }

  // Row r; throws ShapeError when r is out of range (rules index rows by tree
  // slot, so a short matrix is a caller mistake worth naming).
  std::span<const float> row(std::int64_t r) const {
    if (r < 0 || r >= num_rows_)
      throw ShapeError(fmt::format("ProbRows: row {} requested from a matrix of {} rows", r,
                                   num_rows_));
    return {data_ + r * row_stride_, static_cast<std::size_t>(vocab_)};
  }

 private:
  const float* data_ = nullptr;
  std::int64_t num_rows_ = 0;
  std::int64_t vocab_ = 0;
  std::int64_t row_stride_ = 0;
};

class ProbMatrix {
 public:
  ProbMatrix() = default;
  ProbMatrix(std::int64_t num_rows, std::int64_t vocab) { resize(num_rows, vocab); }

  // Keeps capacity, so a matrix reused across rounds allocates once.
  void resize(std::int64_t num_rows, std::int64_t vocab) {
    if (num_rows < 0 || vocab < 0)
      throw ShapeError(fmt::format("ProbMatrix: negative shape [{}, {}]", num_rows, vocab));
    num_rows_ = num_rows;
    vocab_ = vocab;
    data_.assign(static_cast<std::size_t>(num_rows * vocab), 0.0f);
  }
  // Appends a zeroed row and returns it for the caller to fill. A matrix
  // without a vocabulary (default-constructed, or resized to vocab 0) has no
  // row to give: ShapeError, not a 0-wide row.
  std::span<float> append_row() {
    if (vocab_ == 0)
      throw ShapeError("ProbMatrix::append_row: the matrix has no vocabulary (resize(0, vocab) first)");
    data_.resize(data_.size() + static_cast<std::size_t>(vocab_), 0.0f);
    ++num_rows_;
    return row(num_rows_ - 1);
  }
  void clear() {
    num_rows_ = 0;
    data_.clear();
  }
  // Copies `rows` (row-contiguous here whatever their stride).
  void assign(const ProbRows& rows) {
    resize(0, rows.vocab());
    data_.reserve(static_cast<std::size_t>(rows.num_rows() * rows.vocab()));
    for (std::int64_t r = 0; r < rows.num_rows(); ++r) {
      const auto from = rows.row(r);
      data_.insert(data_.end(), from.begin(), from.end());
    }
    num_rows_ = rows.num_rows();
  }

  std::int64_t num_rows() const { return num_rows_; }
  std::int64_t vocab() const { return vocab_; }
  std::span<float> row(std::int64_t r) {
    if (r < 0 || r >= num_rows_)
      throw ShapeError(fmt::format("ProbMatrix: row {} requested from a matrix of {} rows", r, num_rows_));
    return {data_.data() + r * vocab_, static_cast<std::size_t>(vocab_)};
  }
  std::span<const float> row(std::int64_t r) const { return view().row(r); }
  ProbRows view() const { return {data_.data(), num_rows_, vocab_, vocab_}; }

 private:
  std::vector<float> data_;
  std::int64_t num_rows_ = 0;
  std::int64_t vocab_ = 0;
};

// What a Drafter does with the rows a builder hands it before appending: an
// empty matrix of any vocabulary is reset to [0, vocab]; rows of another
// vocabulary are a ShapeError naming `who`.
inline void expect_draft_vocab(ProbMatrix& rows, std::int64_t vocab, const char* who) {
  if (rows.vocab() == vocab) return;
  if (rows.num_rows() != 0)
    throw ShapeError(fmt::format("{}: rows hold vocabulary {}, the drafter's is {}", who, rows.vocab(), vocab));
  rows.resize(0, vocab);
}

}  // namespace specdec
