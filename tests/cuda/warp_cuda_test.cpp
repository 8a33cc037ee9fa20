// specdec::cuda::warp_rows against the host Warper: for the same logits and
// parameters every device row must equal the host row bit for bit (the two
// share bitexact.hpp's arithmetic), and a row the host refuses must come back
// with the status naming why. Without a device the [cuda] tests WARN and pass.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "device_support.hpp"
#include "specdec/core/error.hpp"
#include "specdec/core/sampling_params.hpp"
#include "specdec/core/status.hpp"
#include "specdec/core/warp.hpp"
#include "specdec/cuda/warp.hpp"
#include "support/catch.hpp"

namespace {

using specdec::Status;
using specdec::cuda::RowSampling;
using specdec::cuda::WarpRowStatus;
using specdec::testing::DeviceBuffer;

constexpr float kInf = std::numeric_limits<float>::infinity();

// Rows of many shapes: peaked and flat, integer logits (ties everywhere, also
// at the top-k and top-p boundaries), masked tokens.
std::vector<float> random_logits(std::mt19937& gen, std::int64_t vocab) {
  std::vector<float> logits(static_cast<std::size_t>(vocab));
  const int shape = static_cast<int>(gen() % 4);
  std::normal_distribution<float> normal(0.0f, shape == 0 ? 0.3f : shape == 1 ? 3.0f : 8.0f);
  for (auto& l : logits) l = shape == 3 ? static_cast<float>(gen() % 7) : normal(gen);
  if (gen() % 3 == 0)
    for (std::int64_t m = 0; m < vocab / 4; ++m) logits[gen() % logits.size()] = -kInf;
  if (std::all_of(logits.begin(), logits.end(), [](float l) { return std::isinf(l); })) logits[0] = 0.0f;
  return logits;
}

RowSampling random_params(std::mt19937& gen, std::int64_t vocab) {
  RowSampling p;
  p.temperature = std::vector<float>{0.0f, 0.3f, 0.8f, 1.0f, 2.5f}[gen() % 5];
  p.top_k = gen() % 2 == 0
                ? 0
                : static_cast<std::int32_t>(
                      1 + gen() % static_cast<std::uint64_t>(std::min<std::int64_t>(vocab + 2, 200)));
  p.top_p = gen() % 4 == 0 ? 1.0f : std::vector<float>{0.05f, 0.5f, 0.9f, 0.95f, 0.999f}[gen() % 5];
  return p;
}

struct DeviceWarp {
  std::vector<float> probs;
  std::vector<std::int32_t> status;
};

DeviceWarp run_device(const std::vector<float>& logits, const std::vector<RowSampling>& params,
                      std::int64_t vocab) {
  const auto rows = static_cast<std::int32_t>(params.size());
  const DeviceBuffer<float> in(logits);
  // Poisoned, so that an unwritten entry shows.
  const DeviceBuffer<float> out(std::vector<float>(logits.size(), std::nanf("")));
  const DeviceBuffer<RowSampling> p(params);
  const DeviceBuffer<std::int32_t> status(std::vector<std::int32_t>(params.size(), -7));
  const Status s = specdec::cuda::warp_rows(in.get(), out.get(), p.get(), status.get(), rows, vocab);
  REQUIRE(std::string(specdec::status_string(s)) == "ok");
  REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
  return {out.to_host(), status.to_host()};
}

}  // namespace

TEST_CASE("cuda::warp_rows rejects bad arguments before touching a device", "[unit]") {
  float f[4] = {};
  RowSampling p[1];
  std::int32_t s[1];
  using specdec::cuda::warp_rows;
  CHECK(warp_rows(f, f, p, s, -1, 4) == Status::kInvalidArgument);
  CHECK(warp_rows(f, f, p, s, 1, 0) == Status::kInvalidArgument);
  CHECK(warp_rows(f, f, p, s, 1, (std::int64_t{1} << 24) + 1) == Status::kInvalidArgument);
  CHECK(warp_rows(nullptr, f, p, s, 1, 4) == Status::kInvalidArgument);
  CHECK(warp_rows(f, nullptr, p, s, 1, 4) == Status::kInvalidArgument);
  CHECK(warp_rows(f, f, nullptr, s, 1, 4) == Status::kInvalidArgument);
  CHECK(warp_rows(f, f, p, nullptr, 1, 4) == Status::kInvalidArgument);
  CHECK(warp_rows(nullptr, nullptr, nullptr, nullptr, 0, 4) == Status::kOk);  // nothing to do
}

