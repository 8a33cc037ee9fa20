// Reading a checkpoint's tensors as the weights of a model: the checks every
// loader (libtorch, CUDA) makes before it computes with a tensor, so that a
// file that is not what the config says, or not floating point, or carries a
// value no trained weight has, is refused by name instead of converted.
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>
#include <string_view>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "specdec/core/error.hpp"
#include "specdec/core/tensor_view.hpp"

namespace specdec::io {

// The index of the first element of a contiguous F32, BF16 or F16 tensor that
// is an infinity or a NaN, or -1 when all are finite. (A bit flip in a
// weight's exponent makes one; flips elsewhere leave a finite value only a
// checksum catches: safetensors.hpp.)
std::int64_t first_non_finite(const TensorView& v);

// `name` of `ckpt` (a SafetensorsFile or SafetensorsCheckpoint) as weights of
// `shape`, zero-copy (valid while the checkpoint lives). Refuses, naming
// `where` (the model directory) and the tensor:
//   ModelLoadError   the tensor is missing; its shape is not `shape`
//                    (`implied_by` names what implies it: "config.json");
//                    a value is inf or NaN (with its place)
//   UnsupportedError a dtype other than F32, BF16 and F16: integer tensors are
//                    a quantized checkpoint, F64 would lose precision in f32
//                    unannounced; both are converted outside specdec
template <class Checkpoint>
TensorView weight_view(const Checkpoint& ckpt, std::string_view name, std::span<const std::int64_t> shape,
                       std::string_view where, std::string_view implied_by) {
  if (!ckpt.contains(name)) throw ModelLoadError(fmt::format("{}: tensor {} is missing", where, name));
  const auto& info = ckpt.info(name);
  if (info.dtype != DType::kF32 && info.dtype != DType::kBF16 && info.dtype != DType::kF16)
    throw UnsupportedError(
        fmt::format("{}: tensor {} is {}; specdec loads F32, BF16 or F16 weights (convert "
                    "the checkpoint: integer tensors are quantized weights, F64 would lose "
                    "precision)",
                    where, name, info.dtype_name));
  if (!std::equal(info.shape.begin(), info.shape.end(), shape.begin(), shape.end()))
    throw ModelLoadError(fmt::format("{}: tensor {} has shape [{}], {} implies [{}]", where, name,
                                     fmt::join(info.shape, ", "), implied_by, fmt::join(shape, ", ")));
  const TensorView v = ckpt.view(name);
  if (const auto at = first_non_finite(v); at >= 0) {
    const auto width = v.ndim() >= 2 ? v.size(v.ndim() - 1) : v.numel();
    throw ModelLoadError(
        fmt::format("{}: tensor {} holds a non-finite value at row {}, column {} (element {}): "
                    "no trained weight is inf or NaN; the file is corrupt",
                    where, name, at / width, at % width, at));
  }
  return v;
}

}  // namespace specdec::io
