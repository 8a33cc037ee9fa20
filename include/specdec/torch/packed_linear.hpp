// A linear layer y = x W^T whose weights are reordered once, at construction,
// into the blocked layout oneDNN's matmul primitive prefers, so a forward over
// m rows (m new tokens: 1 for decoding, a handful for verification, ~100 for a
// prompt) streams the weights once and never re-packs them (OpenBLAS small-M
// GEMM re-packs the weights on every call; see bench/linear_bench.cpp and
// docs/RESULTS.md for the measurements).
//
// Inference only: the result carries no autograd history.
//
// oneDNN stays out of this header (pimpl): users of llama_model.hpp need no
// oneDNN includes.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <memory>
#include <string>

namespace specdec::torch_backend {

class PackedLinear {
 public:
  // `weight` is [out, in] float32 (the Hugging Face nn.Linear layout); it is
  // copied (and moved to the CPU if needed) into the packed layout, so the
  // tensor may be freed or changed afterwards without affecting this object.
  // Throws ShapeError for a weight that is not 2-D or has a zero dimension,
  // InvalidArgumentError for a weight that is not float32.
  explicit PackedLinear(const at::Tensor& weight);
  ~PackedLinear();
  PackedLinear(PackedLinear&&) noexcept;
  PackedLinear& operator=(PackedLinear&&) noexcept;
  PackedLinear(const PackedLinear&) = delete;
  PackedLinear& operator=(const PackedLinear&) = delete;

  std::int64_t in_features() const;
  std::int64_t out_features() const;

  // y[m, out] = x[m, in] W^T, both row-major and dense; x and y must not
  // overlap. Any m >= 1 works. Throws InvalidArgumentError for m <= 0 or a
  // null pointer.
  //
  // The first call with a given m creates that m's primitive (tens of
  // microseconds; oneDNN's global primitive cache shares it between layers of
  // equal shape); later calls with that m allocate nothing.
  //
  // Thread safety: calls on one object are serialized by an internal mutex
  // (they would use the object's cached argument memory), so sharing an object
  // between threads is safe but not concurrent. Each call runs on the calling
  // thread's OpenMP team (at::set_num_threads / OMP_NUM_THREADS threads).
  void forward(const float* x, std::int64_t m, float* y) const;

  // Convenience: x [m, in] float32 on the CPU (made contiguous if it is not)
  // -> a new [m, out] float32 tensor. Throws ShapeError when x is not 2-D or
  // its inner dimension is not in_features(), InvalidArgumentError when x is
  // not float32 or has no rows, UnsupportedError when x is not on the CPU.
  at::Tensor operator()(const at::Tensor& x) const;

  // oneDNN's implementation name for the primitive used at m rows (e.g.
  // "brg:avx512_core"); creates the primitive if needed. For diagnostics and
  // tests.
  std::string implementation(std::int64_t m) const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace specdec::torch_backend
