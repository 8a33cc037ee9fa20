// A linear layer y = x W^T whose weights are reordered once, at construction,
// into a blocked layout (specdec's row kernel's, or the one oneDNN's matmul
// primitive prefers), so a forward over m rows (m new tokens: 1 for decoding, a handful for verification,
// ~100 for a prompt) streams the weights once and never re-packs them (OpenBLAS small-M GEMM re-packs the
// weights on every call; see bench/linear_bench.cpp and docs/RESULTS.md for the measurements).
//
// Inference only: the result carries no autograd history.
//
// Weights are stored in f32 or bf16. bf16 halves the bytes a decode step
// streams. Products run on specdec's own row kernel (cpu::RowLinear, src/cpu/row_gemm.hpp)
// where the CPU has its instructions (AVX-512F for f32, AVX512_BF16 for bf16):
// it reads the weights once for a few rows, sums each output in k order
// whatever the row count, and runs on the calling thread's team
// (specdec/cpu/threads.hpp). Elsewhere they run on oneDNN. bf16 source rows are rounded to bf16 per call and
// products accumulate in f32 into an f32 destination. f16 weights have no
// matmul in oneDNN 2.6 on CPUs without AVX512_FP16 and are refused.
// docs/RESULTS.md, "Half precision", has the measurements.
//
// oneDNN stays out of this header (pimpl): users of llama_model.hpp need no
// oneDNN includes.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <memory>
#include <string>

#include "specdec/core/tensor_view.hpp"
#include "specdec/cpu/linear.hpp"

namespace specdec::torch_backend {

class PackedLinear final : public cpu::Linear {
 public:
  // Which code multiplies: kAuto takes specdec's row kernel where the CPU
  // has it (cpu::RowLinear, src/cpu/row_gemm.hpp) and oneDNN elsewhere; kOneDnn always
  // takes oneDNN (for comparisons).
  enum class Kernel { kAuto, kOneDnn };

  // `weight` is [out, in] float32 (the Hugging Face nn.Linear layout); it is
  // copied (and moved to the CPU if needed) into the packed layout in
  // `storage` (kF32, or kBF16 rounded to nearest even), so the tensor may be
  // freed or changed afterwards without affecting this object.
  // Throws ShapeError for a weight that is not 2-D or has a zero dimension,
  // InvalidArgumentError for a weight that is not float32 or a storage other
  // than kF32 / kBF16, UnsupportedError when oneDNN has no matmul for it here.
  explicit PackedLinear(const at::Tensor& weight, DType storage = DType::kF32,
                        Kernel kernel = Kernel::kAuto);
  ~PackedLinear() override;
  PackedLinear(PackedLinear&&) noexcept;
  PackedLinear& operator=(PackedLinear&&) noexcept;
  PackedLinear(const PackedLinear&) = delete;
  PackedLinear& operator=(const PackedLinear&) = delete;

  std::int64_t in_features() const override;
  std::int64_t out_features() const override;
  DType storage() const;

  // y[m, out] = x[m, in] W^T, both row-major and dense; x and y must not
  // overlap. Any m >= 1 works. Throws InvalidArgumentError for m <= 0 or a
  // null pointer.
  //
  // On oneDNN, the first call with a given m creates that m's primitive (tens
  // of microseconds; oneDNN's global primitive cache shares it between layers
  // of equal shape); later calls with that m allocate nothing.
  //
  // Thread safety: sharing an object between threads is safe. oneDNN calls on
  // one object are serialized by an internal mutex (they use the object's
  // cached argument memory) and run on the calling thread's OpenMP team
  // (at::set_num_threads / OMP_NUM_THREADS threads); the row kernel's calls
  // share nothing, run concurrently, and each runs on the calling thread's
  // team (forward_threads(), specdec/cpu/threads.hpp).
  void forward(const float* x, std::int64_t m, float* y) const override;
  // y[m, out] += x[m, in] W^T: the residual connection fused into the matmul
  // (oneDNN's sum post-op; an add at the row kernel's store), which saves a
  // pass over y. Same contract as forward.
  void forward_add(const float* x, std::int64_t m, float* y) const override;

  // Rows made on the fly (cpu::Linear::RowSource). Where the rows are many
  // (a verification) and the product runs on the row kernel, the product's
  // team fills them, a row an item. Elsewhere the calling thread fills them
  // first.
  // y[m, out] = rows W^T (or y += rows W^T); as forward / forward_add.
  void forward(RowSource rows, std::int64_t m, float* y) const override;
  void forward_add(RowSource rows, std::int64_t m, float* y) const override;

  // Convenience: x [m, in] float32 on the CPU (made contiguous if it is not)
  // -> a new [m, out] float32 tensor. Throws ShapeError when x is not 2-D or
  // its inner dimension is not in_features(), InvalidArgumentError when x is
  // not float32 or has no rows, UnsupportedError when x is not on the CPU.
  at::Tensor operator()(const at::Tensor& x) const;

  // oneDNN's implementation name for the primitive used at m rows (e.g.
  // "brg:avx512_core"); creates the primitive if needed. For diagnostics and
  // tests.
  std::string implementation(std::int64_t m) const;

  // Whether this CPU runs a bf16 matmul natively (it has AVX512_BF16 for
  // specdec's kernel, or oneDNN picks an AVX512_BF16 or AMX kernel). Where it
  // does not, bf16 weights would run on emulation or a reference kernel,
  // slower than f32: callers choosing a precision fall back to f32
  // (inference_dtype.hpp).
  static bool native_bf16();

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace specdec::torch_backend
