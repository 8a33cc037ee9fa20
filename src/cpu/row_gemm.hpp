// A matmul for the few rows a decoder runs (a decode step, a verification of
// a handful of tokens), streaming f32 or bf16 weights once, on the calling
// thread's team (thread_team.hpp).
//
// Why not oneDNN here:
// - bf16: oneDNN 2.6's bf16 brgemm costs more per extra row. Over a stack of
//   weights far larger than the cache (bench/linear_bench.cpp,
//   docs/RESULTS.md "Half precision"), its 5-row pass costs 1.14x its 1-row
//   pass and 16 rows 1.70x; this kernel's cost 1.05x and 1.50x (before the
//   chunking of row_gemm_tile.hpp).
// - both: oneDNN runs on OpenMP, whose barriers wait for every thread of the
//   team; when other work takes a core, a descheduled thread held every
//   region of a forward for a time slice (docs/RESULTS.md, "When other work
//   takes the cores"). Here each block of 64 output columns is an item of
//   the team, taken by whichever thread runs.
// - both: each output is the same chain of multiply-adds in k order whatever
//   the number of rows, so a token verified among others gets exactly the
//   logits it gets alone (oneDNN picks its blocking by shape).
//
// The kernel keeps up to six rows' sums of 64 columns in registers (a tile)
// while it reads each 256-byte slice of weights once (one k of f32 weights,
// VFMADD231PS; or a pair of k of bf16 weights, VDPBF16PS with f32 sums),
// prefetching ahead so the loads keep streaming while the arithmetic runs.
//
// On CPUs without AVX-512F the f32 product runs on AVX2 with FMA
// (row_gemm_f32_avx2.cpp): the same fused multiply-adds in the same order,
// so it gives the AVX-512 kernel's bits.
//
// Internal to src/cpu; used only where the CPU has the instructions
// (available()).
#pragma once

#include <cstdint>
#include <memory>

namespace specdec::cpu::row_gemm {

enum class Format { kF32, kBf16 };

// Whether this CPU runs the kernel for `format` (AVX-512F, or AVX2 and FMA,
// for f32; AVX512F, BW, VL and AVX512_BF16 for bf16).
bool available(Format format);
// The instruction set that runs `format` here ("avx512_f32", "avx2_f32",
// "avx512_bf16"), or "" where available(format) is false.
const char* isa_name(Format format);

// x [m, in] f32 -> out [m, stride] bf16 (nearest, ties to even, as
// io::f32_to_bf16, except that denormals become zero: VDPBF16PS treats them
// as zero anyway), each row's tail after `in` zeroed. Needs
// available(Format::kBf16).
void round_rows(const float* x, std::int64_t m, std::int64_t in, std::int64_t stride, std::uint16_t* out);

// Weights [out, in] row-major f32, kept as f32 or rounded to bf16 (nearest,
// ties to even), laid out in blocks of 64 output columns of 32-bit steps:
// [out/64][in][64] f32, or [out/64][in/2][64][2] bf16.
class PackedWeights {
 public:
  PackedWeights(const float* weight, std::int64_t out, std::int64_t in, Format format);
  Format format() const { return format_; }
  std::int64_t in() const { return in_; }
  std::int64_t out() const { return out_; }
  // Values per row of the input the product reads: in() for f32; for bf16,
  // in() rounded up to even (round_rows zeroes the tail).
  std::int64_t in_padded() const { return format_ == Format::kF32 ? in_ : 2 * steps_; }

  // y[m, out] = x[m, in] W^T, or y += x W^T with `add`. x is m rows of
  // in_padded() values: f32, or bf16 from round_rows. y is f32 [m, out].
  void multiply(const void* x, std::int64_t m, float* y, bool add) const;
  // The same over f32 rows that fill(context, r, row) writes (in() values),
  // made ready (bf16: rounded) into `staged`, m rows of in_padded() values
  // of the format: for kFillInTeam rows or more the team fills them, a row
  // an item, before the product; below, the calling thread does.
  static constexpr std::int64_t kFillInTeam = 12;
  void multiply_rows(void (*fill)(const void*, std::int64_t, float*), const void* context, std::int64_t m,
                     void* staged, float* y, bool add) const;

 private:
  struct Free {
    void operator()(std::uint32_t* p) const;
  };
  Format format_ = Format::kF32;
  std::int64_t in_ = 0, out_ = 0, steps_ = 0, blocks_ = 0;
  std::unique_ptr<std::uint32_t[], Free> data_;
};

}  // namespace specdec::cpu::row_gemm
