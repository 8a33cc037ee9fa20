// The arithmetic host and CUDA kernels share (core/bitexact.hpp) and the
// fixed-point draw built on it (row_math::sample_weights), against plain
// restatements of their definitions. The CUDA tests hold the kernels to the
// same functions bit for bit; these hold the functions to their definitions.
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <vector>

#include "specdec/accept/row_math.hpp"
#include "specdec/core/bitexact.hpp"
#include "support/catch.hpp"

namespace {

// bitexact::lane_sum's shape, written out: chunks of 8192; lane l of a chunk
// adds values l, l + 1024, ... in order; lanes pair off within warps of 32,
// then the warps; chunk sums in order.
double shaped_sum(const std::vector<float>& x) {
  const auto n = static_cast<std::int64_t>(x.size());
  double total = 0.0;
  for (std::int64_t c = 0; c < n; c += 8192) {
    std::vector<double> lane(1024, 0.0);
    for (std::int64_t i = c; i < std::min(n, c + 8192); ++i)
      lane[static_cast<std::size_t>((i - c) % 1024)] += x[static_cast<std::size_t>(i)];
    std::vector<double> warp(32);
    for (int w = 0; w < 32; ++w) {
      for (int s = 16; s >= 1; s /= 2)
        for (int k = 0; k < s; ++k)
          lane[static_cast<std::size_t>(32 * w + k)] += lane[static_cast<std::size_t>(32 * w + k + s)];
      warp[static_cast<std::size_t>(w)] = lane[static_cast<std::size_t>(32 * w)];
    }
    for (int s = 16; s >= 1; s /= 2)
      for (int k = 0; k < s; ++k) warp[static_cast<std::size_t>(k)] += warp[static_cast<std::size_t>(k + s)];
    total += warp[0];
  }
  return total;
}

}  // namespace

TEST_CASE("lane_sum has the documented shape, bit for bit, and is accurate", "[unit][bitexact]") {
  std::mt19937 gen(5);
  std::exponential_distribution<float> expo(1.0f);
  for (const std::size_t n :
       {std::size_t{1}, std::size_t{31}, std::size_t{1024}, std::size_t{1025}, std::size_t{8191},
        std::size_t{8192}, std::size_t{8193}, std::size_t{32000}, std::size_t{128256}}) {
    std::vector<float> x(n);
    for (float& v : x) v = expo(gen) * (gen() % 4 == 0 ? 1e-6f : 1.0f);
    const double got = specdec::bitexact::lane_sum(x.data(), static_cast<std::int64_t>(n));
    const double want = shaped_sum(x);
    INFO("n = " << n);
    CHECK(std::memcmp(&got, &want, sizeof got) == 0);
    long double exact = 0.0L;
    for (const float v : x) exact += v;
    CHECK(std::abs(static_cast<long double>(got) - exact) <= 1e-13L * exact);
  }
}

TEST_CASE("fixed_mass is floor(w * 2^60), 0 for no mass", "[unit][bitexact]") {
  using specdec::bitexact::fixed_mass;
  CHECK(fixed_mass(1.0) == (std::uint64_t{1} << 60));
  CHECK(fixed_mass(0.5f) == (std::uint64_t{1} << 59));
  CHECK(fixed_mass(0x1p-60) == 1);
  CHECK(fixed_mass(0x1p-61) == 0);
  CHECK(fixed_mass(3 * 0x1p-61) == 1);  // floor
  CHECK(fixed_mass(0.0) == 0);
  CHECK(fixed_mass(-0.25) == 0);
  CHECK(fixed_mass(std::nan("")) == 0);
  // Floats of at least 2^-37 are exact multiples of 2^-60: no rounding at all.
  std::mt19937 gen(9);
  std::uniform_real_distribution<float> u(0x1p-37f, 1.0f);
  for (int i = 0; i < 10000; ++i) {
    const float v = u(gen);
    CHECK(static_cast<double>(fixed_mass(v)) * 0x1p-60 == static_cast<double>(v));
  }
}

