// Half-precision conversions for checkpoint I/O: IEEE 754 binary16 (f16) and
// bfloat16 (bf16) to and from f32.
//
// Widening (f16/bf16 -> f32) is exact for every bit pattern: subnormals become
// normal f32 values, infinities stay infinities, NaNs stay NaNs with sign and
// payload kept. Narrowing (f32 -> f16/bf16) rounds to nearest, ties to even
// (IEEE 754 §4.3.1, the rounding torch's `.half()` / `.bfloat16()` use):
// values at or beyond the half-way point above the largest finite value
// become infinity, values below half the smallest subnormal become a signed
// zero, and NaNs stay (quiet) NaNs with the sign and top payload bits kept.
#pragma once

#include <bit>
#include <cstdint>

#include "specdec/core/tensor_view.hpp"

namespace specdec::io {

constexpr float f16_to_f32(std::uint16_t h) {
  const std::uint32_t sign = static_cast<std::uint32_t>(h & 0x8000u) << 16;
  const std::uint32_t exp = (h >> 10) & 0x1fu;
  std::uint32_t mant = h & 0x3ffu;
  if (exp == 0x1f)  // inf / NaN: keep the payload in the top mantissa bits
    return std::bit_cast<float>(sign | 0x7f800000u | (mant << 13));
  if (exp == 0) {
    if (mant == 0) return std::bit_cast<float>(sign);
    // Subnormal mant * 2^-24: normalise so the leading 1 lands on bit 10.
    std::uint32_t e = 113;  // f32 biased exponent of 2^-14
    while ((mant & 0x400u) == 0) {
      mant <<= 1;
      --e;
    }
    return std::bit_cast<float>(sign | (e << 23) | ((mant & 0x3ffu) << 13));
  }
  return std::bit_cast<float>(sign | ((exp + 112u) << 23) | (mant << 13));
}

constexpr float bf16_to_f32(std::uint16_t b) {
  return std::bit_cast<float>(static_cast<std::uint32_t>(b) << 16);
}

constexpr std::uint16_t f32_to_f16(float f) {
  const std::uint32_t x = std::bit_cast<std::uint32_t>(f);
  const std::uint32_t sign = (x >> 16) & 0x8000u;
  const std::uint32_t ax = x & 0x7fffffffu;
  if (ax > 0x7f800000u)  // NaN: quiet it, keep the top 10 payload bits
    return static_cast<std::uint16_t>(sign | 0x7e00u | ((ax >> 13) & 0x3ffu));
  // 65520 = 0x477ff000 is half-way between 65504 (max, odd mantissa) and 2^16:
  // it and everything above round to infinity.
  if (ax >= 0x477ff000u) return static_cast<std::uint16_t>(sign | 0x7c00u);
  if (ax < 0x38800000u) {  // below 2^-14: f16 subnormal or zero
    const std::uint32_t e = ax >> 23;
    if (e < 102) return static_cast<std::uint16_t>(sign);  // < 2^-25: rounds to zero
    const std::uint32_t m = (ax & 0x7fffffu) | 0x800000u;
    const std::uint32_t shift = 126u - e;  // m * 2^(e-150) / 2^-24 = m >> (126 - e)
    std::uint32_t r = m >> shift;
    const std::uint32_t rem = m & ((1u << shift) - 1u);
    const std::uint32_t half = 1u << (shift - 1u);
    if (rem > half || (rem == half && (r & 1u))) ++r;  // may carry into the smallest normal
    return static_cast<std::uint16_t>(sign | r);
  }
  // Normal: rebias the exponent (127 -> 15) and round off 13 mantissa bits; a
  // carry out of the mantissa correctly bumps the exponent.
  std::uint32_t r = (ax >> 13) - (112u << 10);
  const std::uint32_t rem = ax & 0x1fffu;
  if (rem > 0x1000u || (rem == 0x1000u && (r & 1u))) ++r;
  return static_cast<std::uint16_t>(sign | r);
}

constexpr std::uint16_t f32_to_bf16(float f) {
  const std::uint32_t x = std::bit_cast<std::uint32_t>(f);
  if ((x & 0x7fffffffu) > 0x7f800000u)  // NaN: quiet it (the rounding below could make it inf)
    return static_cast<std::uint16_t>((x >> 16) | 0x0040u);
  const std::uint32_t lsb = (x >> 16) & 1u;
  return static_cast<std::uint16_t>((x + 0x7fffu + lsb) >> 16);  // ties to even; overflow -> inf
}

// Converts a contiguous host tensor of dtype f32, f16, bf16 or f64 to f32,
// writing numel() floats to dst. Reads through memcpy, so src may be
// misaligned (tensors in safetensors files from writers that do not align).
// Throws UnsupportedError for other dtypes, device memory or strided views.
void to_f32(const TensorView& src, float* dst);

// Converts n floats to dtype `dst_dtype` (f32, f16, bf16 or f64), writing
// n * dtype_size(dst_dtype) bytes to dst. Throws UnsupportedError otherwise.
void from_f32(const float* src, std::int64_t n, DType dst_dtype, void* dst);

}  // namespace specdec::io
