// A linear layer on specdec's row kernel alone (src/cpu/row_gemm.hpp): the
// weights packed once into blocks of 64 output columns, f32 or rounded to
// bf16, streamed once per product for a few rows, each output summed in k
// order whatever the row count (a token verified among others gets the
// logits it gets alone), on the calling thread's team (cpu/threads.hpp).
// No libtorch, no oneDNN: what cpu::LlamaModel runs on, and what
// torch_backend::PackedLinear runs on where the CPU has the instructions.
#pragma once

#include <cstdint>
#include <memory>

#include "specdec/core/tensor_view.hpp"
#include "specdec/cpu/linear.hpp"

namespace specdec::cpu {

class RowLinear final : public Linear {
 public:
  // Whether this CPU runs the kernel for weights stored as `storage`: f32
  // needs AVX-512F or AVX2 with FMA, bf16 AVX-512 with AVX512_BF16.
  static bool available(DType storage);
  // The instruction set that runs `storage` here ("avx512_f32", "avx2_f32",
  // "avx512_bf16"), or "" where available(storage) is false.
  static const char* isa_name(DType storage);
  // `wanted` where available, else f32 (a bf16 model on a CPU without
  // AVX512_BF16 runs in f32).
  static DType runnable(DType wanted) { return available(wanted) ? wanted : DType::kF32; }

  // `weight` [out, in] row-major f32 (the Hugging Face nn.Linear layout),
  // copied into the packed layout (kBF16: rounded to nearest even). Throws
  // ShapeError for a zero dimension, InvalidArgumentError for a storage other
  // than kF32 and kBF16 or a null weight, UnsupportedError where
  // available(storage) is false.
  RowLinear(const float* weight, std::int64_t out, std::int64_t in, DType storage);
  ~RowLinear() override;
  RowLinear(RowLinear&&) noexcept;
  RowLinear& operator=(RowLinear&&) noexcept;

  std::int64_t in_features() const override;
  std::int64_t out_features() const override;
  DType storage() const;

  void forward(const float* x, std::int64_t m, float* y) const override;
  void forward_add(const float* x, std::int64_t m, float* y) const override;
  // Rows of `rows`: from PackedWeights::kFillInTeam rows on (a
  // verification) the product's team fills them, a row an item.
  void forward(RowSource rows, std::int64_t m, float* y) const override;
  void forward_add(RowSource rows, std::int64_t m, float* y) const override;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace specdec::cpu
