// The row scans (core/row_kernels.hpp): the AVX-512 variants give the
// baseline variants' bits on every row, and argmax keeps its semantics
// (ties to the lowest index, -inf never preferred, an all -inf row gives 0).
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdint>
#include <limits>
#include <random>
#include <vector>

#include "specdec/accept/row_math.hpp"
#include "specdec/core/rng.hpp"
#include "specdec/core/row_kernels.hpp"
#include "support/catch.hpp"

namespace sd = specdec;
namespace rk = specdec::row_kernels;

namespace {

constexpr float kInf = std::numeric_limits<float>::infinity();

// Rows that stress the scans: peaked and flat logits, integer logits (ties
// everywhere), -inf masks, lengths around the lane and block sizes.
std::vector<std::vector<float>> rows() {
  std::mt19937 gen(17);
  std::vector<std::vector<float>> out;
  for (const std::int64_t n : {1, 2, 15, 16, 17, 63, 64, 65, 1000, 8192, 8193, 32000}) {
    for (int kind = 0; kind < 4; ++kind) {
      std::vector<float> r(static_cast<std::size_t>(n));
      std::normal_distribution<float> normal(0.0f, kind == 1 ? 8.0f : 1.5f);
      std::uniform_int_distribution<int> small(-3, 3);
      for (auto& v : r) v = kind == 2 ? static_cast<float>(small(gen)) : normal(gen);
      if (kind == 3)
        for (std::size_t i = 0; i < r.size(); i += 3) r[i] = -kInf;
      out.push_back(std::move(r));
    }
  }
  out.push_back(std::vector<float>(100, -kInf));
  return out;
}

std::int64_t naive_argmax(const std::vector<float>& r) {
  std::size_t best = 0;
  for (std::size_t i = 1; i < r.size(); ++i)
    if (r[i] > r[best]) best = i;
  return static_cast<std::int64_t>(best);
}

}  // namespace

TEST_CASE("argmax: the first largest value, -inf never preferred, all -inf gives 0", "[unit][core]") {
  for (const auto& r : rows()) {
    INFO("n " << r.size());
    CHECK(rk::argmax(r.data(), static_cast<std::int64_t>(r.size())) == naive_argmax(r));
  }
  const std::vector<float> ties{1.0f, 3.0f, -2.0f, 3.0f, 3.0f};
  CHECK(rk::argmax(ties.data(), 5) == 1);
  CHECK(rk::argmax(ties.data(), 0) == 0);
}

TEST_CASE("max_scan finds the largest value and flags NaN and +inf", "[unit][core]") {
  std::vector<float> r(1000, 0.5f);
  r[777] = 2.0f;
  auto scan = rk::max_scan(r.data(), 1000);
  CHECK(scan.max == 2.0f);
  CHECK_FALSE(scan.bad);
  for (const float bad : {std::numeric_limits<float>::quiet_NaN(), kInf}) {
    for (const std::size_t at : {std::size_t{0}, std::size_t{499}, std::size_t{999}}) {
      auto copy = r;
      copy[at] = bad;
      CHECK(rk::max_scan(copy.data(), 1000).bad);
    }
  }
  CHECK(rk::max_scan(r.data(), 0).max == -kInf);
}

TEST_CASE("The AVX-512 row kernels give the baseline's bits", "[unit][core]") {
#if SPECDEC_ROW_KERNELS_AVX512
  if (!rk::has_avx512()) {
    WARN("skipped: this CPU has no AVX-512");
    return;
  }
  for (const auto& r : rows()) {
    const auto n = static_cast<std::int64_t>(r.size());
    INFO("n " << n);
    const auto a = rk::baseline::max_scan(r.data(), n), b = rk::avx512::max_scan(r.data(), n);
    CHECK(std::bit_cast<std::uint32_t>(a.max) == std::bit_cast<std::uint32_t>(b.max));
    CHECK(a.bad == b.bad);
    CHECK(rk::baseline::first_equal(r.data(), n, a.max) == rk::avx512::first_equal(r.data(), n, a.max));
    if (a.max == -kInf) continue;
    for (const float inv_t : {1.0f, 1.25f, 1.0f / 0.7f}) {
      for (const float threshold : {-kInf, a.max - 1.0f}) {
        std::vector<float> e1(r.size()), e2(r.size());
        const double s1 = rk::baseline::exp_pass(rk::ExpPass{r.data(), n, a.max, inv_t, threshold, e1.data()});
        const double s2 = rk::avx512::exp_pass(rk::ExpPass{r.data(), n, a.max, inv_t, threshold, e2.data()});
        CHECK(std::bit_cast<std::uint64_t>(s1) == std::bit_cast<std::uint64_t>(s2));
        rk::baseline::scale(e1.data(), n, static_cast<float>(1.0 / s1));
        rk::avx512::scale(e2.data(), n, static_cast<float>(1.0 / s2));
        bool same = true;
        for (std::size_t i = 0; i < e1.size(); ++i)
          same = same && std::bit_cast<std::uint32_t>(e1[i]) == std::bit_cast<std::uint32_t>(e2[i]);
        CHECK(same);
      }
    }
    // Probability rows (the softmax of r): masses, crossings, lane sums and
    // the distribution scan.
    std::vector<float> p(r.size());
    rk::baseline::exp_pass(rk::ExpPass{r.data(), n, a.max, 1.0f, -kInf, p.data()});
    rk::baseline::scale(p.data(), n, static_cast<float>(1.0 / rk::baseline::lane_sum(p.data(), n)));
    const auto total = rk::baseline::mass_total(p.data(), n);
    CHECK(total == rk::avx512::mass_total(p.data(), n));
    for (const std::uint64_t t : {std::uint64_t{0}, total / 3, total / 2, total - 1})
      for (const std::int64_t excluded : {std::int64_t{-1}, std::int64_t{0}, n / 2})
        CHECK(rk::baseline::first_crossing(p.data(), n, t, excluded) ==
              rk::avx512::first_crossing(p.data(), n, t, excluded));
    CHECK(std::bit_cast<std::uint64_t>(rk::baseline::lane_sum(p.data(), n)) ==
          std::bit_cast<std::uint64_t>(rk::avx512::lane_sum(p.data(), n)));
    const auto d1 = rk::baseline::distribution_scan(p.data(), n), d2 = rk::avx512::distribution_scan(p.data(), n);
    CHECK(std::bit_cast<std::uint64_t>(d1.sum) == std::bit_cast<std::uint64_t>(d2.sum));
    CHECK((d1.finite && d2.finite && !d1.negative && !d2.negative));
    for (const float bad : {std::numeric_limits<float>::quiet_NaN(), kInf, -kInf, -1e-30f}) {
      auto q = p;
      q[static_cast<std::size_t>(n - 1)] = bad;
      const auto b1 = rk::baseline::distribution_scan(q.data(), n), b2 = rk::avx512::distribution_scan(q.data(), n);
      CHECK(b1.finite == b2.finite);
      CHECK(b1.negative == b2.negative);
      CHECK((!b1.finite || b1.negative));
    }
    // and both lane sums equal bitexact's lane_sum, whose shape the CUDA kernels sum in
    CHECK(std::bit_cast<std::uint64_t>(rk::baseline::lane_sum(p.data(), n)) ==
          std::bit_cast<std::uint64_t>(sd::bitexact::lane_sum(p.data(), n)));
  }
#else
  WARN("skipped: no AVX-512 variants in this build (not x86-64 GCC or clang)");
#endif
}

