// The per-instruction-set entry points of row_gemm.hpp: one block of 64
// output columns for m rows (row_gemm_tile.hpp's run_block), compiled in
// row_gemm_f32.cpp for AVX-512F, row_gemm_f32_avx2.cpp for AVX2 with FMA and
// row_gemm_bf16.cpp for AVX512_BF16. Callers check the CPU first
// (row_gemm.cpp).
//
// Internal to src/cpu.
#pragma once

#include <cstdint>

namespace specdec::cpu::row_gemm {

// w: [steps][64] 32-bit words of the block; x: m rows of `steps` 32-bit
// words, x_stride words apart; y: m rows of `cols` (<= 64) outputs,
// y_stride apart, written (or added to, with `add`).
void run_block_f32(const std::uint32_t* w, std::int64_t steps, const unsigned char* x, std::int64_t x_stride,
                   std::int64_t m, float* y, std::int64_t y_stride, std::int64_t cols, bool add);
void run_block_f32_avx2(const std::uint32_t* w, std::int64_t steps, const unsigned char* x,
                        std::int64_t x_stride, std::int64_t m, float* y, std::int64_t y_stride,
                        std::int64_t cols, bool add);
void run_block_bf16(const std::uint32_t* w, std::int64_t steps, const unsigned char* x, std::int64_t x_stride,
                    std::int64_t m, float* y, std::int64_t y_stride, std::int64_t cols, bool add);

// x [m, in] f32 -> out [m, stride] bf16 (nearest, ties to even, as
// io::f32_to_bf16, except that denormals become zero: VDPBF16PS treats them
// as zero anyway), each row's tail after `in` zeroed. Needs AVX512_BF16.
void round_rows_bf16(const float* x, std::int64_t m, std::int64_t in, std::int64_t stride,
                     std::uint16_t* out);

}  // namespace specdec::cpu::row_gemm
