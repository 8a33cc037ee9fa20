// The chain kernels, specdec::cuda::chain_speculative_sampling and
// specdec::cuda::block_verification, against the host row functions they are
// built on: for the same inputs, seed and offset, the device must emit exactly
// the tokens and accepted counts of row_math::chain_speculative_sampling_row /
// row_math::block_verification_row with PhiloxUniforms{seed, b, offset} for
// batch row b (what the host rules draw from RandomStream(seed, b, offset)).
//
// [cuda] tests need a device; without one they WARN "skipped: no CUDA device"
// and pass (Catch2 v2 has no SKIP). The [unit] test needs no device.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "device_support.hpp"
#include "specdec/accept/row_math.hpp"
#include "specdec/accept/sequence_row_math.hpp"
#include "specdec/core/rng.hpp"
#include "specdec/core/status.hpp"
#include "specdec/core/types.hpp"
#include "specdec/cuda/block_verification.hpp"
#include "specdec/cuda/chain_speculative_sampling.hpp"
#include "support/catch.hpp"

namespace {

using specdec::kNoToken;
using specdec::Status;
using specdec::TokenId;
using specdec::testing::DeviceBuffer;

enum class Kernel { kSpeculativeSampling, kBlockVerification };
const char* name(Kernel k) {
  return k == Kernel::kSpeculativeSampling ? "chain_speculative_sampling" : "block_verification";
}

// LLM-like rows: softmax of N(0, 3^2) logits; a quarter of them truncated to
// their top 50 tokens (zeros force rejections and exercise the residual).
void fill_distribution(std::mt19937_64& gen, const std::vector<double>& logits, float* row) {
  const auto n = static_cast<std::int64_t>(logits.size());
  std::vector<double> w(logits.size());
  const double m = *std::max_element(logits.begin(), logits.end());
  for (std::size_t i = 0; i < w.size(); ++i) w[i] = std::exp(logits[i] - m);
  if (std::uniform_int_distribution<int>(0, 3)(gen) == 0 && n > 50) {
    std::vector<double> sorted = w;
    std::nth_element(sorted.begin(), sorted.begin() + 49, sorted.end(), std::greater<>());
    const double cut = sorted[49];
    for (double& x : w)
      if (x < cut) x = 0.0;
  }
  double total = 0.0;
  for (double x : w) total += x;
  for (std::size_t i = 0; i < w.size(); ++i) row[i] = static_cast<float>(w[i] / total);
}

TokenId sample_from(std::mt19937_64& gen, const float* row, std::int64_t vocab) {
  std::discrete_distribution<TokenId> d(row, row + vocab);
  return d(gen);
}

struct Batch {
  std::vector<float> draft_probs;     // [batch, gamma, vocab]
  std::vector<TokenId> draft_tokens;  // [batch, gamma]
  std::vector<float> target_probs;    // [batch, gamma + 1, vocab]
};

// Drafts sampled from q; targets near q (q's logits plus N(0, 1) noise) so that
// some drafts are accepted and some rejected.
Batch make_batch(std::mt19937_64& gen, std::int32_t batch, std::int32_t gamma, std::int64_t vocab) {
  Batch out;
  const auto v = static_cast<std::size_t>(vocab);
  out.draft_probs.resize(static_cast<std::size_t>(batch) * static_cast<std::size_t>(gamma) * v);
  out.draft_tokens.resize(static_cast<std::size_t>(batch) * static_cast<std::size_t>(gamma));
  out.target_probs.resize(static_cast<std::size_t>(batch) * static_cast<std::size_t>(gamma + 1) *
                          v);
  std::normal_distribution<double> normal(0.0, 1.0);
  std::vector<double> logits(v), noisy(v);
  for (std::int32_t b = 0; b < batch; ++b) {
    for (std::int32_t i = 0; i <= gamma; ++i) {
      for (double& x : logits) x = 3.0 * normal(gen);
      for (std::size_t k = 0; k < v; ++k) noisy[k] = logits[k] + normal(gen);
      float* p = out.target_probs.data() + (static_cast<std::size_t>(b) * (gamma + 1) + i) * v;
      fill_distribution(gen, noisy, p);
      if (i == gamma) break;  // the bonus row has no draft
      float* q = out.draft_probs.data() + (static_cast<std::size_t>(b) * gamma + i) * v;
      fill_distribution(gen, logits, q);
      out.draft_tokens[static_cast<std::size_t>(b) * gamma + i] = sample_from(gen, q, vocab);
    }
  }
  return out;
}

struct Result {
  std::vector<TokenId> tokens;         // [batch, gamma + 1]
  std::vector<std::int32_t> accepted;  // [batch]
};

Result run_host(Kernel kernel, const float* draft_probs, const Batch& in, std::int32_t batch, std::int32_t gamma,
                std::int64_t vocab, std::uint64_t seed, std::uint64_t offset) {
  using specdec::row_math::StridedRows;
  Result r;
  r.tokens.assign(static_cast<std::size_t>(batch) * static_cast<std::size_t>(gamma + 1), 0);
  r.accepted.assign(static_cast<std::size_t>(batch), 0);
  for (std::int32_t b = 0; b < batch; ++b) {
    const StridedRows draft{
        draft_probs == nullptr ? nullptr : draft_probs + std::int64_t{b} * gamma * vocab, vocab};
    const StridedRows target{in.target_probs.data() + std::int64_t{b} * (gamma + 1) * vocab, vocab};
    const TokenId* x = in.draft_tokens.data() + std::int64_t{b} * gamma;
    const specdec::PhiloxUniforms u{seed, static_cast<std::uint64_t>(b), offset};
    TokenId* out = r.tokens.data() + std::int64_t{b} * (gamma + 1);
    r.accepted[static_cast<std::size_t>(b)] =
        kernel == Kernel::kSpeculativeSampling
            ? specdec::row_math::chain_speculative_sampling_row(draft, x, target, gamma, vocab, u, out)
            : specdec::row_math::block_verification_row(draft, x, target, gamma, vocab, u, out);
  }
  return r;
}

Result run_device(Kernel kernel, bool with_draft_probs, const Batch& in, std::int32_t batch, std::int32_t gamma,
                  std::int64_t vocab, std::uint64_t seed, std::uint64_t offset) {
  const DeviceBuffer<float> draft_probs(with_draft_probs ? in.draft_probs : std::vector<float>{});
  const DeviceBuffer<TokenId> draft_tokens(in.draft_tokens);
  const DeviceBuffer<float> target_probs(in.target_probs);
  // Filled with a value the kernel never writes, so an unwritten slot shows.
  const DeviceBuffer<TokenId> tokens(std::vector<TokenId>(
      static_cast<std::size_t>(batch) * static_cast<std::size_t>(gamma + 1), -7));
  const DeviceBuffer<std::int32_t> accepted(
      std::vector<std::int32_t>(static_cast<std::size_t>(batch), -7));
  const auto launch = kernel == Kernel::kSpeculativeSampling ? specdec::cuda::chain_speculative_sampling
                                                             : specdec::cuda::block_verification;
  const Status s = launch(with_draft_probs ? draft_probs.get() : nullptr, draft_tokens.get(), target_probs.get(),
                          tokens.get(), accepted.get(), batch, gamma, vocab, seed, offset, nullptr, nullptr);
  REQUIRE(std::string(specdec::status_string(s)) == "ok");
  REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
  return {tokens.to_host(), accepted.to_host()};
}

}  // namespace

