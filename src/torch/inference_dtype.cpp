#include "specdec/torch/inference_dtype.hpp"

#include <fmt/format.h>

#include "specdec/core/error.hpp"
#include "specdec/torch/packed_linear.hpp"

namespace specdec::torch_backend {

InferenceDType choose_inference_dtype(std::string_view requested) {
  if (requested == "f32") return {DType::kF32, {}};
  if (requested == "auto") return {PackedLinear::native_bf16() ? DType::kBF16 : DType::kF32, {}};
  if (requested == "bf16") {
    if (PackedLinear::native_bf16()) return {DType::kBF16, {}};
    return {DType::kF32,
            "--dtype bf16: this CPU has no native bf16 matmul (AVX512_BF16 or AMX), running in f32 instead"};
  }
  if (requested == "f16")
    throw UnsupportedError(
        "--dtype f16: oneDNN 2.6 has no f16 matmul on CPUs without AVX512_FP16; use bf16 (same bytes) or "
        "f32");
  throw InvalidArgumentError(fmt::format("--dtype must be auto, f32 or bf16, got '{}'", requested));
}

std::string_view inference_dtype_name(DType dtype) {
  return dtype == DType::kBF16 ? "bf16" : "f32";
}

}  // namespace specdec::torch_backend
