// A bf16-weight matmul for the few rows a decoder runs (a decode step, a
// verification of a handful of tokens), streaming the weights once.
//
// Why not oneDNN here: oneDNN 2.6's bf16 brgemm costs more per extra row.
// Over a stack of weights far larger than the cache (bench/linear_bench.cpp,
// docs/RESULTS.md "Half precision"), its 5-row pass costs 1.14x its 1-row
// pass and 16 rows 1.70x; this kernel's cost 1.05x and 1.50x (before the
// chunking below). It keeps up to six rows' sums of 64 columns in registers
// (a tile) while it reads each 256-byte slice of weights once (VDPBF16PS:
// two k per instruction, f32 accumulation), prefetching ahead so the loads
// keep streaming while the dot products run. More rows (up to 24) take turns
// over 16 KB chunks of k, so the weights still come from memory once and the
// next chunks are fetched while the other tiles compute.
//
// Each output is the same sum in the same order whatever the number of rows,
// so a token verified among others gets exactly the logits it gets alone.
//
// Internal to src/torch; compiled for AVX512_BF16 and used only where the CPU
// has it (available()).
#pragma once

#include <cstdint>
#include <memory>

namespace specdec::torch_backend::bf16_gemm {

// Whether this CPU runs the kernel (AVX512F, AVX512BW, AVX512VL, AVX512_BF16).
bool available();

// x [m, in] f32 -> out [m, stride] bf16 (nearest, ties to even, as
// io::f32_to_bf16, except that denormals become zero: VDPBF16PS treats them
// as zero anyway), each row's tail after `in` zeroed. Needs available().
void round_rows(const float* x, std::int64_t m, std::int64_t in, std::int64_t stride, std::uint16_t* out);

// Weights [out, in] row-major f32, rounded to bf16 (nearest, ties to even)
// and laid out in blocks of 64 output columns: [out/64][in/2][64][2].
class PackedWeights {
 public:
  PackedWeights(const float* weight, std::int64_t out, std::int64_t in);
  std::int64_t in() const { return in_; }
  std::int64_t out() const { return out_; }

  // y[m, out] = x[m, in] W^T, or y += x W^T with `add`. x is bf16 rows of
  // in_padded() values (the odd tail zeroed); y is f32 [m, out]. Runs on the
  // calling thread's OpenMP team.
  void multiply(const std::uint16_t* x, std::int64_t m, float* y, bool add) const;
  // The same over f32 rows that fill(context, r, row) writes (in() values),
  // rounded to bf16 into `staged` (m x in_padded()): for kFillInTeam rows
  // or more the team fills and rounds them, a share each, in the region of
  // the product; below, the calling thread does, first.
  static constexpr std::int64_t kFillInTeam = 4;
  void multiply_rows(void (*fill)(const void*, std::int64_t, float*), const void* context, std::int64_t m,
                     std::uint16_t* staged, float* y, bool add) const;
  std::int64_t in_padded() const { return k_pairs_ * 2; }

 private:
  struct Free {
    void operator()(std::uint16_t* p) const;
  };
  std::int64_t in_ = 0, out_ = 0, k_pairs_ = 0, blocks_ = 0;
  std::unique_ptr<std::uint16_t[], Free> data_;
};

}  // namespace specdec::torch_backend::bf16_gemm