TEST_CASE("The chain kernels' launchers reject bad arguments before touching a device", "[unit]") {
  const auto kernel = GENERATE(Kernel::kSpeculativeSampling, Kernel::kBlockVerification);
  INFO(name(kernel));
  const auto launch = kernel == Kernel::kSpeculativeSampling ? specdec::cuda::chain_speculative_sampling
                                                             : specdec::cuda::block_verification;
  // Host addresses stand in for device pointers: a call that passed validation
  // would launch on them, so every call below must fail validation.
  float probs[4] = {};
  TokenId tokens[4] = {};
  std::int32_t accepted[1] = {};
  const auto call = [&](const float* q, const TokenId* x, const float* p, TokenId* out,
                        std::int32_t* n, std::int32_t batch, std::int32_t gamma,
                        std::int64_t vocab) {
    return launch(q, x, p, out, n, batch, gamma, vocab, 1, 0, nullptr, nullptr);
  };
  const auto kInvalid = Status::kInvalidArgument;
  CHECK(call(probs, tokens, probs, tokens, accepted, -1, 1, 2) == kInvalid);
  CHECK(call(probs, tokens, probs, tokens, accepted, 1, -1, 2) == kInvalid);
  CHECK(call(probs, tokens, probs, tokens, accepted, 1, 1, 0) == kInvalid);
  CHECK(call(probs, tokens, probs, tokens, accepted, 1, 1, -5) == kInvalid);
  CHECK(call(probs, tokens, probs, tokens, accepted, 1, 1, std::int64_t{1} << 31) == kInvalid);
  CHECK(call(probs, tokens, probs, tokens, accepted, 1, INT32_MAX, 2) == kInvalid);
  CHECK(call(probs, tokens, probs, tokens, accepted, INT32_MAX, 1 << 20, INT32_MAX) == kInvalid);
  CHECK(call(probs, nullptr, probs, tokens, accepted, 1, 1, 2) == kInvalid);
  CHECK(call(probs, tokens, nullptr, tokens, accepted, 1, 1, 2) == kInvalid);
  CHECK(call(probs, tokens, probs, nullptr, accepted, 1, 1, 2) == kInvalid);
  CHECK(call(probs, tokens, probs, tokens, nullptr, 1, 1, 2) == kInvalid);
  CHECK(call(nullptr, tokens, nullptr, nullptr, nullptr, 1, 0, 2) == kInvalid);

  // An empty batch launches nothing, so it needs no memory.
  CHECK(call(nullptr, nullptr, nullptr, nullptr, nullptr, 0, 3, 10) == Status::kOk);
  CHECK(specdec::cuda::cuda_device_count(nullptr) == kInvalid);
  CHECK(std::string(specdec::status_string(Status::kInvalidArgument)) == "invalid argument");
}

