// Reads a model's logits ([tokens, vocab] float32 on the host, rows contiguous)
// as rows, checking what a ForwardResult must hold before anything samples
// from it.
#pragma once

#include <cstdint>
#include <span>
#include <string_view>

#include <fmt/format.h>

#include "specdec/core/error.hpp"
#include "specdec/core/prob_matrix.hpp"
#include "specdec/core/tensor_view.hpp"

namespace specdec {

inline ProbRows logit_rows(const TensorView& logits, std::int64_t expected_rows, std::int64_t vocab,
                           std::string_view who) {
  if (logits.empty() || logits.ndim() != 2 || logits.dtype() != DType::kF32 ||
      logits.device().kind != DeviceKind::kCPU || logits.stride(1) != 1)
    throw ShapeError(fmt::format("{}: the model returned no host float32 [tokens, vocab] logits", who));
  if (logits.size(0) != expected_rows || logits.size(1) != vocab)
    throw ShapeError(fmt::format("{}: the model returned logits [{}, {}], expected [{}, {}]", who, logits.size(0),
                                 logits.size(1), expected_rows, vocab));
  return {logits.data_as<float>(), expected_rows, vocab, logits.stride(0)};
}

}  // namespace specdec