TEST_CASE("cuda::warp_rows equals the host Warper bit for bit, each row with its own parameters", "[cuda]") {
  SPECDEC_SKIP_WITHOUT_DEVICE();
  std::mt19937 gen(29);
  specdec::Warper warp;
  std::int64_t rows_checked = 0, nucleus_cut = 0, top_k_cut = 0;
  struct Size {
    std::int64_t vocab;
    int rows, batches;
  };
  for (const Size size : {Size{2, 64, 4}, Size{64, 64, 4}, Size{1000, 64, 4}, Size{8192, 64, 4},
                          Size{32000, 48, 3}, Size{128256, 16, 2}, Size{262144, 4, 1}}) {
    const std::int64_t vocab = size.vocab;
    for (int batch = 0; batch < size.batches; ++batch) {
      std::vector<float> logits;
      std::vector<RowSampling> params;
      for (int r = 0; r < size.rows; ++r) {
        const auto row = random_logits(gen, vocab);
        logits.insert(logits.end(), row.begin(), row.end());
        params.push_back(random_params(gen, vocab));
      }
      const DeviceWarp got = run_device(logits, params, vocab);
      std::vector<float> want(static_cast<std::size_t>(vocab));
      for (int r = 0; r < size.rows; ++r) {
        const auto at = static_cast<std::size_t>(r) * static_cast<std::size_t>(vocab);
        const RowSampling& p = params[static_cast<std::size_t>(r)];
        warp(std::span<const float>(logits.data() + at, static_cast<std::size_t>(vocab)),
             specdec::SamplingParams{.temperature = p.temperature, .top_k = p.top_k, .top_p = p.top_p}, want);
        INFO("vocab " << vocab << ", row " << r << ", T " << p.temperature << ", top_k " << p.top_k
                      << ", top_p " << p.top_p);
        REQUIRE(got.status[static_cast<std::size_t>(r)] == 0);
        REQUIRE(std::memcmp(got.probs.data() + at, want.data(),
                            static_cast<std::size_t>(vocab) * sizeof(float)) == 0);
        ++rows_checked;
        const auto zeros = std::count(want.begin(), want.end(), 0.0f);
        nucleus_cut += p.temperature > 0.0f && p.top_p < 1.0f && p.top_k == 0 && zeros > vocab / 2;
        top_k_cut += p.temperature > 0.0f && p.top_k > 0 && p.top_k < vocab;
      }
    }
  }
  CHECK(rows_checked > 700);
  CHECK(nucleus_cut > 20);  // the nucleus alone really cut rows
  CHECK(top_k_cut > 100);
}

TEST_CASE("cuda::warp_rows flags the rows the host Warper refuses, and only those", "[cuda]") {
  SPECDEC_SKIP_WITHOUT_DEVICE();
  const std::int64_t vocab = 5003;
  std::mt19937 gen(31);
  std::vector<float> logits;
  std::vector<RowSampling> params;
  std::vector<WarpRowStatus> want;
  const auto add = [&](std::vector<float> row, RowSampling p, WarpRowStatus s) {
    logits.insert(logits.end(), row.begin(), row.end());
    params.push_back(p);
    want.push_back(s);
  };
  auto nan_row = random_logits(gen, vocab);
  nan_row[4321] = std::nanf("");
  auto inf_row = random_logits(gen, vocab);
  inf_row[7] = kInf;
  add(random_logits(gen, vocab), RowSampling{}, WarpRowStatus::kOk);
  add(nan_row, RowSampling{}, WarpRowStatus::kNonFiniteLogit);
  add(inf_row, RowSampling{.temperature = 0.0f}, WarpRowStatus::kNonFiniteLogit);
  add(std::vector<float>(static_cast<std::size_t>(vocab), -kInf), RowSampling{}, WarpRowStatus::kAllMasked);
  add(random_logits(gen, vocab), RowSampling{.temperature = -1.0f}, WarpRowStatus::kBadParams);
  add(random_logits(gen, vocab), RowSampling{.temperature = kInf}, WarpRowStatus::kBadParams);
  add(random_logits(gen, vocab), RowSampling{.top_k = -1}, WarpRowStatus::kBadParams);
  add(random_logits(gen, vocab), RowSampling{.top_p = 0.0f}, WarpRowStatus::kBadParams);
  add(random_logits(gen, vocab), RowSampling{.top_p = 1.5f}, WarpRowStatus::kBadParams);
  add(random_logits(gen, vocab), RowSampling{.temperature = 0.7f, .top_k = 40, .top_p = 0.9f},
      WarpRowStatus::kOk);
  const DeviceWarp got = run_device(logits, params, vocab);
  specdec::Warper warp;
  std::vector<float> host(static_cast<std::size_t>(vocab));
  for (std::size_t r = 0; r < params.size(); ++r) {
    INFO("row " << r);
    CHECK(got.status[r] == static_cast<std::int32_t>(want[r]));
    const auto at = r * static_cast<std::size_t>(vocab);
    const RowSampling& p = params[r];
    bool host_refused = false;
    try {
      warp(std::span<const float>(logits.data() + at, static_cast<std::size_t>(vocab)),
           specdec::SamplingParams{.temperature = p.temperature, .top_k = p.top_k, .top_p = p.top_p}, host);
    } catch (const specdec::Error&) {
      host_refused = true;
    }
    CHECK(host_refused == (want[r] != WarpRowStatus::kOk));
    if (want[r] != WarpRowStatus::kOk)  // a refused row is all zeros, never left unwritten
      CHECK(std::all_of(got.probs.begin() + static_cast<std::ptrdiff_t>(at),
                        got.probs.begin() + static_cast<std::ptrdiff_t>(at + static_cast<std::size_t>(vocab)),
                        [](float v) { return v == 0.0f; }));
    else
      CHECK(std::memcmp(got.probs.data() + at, host.data(),
                        static_cast<std::size_t>(vocab) * sizeof(float)) == 0);
  }
}
