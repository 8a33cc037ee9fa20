// Reading a checkpoint's tensors by name, each checked as io::weight_view
// checks weights (the shape its config implies, a floating dtype, finite
// values), and counting what was read (so that a loader can refuse a
// file holding tensors it does not know). Internal to src/torch.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <filesystem>
#include <string>
#include <utility>
#include <vector>

#include "specdec/core/tensor_view.hpp"
#include "specdec/io/weights.hpp"
#include "specdec/torch/tensor_interop.hpp"

namespace specdec::torch_backend {

template <class Checkpoint>
class CheckedTensors {
 public:
  // `implied_by` names the config whose shapes the tensors must have.
  CheckedTensors(const Checkpoint& ckpt, std::filesystem::path dir, std::string implied_by)
      : ckpt_(ckpt), dir_(std::move(dir)), implied_by_(std::move(implied_by)) {}

  // The tensor `name` as float32, owning its memory (the mapping may close).
  at::Tensor operator()(const std::string& name, const std::vector<std::int64_t>& shape) {
    const TensorView v = io::weight_view(ckpt_, name, shape, dir_.string(), implied_by_);
    ++used_;
    return tensor_of(v).to(at::kFloat).clone();
  }
  std::int64_t used() const { return used_; }

 private:
  const Checkpoint& ckpt_;
  std::filesystem::path dir_;
  std::string implied_by_;
  std::int64_t used_ = 0;
};

}  // namespace specdec::torch_backend
