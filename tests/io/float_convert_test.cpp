// f16 / bf16 <-> f32 against known bit patterns, exhaustively where possible.
#include "specdec/io/float_convert.hpp"

#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <vector>

#include "support/catch.hpp"

using specdec::DType;
using specdec::TensorView;
using specdec::io::bf16_to_f32;
using specdec::io::f16_to_f32;
using specdec::io::f32_to_bf16;
using specdec::io::f32_to_f16;

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

std::uint32_t bits(float f) {
  return std::bit_cast<std::uint32_t>(f);
}

// f16 value computed independently of the converter: (-1)^s * m * 2^(e-25)
// with the implicit bit for normals.
double f16_reference(std::uint16_t h) {
  const int s = h >> 15, e = (h >> 10) & 0x1f, m = h & 0x3ff;
  const double mag = e == 0 ? std::ldexp(m, -24) : std::ldexp(m + 1024, e - 25);
  return s ? -mag : mag;
}

}  // namespace

TEST_CASE("f16 known bit patterns convert both ways", "[unit][io]") {
  static_assert(f16_to_f32(0x3C00) == 1.0f, "conversions are constexpr");
  CHECK(f32_to_f16(1.0f) == 0x3C00);
  CHECK(f32_to_f16(-2.0f) == 0xC000);
  CHECK(f16_to_f32(0xC000) == -2.0f);
  CHECK(f32_to_f16(65504.0f) == 0x7BFF);
  CHECK(f16_to_f32(0x7BFF) == 65504.0f);
  CHECK(f32_to_f16(0.0f) == 0x0000);
  CHECK(f32_to_f16(-0.0f) == 0x8000);
  CHECK(bits(f16_to_f32(0x8000)) == 0x80000000u);
  CHECK(f32_to_f16(kInf) == 0x7C00);
  CHECK(f32_to_f16(-kInf) == 0xFC00);
  CHECK(f16_to_f32(0x7C00) == kInf);
  CHECK(f16_to_f32(0xFC00) == -kInf);
  CHECK(std::isnan(f16_to_f32(0x7E00)));
  CHECK(std::isnan(f16_to_f32(0x7C01)));  // signalling payload stays NaN
  const std::uint16_t qnan = f32_to_f16(std::numeric_limits<float>::quiet_NaN());
  CHECK((qnan & 0x7C00) == 0x7C00);
  CHECK((qnan & 0x03FF) != 0);
  CHECK((f32_to_f16(-std::numeric_limits<float>::quiet_NaN()) & 0x8000) == 0x8000);
  // Subnormals: smallest 0x0001 = 2^-24, largest 0x03FF, smallest normal 0x0400 = 2^-14.
  CHECK(f16_to_f32(0x0001) == std::ldexp(1.0f, -24));
  CHECK(f32_to_f16(std::ldexp(1.0f, -24)) == 0x0001);
  CHECK(f16_to_f32(0x03FF) == std::ldexp(1023.0f, -24));
  CHECK(f16_to_f32(0x0400) == std::ldexp(1.0f, -14));
  CHECK(f32_to_f16(std::ldexp(1.0f, -14)) == 0x0400);
  CHECK(f32_to_f16(std::numeric_limits<float>::denorm_min()) == 0x0000);
}

TEST_CASE("f32 to f16 rounds to nearest with ties to even", "[unit][io]") {
  // Normal range: the f16 spacing at 1.0 is 2^-10.
  CHECK(f32_to_f16(1.0f + std::ldexp(1.0f, -11)) == 0x3C00);      // tie, 0x3C00 even: down
  CHECK(f32_to_f16(1.0f + 3 * std::ldexp(1.0f, -11)) == 0x3C02);  // tie, 0x3C01 odd: up
  CHECK(f32_to_f16(1.0f + std::ldexp(1.0f, -11) + std::ldexp(1.0f, -20)) == 0x3C01);  // above the tie
  CHECK(f32_to_f16(1.0f + std::ldexp(1.0f, -12)) == 0x3C00);
  // Overflow: 65520 is the tie between 65504 (odd mantissa) and 2^16: rounds to inf.
  CHECK(f32_to_f16(65519.996f) == 0x7BFF);
  CHECK(f32_to_f16(65520.0f) == 0x7C00);
  CHECK(f32_to_f16(-65520.0f) == 0xFC00);
  CHECK(f32_to_f16(1e10f) == 0x7C00);
  // Subnormal range: spacing 2^-24.
  const float q = std::ldexp(1.0f, -24);
  CHECK(f32_to_f16(0.5f * q) == 0x0000);  // tie between 0 and 0x0001: even is 0
  CHECK(f32_to_f16(0.75f * q) == 0x0001);
  CHECK(f32_to_f16(1.5f * q) == 0x0002);  // tie: 0x0002 is even
  CHECK(f32_to_f16(2.5f * q) == 0x0002);  // tie: 0x0002 is even
  CHECK(f32_to_f16(-2.5f * q) == 0x8002);
  CHECK(f32_to_f16(1023.5f * q) == 0x0400);  // rounds up into the smallest normal
  CHECK(f32_to_f16(std::ldexp(1.0f, -26)) == 0x0000);
}