TEST_CASE("The chain kernels' FlatTrees launchers reject bad arguments before touching a device", "[unit]") {
  const auto kernel = GENERATE(Kernel::kSpeculativeSampling, Kernel::kBlockVerification);
  INFO(name(kernel));
  const auto launch = kernel == Kernel::kSpeculativeSampling ? specdec::cuda::chain_speculative_sampling_flat
                                                             : specdec::cuda::block_verification_flat;
  std::int32_t ints[4] = {};
  TokenId ids[4] = {};
  std::uint8_t draws[4] = {};
  float probs[8] = {};
  // Everything but one argument valid; host addresses stand in for device
  // pointers, so each call below must fail validation.
  const auto call = [&](std::int32_t batch, std::int32_t nodes, std::int32_t max_depth, std::int64_t vocab) {
    return launch(ints, ids, draws, probs, probs, nullptr, ints, ints, ids, batch, nodes, max_depth, vocab, 1, 0,
                  nullptr, nullptr);
  };
  const auto kInvalid = Status::kInvalidArgument;
  CHECK(call(-1, 1, 1, 2) == kInvalid);
  CHECK(call(1, -1, 0, 2) == kInvalid);
  CHECK(call(1, 1, 2, 2) == kInvalid);  // deeper than the nodes allow
  CHECK(call(1, 1, -1, 2) == kInvalid);
  CHECK(call(1, 1, 1, 0) == kInvalid);
  CHECK(call(1, 1, 1, (std::int64_t{1} << 21) + 1) == kInvalid);  // wider than a block draws
  CHECK(call(1, INT32_MAX, 1, 2) == kInvalid);
  CHECK(launch(ints, ids, nullptr, probs, probs, nullptr, ints, ints, ids, 1, 1, 1, 2, 1, 0, nullptr, nullptr) ==
        kInvalid);
  CHECK(launch(ints, ids, draws, probs, nullptr, nullptr, ints, ints, ids, 1, 1, 1, 2, 1, 0, nullptr, nullptr) ==
        kInvalid);
  CHECK(launch(ints, ids, draws, probs, probs, nullptr, nullptr, ints, ids, 1, 1, 1, 2, 1, 0, nullptr, nullptr) ==
        kInvalid);
  CHECK(launch(ints, ids, draws, probs, probs, nullptr, ints, nullptr, ids, 1, 1, 1, 2, 1, 0, nullptr, nullptr) ==
        kInvalid);
  CHECK(launch(ints, ids, draws, probs, probs, nullptr, ints, ints, nullptr, 1, 1, 1, 2, 1, 0, nullptr, nullptr) ==
        kInvalid);
  CHECK(launch(nullptr, ids, draws, probs, probs, nullptr, ints, ints, ids, 1, 1, 1, 2, 1, 0, nullptr, nullptr) ==
        kInvalid);
  // An empty batch launches nothing.
  CHECK(launch(nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, nullptr, 0, 3, 3, 10, 1, 0,
               nullptr, nullptr) == Status::kOk);
}

