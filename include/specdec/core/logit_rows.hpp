// The host side of Model outputs (core/round.hpp): a buffer a caller hands to
// Model::forward, the check a model makes before writing into one, and the
// check a caller makes before reading the rows back.
#pragma once

#include <cstdint>
#include <cstdlib>
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
class HostRows {
 public:
  TensorView view(std::int64_t rows, std::int64_t width) {
    const auto n = static_cast<std::size_t>(rows * width);
    if (n > capacity_) {
      const std::size_t bytes = (n * sizeof(float) + 63) / 64 * 64;
      data_.reset(static_cast<float*>(std::aligned_alloc(64, bytes)));
      if (!data_) throw std::bad_alloc();
      capacity_ = bytes / sizeof(float);
    }
    return TensorView(data_.get(), DType::kF32, {rows, width});
  }

 private:
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

}  // namespace specdec
