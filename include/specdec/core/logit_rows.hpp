// The host side of Model outputs (core/round.hpp): a buffer a caller hands to
// Model::forward, the check a model makes before writing into one, and the
// check a caller makes before reading the rows back.
#pragma once

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <new>
#include <span>
#include <string_view>

#include <fmt/format.h>

#include "specdec/core/error.hpp"
#include "specdec/core/prob_matrix.hpp"
#include "specdec/core/tensor_view.hpp"

namespace specdec {

// A growable host float32 [rows, width] buffer, owned by whoever calls
// forward (a verifier, a drafter), so no two callers share one. 64-byte
// aligned, as GEMM libraries prefer their destination (oneDNN, MKL).
//
// It also catches a host Model that writes rows of another width than it
// reported (docs/hostile_inputs.md): view() marks the last float of every
// row, and the float just past the last row, with a NaN of our own payload;
// written() checks that the forward overwrote every row's mark and left the
// one past the end alone. A model whose rows are narrower than `width` never
// reaches the last row's last float; one whose rows are wider runs into the
// guard row kept past the end (so an overrun of up to `width` floats lands
// in memory we own). O(rows) work per forward.
class HostRows {
 public:
  TensorView view(std::int64_t rows, std::int64_t width) {
    const auto n = static_cast<std::size_t>(rows * width);
    const auto guard = static_cast<std::size_t>(std::max<std::int64_t>(width, 16));
    if (n + guard > capacity_) {
      const std::size_t bytes = ((n + guard) * sizeof(float) + 63) / 64 * 64;
      data_.reset(static_cast<float*>(std::aligned_alloc(64, bytes)));
      if (!data_) throw std::bad_alloc();
      capacity_ = bytes / sizeof(float);
    }
    float* p = data_.get();
    for (std::int64_t r = 0; r < rows; ++r) mark(p + r * width + width - 1);
    mark(p + n);
    return TensorView(p, DType::kF32, {rows, width});
  }

  // The rows a forward wrote into view(rows, width), checked as logit_rows()
  // checks them and, when `out` is still that view, for the marks: ShapeError
  // naming `who` when a row's last float was never written or a write ran
  // past the last row. (A model that answered with a view of its own memory
  // gets logit_rows()'s checks only.)
  ProbRows written(const TensorView& out, std::int64_t rows, std::int64_t width, std::string_view who) const;

 private:
  // A quiet NaN with a payload no arithmetic makes from finite inputs.
  static constexpr std::uint32_t kMarkBits = 0x7fdead5du;
  static void mark(float* at) { std::memcpy(at, &kMarkBits, sizeof kMarkBits); }
  static bool marked(const float* at) {
    std::uint32_t bits;
    std::memcpy(&bits, at, sizeof bits);
    return bits == kMarkBits;
  }

  struct Free {
    void operator()(float* p) const { std::free(p); }
  };
  std::unique_ptr<float[], Free> data_;
  std::size_t capacity_ = 0;
};

// A host model's check of an output view before it writes `rows` x `width`
// floats: float32, [rows, width], rows contiguous, on the host.
inline float* host_output(const TensorView& out, std::int64_t rows, std::int64_t width, std::string_view who) {
  if (out.device().kind != DeviceKind::kCPU)
    throw UnsupportedError(fmt::format("{}: it writes host memory; the output view is on a device", who));
  if (out.ndim() != 2 || out.dtype() != DType::kF32 || out.stride(1) != 1 || out.stride(0) != width)
    throw ShapeError(fmt::format("{}: the output must be a dense float32 [rows, {}] view", who, width));
  if (out.size(0) != rows || out.size(1) != width)
    throw ShapeError(fmt::format("{}: the output view is [{}, {}], the forward makes [{}, {}]", who, out.size(0),
                                 out.size(1), rows, width));
  return out.data_as<float>();
}

// Reads logits ([tokens, vocab] float32 on the host, rows contiguous) as
// rows, checking them before anything samples from them.
inline ProbRows logit_rows(const TensorView& logits, std::int64_t expected_rows, std::int64_t vocab,
                           std::string_view who) {
  if (logits.empty() || logits.ndim() != 2 || logits.dtype() != DType::kF32 ||
      logits.device().kind != DeviceKind::kCPU || logits.stride(1) != 1)
    throw ShapeError(fmt::format("{}: no host float32 [tokens, vocab] logits", who));
  if (logits.size(0) != expected_rows || logits.size(1) != vocab)
    throw ShapeError(fmt::format("{}: logits [{}, {}], expected [{}, {}]", who, logits.size(0), logits.size(1),
                                 expected_rows, vocab));
  return {logits.data_as<float>(), expected_rows, vocab, logits.stride(0)};
}

inline ProbRows HostRows::written(const TensorView& out, std::int64_t rows, std::int64_t width,
                                  std::string_view who) const {
  const ProbRows checked = logit_rows(out, rows, width, who);
  const float* p = data_.get();
  if (p == nullptr || out.data() != static_cast<const void*>(p) || out.stride(0) != width) return checked;
  for (std::int64_t r = 0; r < rows; ++r)
    if (marked(p + r * width + width - 1))
      throw ShapeError(
          fmt::format("{}: the model left row {} of its [{}, {}] output unwritten at column {}: it "
                      "writes rows narrower than the width it reports, or fewer rows than it was given",
                      who, r, rows, width, width - 1));
  if (!marked(p + rows * width))
    throw ShapeError(
        fmt::format("{}: the model wrote past the end of its [{}, {}] output: it writes rows wider "
                    "than the width it reports",
                    who, rows, width));
  return checked;
}

}  // namespace specdec