TEST_CASE("The chain kernels emit exactly the host row functions' tokens", "[cuda]") {
  const auto kernel = GENERATE(Kernel::kSpeculativeSampling, Kernel::kBlockVerification);
  INFO(name(kernel));
  SPECDEC_SKIP_WITHOUT_DEVICE();
  std::mt19937_64 gen(20240611);  // the inputs; the draws are Philox(seed, row, offset)
  std::int32_t total_accepted = 0, total_rejections = 0;
  for (const std::int64_t vocab : {std::int64_t{1000}, std::int64_t{8192}, std::int64_t{32000}, std::int64_t{128256}}) {
    // Many rows at the small vocabularies (more than one block of the
    // one-thread-per-row kernels); vocabularies past one 8192-token chunk of
    // the block draw.
    const std::int32_t batch = vocab == 1000 ? 300 : vocab == 8192 ? 60 : vocab == 32000 ? 20 : 4;
    for (std::int32_t gamma = 1; gamma <= 8; ++gamma) {
      const Batch in = make_batch(gen, batch, gamma, vocab);
      for (const bool with_draft_probs : {true, false}) {
        const std::uint64_t seed = 0x9E3779B97F4A7C15ull ^ static_cast<std::uint64_t>(gamma);
        const std::uint64_t offset = 3 + 7 * static_cast<std::uint64_t>(gamma);
        CAPTURE(vocab, batch, gamma, with_draft_probs, seed, offset);
        const Result host = run_host(kernel, with_draft_probs ? in.draft_probs.data() : nullptr, in, batch,
                                     gamma, vocab, seed, offset);
        const Result device = run_device(kernel, with_draft_probs, in, batch, gamma, vocab, seed, offset);
        REQUIRE(device.accepted == host.accepted);
        REQUIRE(device.tokens == host.tokens);
        for (const std::int32_t n : host.accepted) {
          total_accepted += n;
          total_rejections += n < gamma ? 1 : 0;
        }
      }
    }
  }
  // The inputs exercise both outcomes, so the equality covers both paths.
  CHECK(total_accepted > 0);
  CHECK(total_rejections > 0);
}

TEST_CASE("The chain kernels draw row b from Philox stream b at the offset", "[cuda]") {
  const auto kernel = GENERATE(Kernel::kSpeculativeSampling, Kernel::kBlockVerification);
  INFO(name(kernel));
  SPECDEC_SKIP_WITHOUT_DEVICE();
  // gamma = 0: the single emitted token is the inverse-CDF draw of uniform
  // philox_uniform(seed, b, offset) from the row's target distribution.
  std::mt19937_64 gen(7);
  const std::int32_t batch = 64, gamma = 0;
  const std::int64_t vocab = 1000;
  const Batch in = make_batch(gen, batch, gamma, vocab);
  const std::uint64_t seed = 42, offset = 1001;
  const Result device = run_device(kernel, false, in, batch, gamma, vocab, seed, offset);
  for (std::int32_t b = 0; b < batch; ++b) {
    CAPTURE(b);
    const double u = specdec::philox_uniform(seed, static_cast<std::uint64_t>(b), offset);
    CHECK(device.accepted[static_cast<std::size_t>(b)] == 0);
    CHECK(
        device.tokens[static_cast<std::size_t>(b)] ==
        specdec::row_math::sample_row(in.target_probs.data() + std::int64_t{b} * vocab, vocab, u));
  }
}

TEST_CASE("The chain kernels flag rows whose drafted token is out of range", "[cuda]") {
  const auto kernel = GENERATE(Kernel::kSpeculativeSampling, Kernel::kBlockVerification);
  INFO(name(kernel));
  SPECDEC_SKIP_WITHOUT_DEVICE();
  std::mt19937_64 gen(11);
  const std::int32_t batch = 3, gamma = 4;
  const std::int64_t vocab = 1000;
  Batch in = make_batch(gen, batch, gamma, vocab);
  in.draft_tokens[1 * gamma + 2] = static_cast<TokenId>(vocab);  // row 1
  in.draft_tokens[2 * gamma + 0] = -3;                           // row 2
  const Result device = run_device(kernel, true, in, batch, gamma, vocab, 5, 0);
  const Result host = run_host(kernel, in.draft_probs.data(), in, 1, gamma, vocab, 5, 0);
  CHECK(device.accepted[0] == host.accepted[0]);  // row 0 is sampled as usual
  for (std::size_t b = 1; b < 3; ++b) {
    CAPTURE(b);
    CHECK(device.accepted[b] == -1);
    for (std::size_t j = 0; j <= static_cast<std::size_t>(gamma); ++j)
      CHECK(device.tokens[b * (gamma + 1) + j] == kNoToken);
  }
}