TEST_CASE("A float row's draw is the generic fixed-point draw's token, with and without an excluded token",
          "[unit][core]") {
  sd::RandomStream rng(9);
  for (const auto& r : rows()) {
    const auto n = static_cast<std::int64_t>(r.size());
    std::vector<float> p(r.size());
    double sum = 0.0;
    for (std::size_t i = 0; i < r.size(); ++i) sum += p[i] = std::isinf(r[i]) ? 0.0f : std::exp(r[i] / 4.0f);
    for (auto& v : p) v = static_cast<float>(v / sum);  // masses are probabilities (fixed_mass: a row below 16)
    for (int k = 0; k < 50; ++k) {
      const double u = rng.uniform();
      const sd::TokenId excluded = k % 3 == 0 ? sd::kNoToken : static_cast<sd::TokenId>((k * 7919) % n);
      const auto generic = sd::row_math::sample_weights(
          [&](std::int64_t i) { return i == excluded ? 0.0 : static_cast<double>(p[static_cast<std::size_t>(i)]); }, n,
          u);
      CHECK(sd::row_math::sample_row(p.data(), n, u, excluded) == generic);
    }
  }
  const std::vector<float> zeros(10, 0.0f);
  CHECK(sd::row_math::sample_row(zeros.data(), 10, 0.5) == sd::kNoToken);
}

TEST_CASE("The residual step equals its definition: lane_sum of max(0, r - q), then max(0, r - q) / mass",
          "[unit][core]") {
  std::mt19937 gen(5);
  std::uniform_real_distribution<double> unit(0.0, 1.0);
  for (const std::int64_t n : {1, 17, 1000, 8192, 8193, 20000}) {
    INFO("n " << n);
    std::vector<double> r(static_cast<std::size_t>(n)), q(r.size());
    for (std::size_t i = 0; i < r.size(); ++i) {
      r[i] = unit(gen) / static_cast<double>(n);
      q[i] = i % 5 == 0 ? r[i] : unit(gen) / static_cast<double>(n);  // some differences exactly 0
    }
    const double expected = sd::bitexact::lane_sum_of(
        [&](std::int64_t i) { return std::max(0.0, r[static_cast<std::size_t>(i)] - q[static_cast<std::size_t>(i)]); },
        n);
    const double mass = rk::residual_mass(r.data(), q.data(), n);
    CHECK(std::bit_cast<std::uint64_t>(mass) == std::bit_cast<std::uint64_t>(expected));
    auto sub = r;
    rk::subtract_residual(sub.data(), q.data(), n, mass);
    bool same = true;
    for (std::size_t i = 0; i < r.size(); ++i)
      same = same && std::bit_cast<std::uint64_t>(sub[i]) == std::bit_cast<std::uint64_t>(std::max(0.0, r[i] - q[i]) / mass);
    CHECK(same);
#if SPECDEC_ROW_KERNELS_AVX512
    if (rk::has_avx512()) {
      CHECK(std::bit_cast<std::uint64_t>(rk::baseline::residual_mass(r.data(), q.data(), n)) ==
            std::bit_cast<std::uint64_t>(rk::avx512::residual_mass(r.data(), q.data(), n)));
      CHECK(rk::baseline::mass_total(r.data(), n) == rk::avx512::mass_total(r.data(), n));
    }
#endif
  }
}