TEST_CASE("Every f16 bit pattern widens exactly and narrows back to itself", "[unit][io]") {
  int mismatches = 0;
  for (std::uint32_t h = 0; h <= 0xFFFF; ++h) {
    const auto x = static_cast<std::uint16_t>(h);
    const float f = f16_to_f32(x);
    const bool nan = (x & 0x7C00) == 0x7C00 && (x & 0x03FF) != 0;
    if (nan) {
      mismatches += !std::isnan(f) || !((f32_to_f16(f) & 0x7C00) == 0x7C00 && (f32_to_f16(f) & 0x3FF) != 0);
      continue;
    }
    mismatches += static_cast<double>(f) != f16_reference(x) && !std::isinf(f);
    mismatches += f32_to_f16(f) != x;
  }
  CHECK(mismatches == 0);
}

TEST_CASE("bf16 known bit patterns convert both ways with ties to even", "[unit][io]") {
  CHECK(f32_to_bf16(1.0f) == 0x3F80);
  CHECK(bf16_to_f32(0x3F80) == 1.0f);
  CHECK(f32_to_bf16(-2.0f) == 0xC000);
  CHECK(bf16_to_f32(0xC000) == -2.0f);
  CHECK(f32_to_bf16(kInf) == 0x7F80);
  CHECK(f32_to_bf16(-kInf) == 0xFF80);
  CHECK(std::isnan(bf16_to_f32(0x7FC0)));
  CHECK(std::isnan(bf16_to_f32(f32_to_bf16(std::numeric_limits<float>::quiet_NaN()))));
  // A NaN whose payload sits only in the low bits must not round to inf.
  CHECK(std::isnan(bf16_to_f32(f32_to_bf16(std::bit_cast<float>(0x7F800001u)))));
  CHECK(std::isnan(bf16_to_f32(f32_to_bf16(std::bit_cast<float>(0x7FFFFFFFu)))));
  CHECK(bf16_to_f32(0x0001) == std::bit_cast<float>(0x00010000u));  // smallest subnormal
  CHECK(f32_to_bf16(std::bit_cast<float>(0x00010000u)) == 0x0001);
  // Spacing at 1.0 is 2^-7.
  CHECK(f32_to_bf16(1.0f + std::ldexp(1.0f, -8)) == 0x3F80);      // tie, even: down
  CHECK(f32_to_bf16(1.0f + 3 * std::ldexp(1.0f, -8)) == 0x3F82);  // tie, odd: up
  CHECK(f32_to_bf16(1.0f + std::ldexp(1.0f, -8) + std::ldexp(1.0f, -20)) == 0x3F81);
  CHECK(f32_to_bf16(std::numeric_limits<float>::max()) == 0x7F80);  // beyond the tie above 0x7F7F
  CHECK(f32_to_bf16(std::bit_cast<float>(0x7F7F7FFFu)) == 0x7F7F);
  CHECK(f32_to_bf16(65504.0f) == 0x4780);  // 65536 in bf16
}

TEST_CASE("Every bf16 bit pattern widens exactly and narrows back to itself", "[unit][io]") {
  int mismatches = 0;
  for (std::uint32_t b = 0; b <= 0xFFFF; ++b) {
    const auto x = static_cast<std::uint16_t>(b);
    const float f = bf16_to_f32(x);
    if (std::isnan(f)) {
      mismatches += !std::isnan(bf16_to_f32(f32_to_bf16(f)));
      continue;
    }
    mismatches += bits(f) != (b << 16);
    mismatches += f32_to_bf16(f) != x;
  }
  CHECK(mismatches == 0);
}

TEST_CASE("to_f32 and from_f32 convert whole host tensors", "[unit][io]") {
  const std::vector<float> src{1.0f, -2.0f, 0.5f, 65504.0f};
  std::vector<std::uint16_t> half(4), brain(4);
  std::vector<double> wide(4);
  specdec::io::from_f32(src.data(), 4, DType::kF16, half.data());
  specdec::io::from_f32(src.data(), 4, DType::kBF16, brain.data());
  specdec::io::from_f32(src.data(), 4, DType::kF64, wide.data());
  CHECK(half == std::vector<std::uint16_t>{0x3C00, 0xC000, 0x3800, 0x7BFF});
  CHECK(brain == std::vector<std::uint16_t>{0x3F80, 0xC000, 0x3F00, 0x4780});
  CHECK(wide == std::vector<double>{1.0, -2.0, 0.5, 65504.0});

  std::vector<float> back(4);
  specdec::io::to_f32(TensorView(half.data(), DType::kF16, {2, 2}), back.data());
  CHECK(back == src);
  specdec::io::to_f32(TensorView(wide.data(), DType::kF64, {4}), back.data());
  CHECK(back == src);
  specdec::io::to_f32(TensorView(brain.data(), DType::kBF16, {4}), back.data());
  CHECK(back == std::vector<float>{1.0f, -2.0f, 0.5f, 65536.0f});
  std::vector<float> copy(4);
  specdec::io::to_f32(TensorView(const_cast<float*>(src.data()), DType::kF32, {4}), copy.data());
  CHECK(copy == src);

  std::vector<std::int32_t> ints(4);
  REQUIRE_THROWS_AS(specdec::io::to_f32(TensorView(ints.data(), DType::kI32, {4}), back.data()),
                    specdec::UnsupportedError);
  REQUIRE_THROWS_AS(specdec::io::from_f32(src.data(), 4, DType::kU8, ints.data()), specdec::UnsupportedError);
  const std::int64_t shape[] = {2, 2};
  const std::int64_t strides[] = {1, 2};
  REQUIRE_THROWS_AS(specdec::io::to_f32(TensorView(half.data(), DType::kF16, shape, 2, strides), back.data()),
                    specdec::UnsupportedError);
}