TEST_CASE("sample_weights is the fixed-point inverse CDF", "[unit][bitexact]") {
  // Against the definition with 128-bit products: the smallest i whose
  // running fixed-point mass exceeds floor(U * total / 2^53).
  std::mt19937_64 gen(11);
  for (int trial = 0; trial < 2000; ++trial) {
    const std::size_t n = 1 + gen() % 300;
    std::vector<double> w(n);
    for (double& v : w)
      v = gen() % 5 == 0
              ? 0.0
              : std::ldexp(static_cast<double>(gen() % 1000000), -20 - static_cast<int>(gen() % 30));
    const std::uint64_t bits = gen() >> 11;
    const double u = static_cast<double>(bits) * 0x1p-53;
    __extension__ unsigned __int128 total = 0;
    for (const double v : w) total += specdec::bitexact::fixed_mass(v);
    specdec::TokenId want = specdec::kNoToken;
    if (total != 0) {
      const auto threshold = static_cast<std::uint64_t>((bits * total) >> 53);
      std::uint64_t acc = 0;
      for (std::size_t i = 0; i < n; ++i) {
        acc += specdec::bitexact::fixed_mass(w[i]);
        if (acc > threshold) {
          want = static_cast<specdec::TokenId>(i);
          break;
        }
      }
    }
    const auto got = specdec::row_math::sample_weights(
        [&](std::int64_t i) { return w[static_cast<std::size_t>(i)]; }, static_cast<std::int64_t>(n), u);
    INFO("trial " << trial);
    REQUIRE(got == want);
    if (got != specdec::kNoToken)
      CHECK(w[static_cast<std::size_t>(got)] > 0.0);  // never a token without mass
  }
}

TEST_CASE("log_positive and exp_nonpositive_double are within 2 ulp of the library's", "[unit][bitexact]") {
  using specdec::bitexact::exp_nonpositive_double;
  using specdec::bitexact::log_positive;
  const auto ulps = [](double got, double want) {
    return std::abs(got - want) / std::abs(std::nextafter(want, std::numeric_limits<double>::infinity()) - want);
  };
  std::mt19937_64 gen(13);
  std::uniform_real_distribution<double> mantissa(0.5, 1.0);
  double worst_log = 0.0, worst_exp = 0.0;
  for (int i = 0; i < 200000; ++i) {
    const double x = std::ldexp(mantissa(gen), 2 - static_cast<int>(gen() % 1080));  // down to subnormals
    worst_log = std::max(worst_log, ulps(log_positive(x), std::log(x)));
    const double y = -std::uniform_real_distribution<double>(0.0, i % 2 == 0 ? 700.0 : 5.0)(gen);
    worst_exp = std::max(worst_exp, ulps(exp_nonpositive_double(y), std::exp(y)));
  }
  CHECK(worst_log <= 2.0);
  CHECK(worst_exp <= 2.0);
  CHECK(log_positive(1.0) == 0.0);
  CHECK(exp_nonpositive_double(0.0) == 1.0);
  CHECK(exp_nonpositive_double(-800.0) == 0.0);
}

namespace {

// A fingerprint of bitexact.hpp's results over fixed grids: the bits the CUDA
// kernels compute. A compiler that fuses the host's multiplies and adds into
// FMAs (GCC by default where the target has them: aarch64, -march=native)
// changes it, and the host no longer equals the device.
std::uint64_t bitexact_fingerprint() {
  std::uint64_t h = 1469598103934665603ull;
  const auto mix = [&h](std::uint64_t bits) { h = (h ^ bits) * 1099511628211ull; };
  namespace bx = specdec::bitexact;
  for (int k = 0; k <= 20000; ++k) {
    const float x = -90.0f * static_cast<float>(k) / 20000.0f;
    mix(std::bit_cast<std::uint32_t>(bx::exp_nonpositive(x)));
    mix(std::bit_cast<std::uint32_t>(bx::softmax_exponent(x, 1.5f, 1.0f / 0.7f)));
    const float scale = bx::softmax_chunk_scale(x * 0.1f, 0.0f, 1.25f);
    const double z = bx::softmax_normaliser_add(1.0 + k * 1e-3, 3.0 - k * 1e-4, scale);
    mix(std::bit_cast<std::uint64_t>(z));
    mix(std::bit_cast<std::uint32_t>(bx::softmax_chunk_factor(scale, z)));
    mix(std::bit_cast<std::uint64_t>(bx::log_positive(1e-300 + k * 0.37)));
    mix(std::bit_cast<std::uint64_t>(bx::exp_nonpositive_double(-0.031 * k)));
  }
  return h;
}

}  // namespace

TEST_CASE("bitexact's functions give the reference bits (no FMA contraction on the host)", "[unit][bitexact]") {
  // Recorded from an x86-64 build (no FMA), the bits the CUDA tests matched.
  CHECK(bitexact_fingerprint() == 0xf75e7294cc4dc365ull);
}
