// Reading a checkpoint's tensors as the weights of a model: the checks every
// loader (libtorch, CUDA) makes before it computes with a tensor, so that a
// file that is not what the config says, or not floating point, or carries a
// value no trained weight has, is refused by name instead of converted.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <set>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "specdec/core/error.hpp"
#include "specdec/core/tensor_view.hpp"
#include "specdec/io/float_convert.hpp"

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

// A loader's reading of a checkpoint: each tensor as f32, checked as
// weight_view checks it against the shape `implied_by` implies, and the
// names read, so that what was not read can be refused.
template <class Checkpoint>
class WeightReader {
 public:
  WeightReader(const Checkpoint& ckpt, std::string where, std::string implied_by)
      : ckpt_(ckpt), where_(std::move(where)), implied_by_(std::move(implied_by)) {}

  std::vector<float> operator()(const std::string& name, std::span<const std::int64_t> shape) {
    const TensorView v = weight_view(ckpt_, name, shape, where_, implied_by_);
    read_.insert(name);
    std::vector<float> out(static_cast<std::size_t>(v.numel()));
    to_f32(v, out.data());
    return out;
  }
  std::vector<float> operator()(const std::string& name, std::initializer_list<std::int64_t> shape) {
    return (*this)(name, std::span<const std::int64_t>(shape.begin(), shape.size()));
  }

  // Throws ModelLoadError naming a tensor that was not read: the checkpoint
  // is of another architecture (old exports' rotary inv_freq buffers are
  // recomputed, not weights, and pass).
  void refuse_unread() const {
    for (const auto& name : ckpt_.names())
      if (!read_.contains(name) && !name.ends_with("rotary_emb.inv_freq"))
        throw ModelLoadError(
            fmt::format("{}: tensor {} is not part of a Llama model with this config", where_, name));
  }

 private:
  const Checkpoint& ckpt_;
  std::string where_, implied_by_;
  std::set<std::string, std::less<>> read_;
};

}  // namespace specdec::io
