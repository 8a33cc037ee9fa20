// The precision inference weights are packed in (issue 15: half precision).
//
// A decode step reads every weight once, so its floor is the weights' bytes
// over the memory bandwidth: bf16 halves it. f32 stays the reference, and the
// fallback on CPUs without a native bf16 matmul (AVX512_BF16 or AMX), found at
// run time. Activations, attention, norms and accumulation stay in f32 in
// every precision.
#pragma once

#include <string>
#include <string_view>

#include "specdec/core/tensor_view.hpp"

namespace specdec::torch_backend {

struct InferenceDType {
  DType dtype = DType::kF32;  // what the weights are packed in: kF32 or kBF16
  std::string note;           // why a request was not granted as asked; empty if it was
};

// "f32" -> f32; "bf16" -> bf16 where this CPU runs it natively, else f32 with
// a note saying so; "auto" -> the fastest this CPU offers (bf16 where native,
// else f32, with no note). "f16" throws UnsupportedError (oneDNN 2.6 has no
// f16 matmul on CPUs without AVX512_FP16), anything else InvalidArgumentError
// naming the choices.
InferenceDType choose_inference_dtype(std::string_view requested);

// "f32" or "bf16".
std::string_view inference_dtype_name(DType dtype);

}  // namespace specdec::torch_backend
