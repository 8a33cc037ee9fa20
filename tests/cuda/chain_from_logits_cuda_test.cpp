// specdec::cuda::chain_speculative_sampling_from_logits against the host: the
// host Warper at each request's temperature, then
// row_math::chain_speculative_sampling_row with PhiloxUniforms{seed, b,
// offset}. The device must emit exactly those tokens and accepted counts, on
// random logits of many shapes (peaked, flat, tied, masked, a chunk with no
// finite logit), greedy and sampled requests mixed in one launch, drafts with
// and without draft probabilities, one workspace reused launch after launch;
// and flag exactly the requests the host would refuse.
//
// [cuda] tests need a device; without one they WARN "skipped: no CUDA device"
// and pass. The [unit] test needs no device.
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <limits>
#include <random>
#include <string>
#include <vector>

#include "device_support.hpp"
#include "specdec/accept/row_math.hpp"
#include "specdec/core/rng.hpp"
#include "specdec/core/sampling_params.hpp"
#include "specdec/core/status.hpp"
#include "specdec/core/types.hpp"
#include "specdec/core/warp.hpp"
#include "specdec/cuda/chain_speculative_sampling.hpp"
#include "support/catch.hpp"

namespace {

using specdec::kNoToken;
using specdec::Status;
using specdec::TokenId;
using specdec::testing::DeviceBuffer;

constexpr float kInf = std::numeric_limits<float>::infinity();

struct Round {
  std::int32_t batch = 0, gamma = 0;
  std::int64_t vocab = 0;
  std::vector<float> target_logits;   // [batch, gamma + 1, vocab]
  std::vector<float> draft_probs;     // [batch, gamma, vocab]
  std::vector<TokenId> draft_tokens;  // [batch, gamma]
  std::vector<float> temperatures;    // [batch]
};

// Logits of many shapes; q the warp of the target's logits plus noise, so
// that drafts are accepted and rejected; drafts sampled from q, or the
// target row's argmax.
Round make_round(std::mt19937& gen, std::int32_t batch, std::int32_t gamma, std::int64_t vocab) {
  Round r{batch, gamma, vocab, {}, {}, {}, {}};
  const auto v = static_cast<std::size_t>(vocab);
  r.target_logits.resize(static_cast<std::size_t>(batch) * static_cast<std::size_t>(gamma + 1) * v);
  r.draft_probs.resize(static_cast<std::size_t>(batch) * static_cast<std::size_t>(gamma) * v);
  r.draft_tokens.resize(static_cast<std::size_t>(batch) * static_cast<std::size_t>(gamma));
  std::normal_distribution<float> noise(0.0f, 1.0f);
  for (std::int32_t b = 0; b < batch; ++b) {
    r.temperatures.push_back(std::vector<float>{0.0f, 0.3f, 0.8f, 1.0f, 2.5f}[gen() % 5]);
    for (std::int32_t i = 0; i <= gamma; ++i) {
      float* x = r.target_logits.data() + (static_cast<std::size_t>(b) * (gamma + 1) + i) * v;
      const int shape = static_cast<int>(gen() % 4);
      std::normal_distribution<float> normal(0.0f, shape == 0 ? 0.3f : shape == 1 ? 3.0f : 8.0f);
      for (std::size_t k = 0; k < v; ++k) x[k] = shape == 3 ? static_cast<float>(gen() % 7) : normal(gen);
      if (gen() % 3 == 0)
        for (std::size_t m = 0; m < v / 4; ++m) x[gen() % v] = -kInf;
      if (vocab > 8192 && gen() % 4 == 0) {  // a chunk with no finite logit
        const std::size_t c = 8192 * (gen() % ((v + 8191) / 8192));
        std::fill(x + c, x + std::min(v, c + 8192), -kInf);
      }
      if (std::all_of(x, x + v, [](float l) { return std::isinf(l); })) x[0] = 0.0f;
      if (i == gamma) break;
      // q: the softmax of the target's logits plus noise (in double).
      float* q = r.draft_probs.data() + (static_cast<std::size_t>(b) * gamma + i) * v;
      const float top = *std::max_element(x, x + v);
      double total = 0.0;
      for (std::size_t k = 0; k < v; ++k) {
        q[k] = std::isinf(x[k]) ? 0.0f : static_cast<float>(std::exp(static_cast<double>(x[k] - top + noise(gen))));
        total += q[k];
      }
      for (std::size_t k = 0; k < v; ++k) q[k] = static_cast<float>(q[k] / total);
      TokenId& t = r.draft_tokens[static_cast<std::size_t>(b) * gamma + i];
      if (gen() % 3 == 0) {
        t = specdec::argmax(std::span<const float>(x, v));
      } else {
        std::discrete_distribution<TokenId> d(q, q + v);
        t = d(gen);
      }
    }
  }
  return r;
}

// Puts every other request's drafts on the edge of acceptance: q(x) = p(x) /
// u in float, so that u * q(x) < p(x) turns on the last bits of p(x), and a
// device p(x) one ulp off the host's would flip about half of the tests.
void put_on_the_edge(Round& r, std::uint64_t seed, std::uint64_t offset) {
  const auto v = static_cast<std::size_t>(r.vocab);
  specdec::Warper warp;
  std::vector<float> p(v);
  for (std::int32_t b = 0; b < r.batch; b += 2) {
    const specdec::PhiloxUniforms u{seed, static_cast<std::uint64_t>(b), offset};
    for (std::int32_t i = 0; i < r.gamma; ++i) {
      warp(std::span<const float>(r.target_logits.data() + (static_cast<std::size_t>(b) * (r.gamma + 1) + i) * v, v),
           specdec::SamplingParams{.temperature = r.temperatures[static_cast<std::size_t>(b)]}, p);
      const auto x = static_cast<std::size_t>(r.draft_tokens[static_cast<std::size_t>(b) * r.gamma + i]);
      const double ui = u[static_cast<std::uint64_t>(i)];
      if (p[x] > 0.0f && ui > 0.0)
        r.draft_probs[(static_cast<std::size_t>(b) * r.gamma + i) * v + x] = static_cast<float>(p[x] / ui);
    }
  }
}

struct Result {
  std::vector<TokenId> tokens;         // [batch, gamma + 1]
  std::vector<std::int32_t> accepted;  // [batch]
};

// The host: warp every target row, then the chain rule.
Result run_host(const Round& r, bool with_draft_probs, std::uint64_t seed, std::uint64_t offset) {
  using specdec::row_math::StridedRows;
  const auto v = static_cast<std::size_t>(r.vocab);
  std::vector<float> target(r.target_logits.size());
  specdec::Warper warp;
  Result out;
  out.tokens.assign(static_cast<std::size_t>(r.batch) * static_cast<std::size_t>(r.gamma + 1), 0);
  for (std::int32_t b = 0; b < r.batch; ++b) {
    for (std::int32_t i = 0; i <= r.gamma; ++i) {
      const std::size_t at = (static_cast<std::size_t>(b) * (r.gamma + 1) + i) * v;
      warp(std::span<const float>(r.target_logits.data() + at, v),
           specdec::SamplingParams{.temperature = r.temperatures[static_cast<std::size_t>(b)]},
           std::span<float>(target.data() + at, v));
    }
    const StridedRows draft{with_draft_probs ? r.draft_probs.data() + std::int64_t{b} * r.gamma * r.vocab : nullptr,
                            r.vocab};
    const StridedRows rows{target.data() + std::int64_t{b} * (r.gamma + 1) * r.vocab, r.vocab};
    out.accepted.push_back(specdec::row_math::chain_speculative_sampling_row(
        draft, r.draft_tokens.data() + std::int64_t{b} * r.gamma, rows, r.gamma, r.vocab,
        specdec::PhiloxUniforms{seed, static_cast<std::uint64_t>(b), offset},
        out.tokens.data() + std::int64_t{b} * (r.gamma + 1)));
  }
  return out;
}

// A workspace, zeroed once, for launches of up to the given shape.
struct Workspace {
  explicit Workspace(std::size_t size) : bytes(size) {
    REQUIRE(cudaMalloc(&ptr, std::max<std::size_t>(size, 16)) == cudaSuccess);
    REQUIRE(cudaMemset(ptr, 0, std::max<std::size_t>(size, 16)) == cudaSuccess);
  }
  Workspace(const Workspace&) = delete;
  Workspace& operator=(const Workspace&) = delete;
  ~Workspace() { cudaFree(ptr); }
  void* ptr = nullptr;
  std::size_t bytes;
};

Result run_device(const Round& r, bool with_draft_probs, std::uint64_t seed, std::uint64_t offset,
                  Workspace& ws) {
  const DeviceBuffer<float> logits(r.target_logits), q(with_draft_probs ? r.draft_probs : std::vector<float>{}),
      temperatures(r.temperatures);
  const DeviceBuffer<TokenId> drafts(r.draft_tokens);
  const DeviceBuffer<TokenId> tokens(
      std::vector<TokenId>(static_cast<std::size_t>(r.batch) * static_cast<std::size_t>(r.gamma + 1), -7));
  const DeviceBuffer<std::int32_t> accepted(std::vector<std::int32_t>(static_cast<std::size_t>(r.batch), -7));
  const Status s = specdec::cuda::chain_speculative_sampling_from_logits(
      with_draft_probs ? q.get() : nullptr, drafts.get(), logits.get(), temperatures.get(), tokens.get(),
      accepted.get(), r.batch, r.gamma, r.vocab, seed, offset, ws.ptr, ws.bytes);
  REQUIRE(std::string(specdec::status_string(s)) == "ok");
  REQUIRE(cudaDeviceSynchronize() == cudaSuccess);
  return {tokens.to_host(), accepted.to_host()};
}

}  // namespace

TEST_CASE("chain_speculative_sampling_from_logits rejects bad arguments before touching a device", "[unit]") {
  using specdec::cuda::chain_from_logits_workspace_bytes;
  using specdec::cuda::chain_speculative_sampling_from_logits;
  float f[4] = {};
  TokenId tok[4] = {};
  std::int32_t n[2] = {};
  const auto launch = [&](std::int32_t batch, std::int32_t gamma, std::int64_t vocab, void* w, std::size_t bytes,
                          const float* temperatures = nullptr) {
    return chain_speculative_sampling_from_logits(nullptr, tok, f, temperatures == nullptr ? f : temperatures, tok,
                                                  n, batch, gamma, vocab, 1, 0, w, bytes);
  };
  CHECK(chain_from_logits_workspace_bytes(1, 31, 1 << 18) > 0);
  CHECK(chain_from_logits_workspace_bytes(1, 32, 1000) == 0);               // 33 rows
  CHECK(chain_from_logits_workspace_bytes(1, 4, (1 << 18) + 1) == 0);       // wider than 2^18
  CHECK(chain_from_logits_workspace_bytes(13108, 4, 1000) == 0);            // 65540 rows
  CHECK(chain_from_logits_workspace_bytes(-1, 4, 1000) == 0);
  const std::size_t need = chain_from_logits_workspace_bytes(1, 2, 100);
  REQUIRE(need > 0);
  std::vector<std::max_align_t> storage(need / sizeof(std::max_align_t) + 2);  // 16-byte aligned
  char* ws = reinterpret_cast<char*>(storage.data());
  CHECK(launch(1, 32, 100, ws, 2 * need) == Status::kInvalidArgument);
  CHECK(launch(1, 2, (1 << 18) + 1, ws, 2 * need) == Status::kInvalidArgument);
  CHECK(launch(1, 2, 100, nullptr, need) == Status::kInvalidArgument);
  CHECK(launch(1, 2, 100, ws + 8, need) == Status::kInvalidArgument);  // misaligned
  CHECK(launch(1, 2, 100, ws, need - 1) == Status::kInvalidArgument);
  CHECK(chain_speculative_sampling_from_logits(nullptr, tok, f, nullptr, tok, n, 1, 2, 100, 1, 0, ws, need) ==
        Status::kInvalidArgument);  // no temperatures
  CHECK(launch(-1, 2, 100, ws, need) == Status::kInvalidArgument);
  CHECK(launch(1, 2, 0, ws, need) == Status::kInvalidArgument);
  CHECK(launch(0, 2, 100, nullptr, 0) == Status::kOk);  // nothing to do, no device touched
}

TEST_CASE("chain_speculative_sampling_from_logits emits exactly the warp and the host rule's tokens", "[cuda]") {
  SPECDEC_SKIP_WITHOUT_DEVICE();
  std::mt19937 gen(41);
  // Under compute-sanitizer (scripts/gpu-check.sh sets SPECDEC_CUDA_QUICK): one launch per shape.
  const bool quick = std::getenv("SPECDEC_CUDA_QUICK") != nullptr;
  Workspace ws(specdec::cuda::chain_from_logits_workspace_bytes(64, 8, 128256));
  int launches = 0, rejected = 0, all_accepted = 0, greedy = 0;
  struct Case {
    std::int64_t vocab;
    std::int32_t batch, gamma, repeats;
  };
  for (const Case c : {Case{3, 64, 4, 20}, Case{1000, 64, 8, 20}, Case{8192, 32, 4, 12}, Case{8193, 16, 1, 8},
                       Case{32000, 32, 4, 8}, Case{40000, 16, 0, 4}, Case{128256, 8, 4, 6},
                       Case{1 << 18, 2, 8, 2}}) {
    for (std::int32_t rep = 0; rep < (quick ? 1 : c.repeats); ++rep) {
      Round r = make_round(gen, c.batch, c.gamma, c.vocab);
      const bool with_q = (rep + launches) % 2 == 0;
      const std::uint64_t seed = 1000 + static_cast<std::uint64_t>(launches), offset = gen() % 1000;
      if (with_q) put_on_the_edge(r, seed, offset);
      const Result want = run_host(r, with_q, seed, offset);
      REQUIRE(ws.bytes >= specdec::cuda::chain_from_logits_workspace_bytes(c.batch, c.gamma, c.vocab));
      const Result got = run_device(r, with_q, seed, offset, ws);
      ++launches;
      INFO("V " << c.vocab << ", batch " << c.batch << ", gamma " << c.gamma << ", draft probs " << with_q);
      REQUIRE(got.accepted == want.accepted);
      REQUIRE(got.tokens == want.tokens);
      for (std::int32_t b = 0; b < r.batch; ++b) {
        rejected += want.accepted[static_cast<std::size_t>(b)] < r.gamma;
        all_accepted += r.gamma > 0 && want.accepted[static_cast<std::size_t>(b)] == r.gamma;
        greedy += r.temperatures[static_cast<std::size_t>(b)] == 0.0f;
      }
    }
  }
  // The cases exercised both draws (residual and bonus) and both kinds of request.
  if (quick) return;
  CHECK(rejected > 100);
  CHECK(all_accepted > 20);
  CHECK(greedy > 50);
}

TEST_CASE("chain_speculative_sampling_from_logits flags the requests the host refuses, and only those", "[cuda]") {
  SPECDEC_SKIP_WITHOUT_DEVICE();
  std::mt19937 gen(43);
  constexpr std::int32_t kBatch = 6, kGamma = 3;
  constexpr std::int64_t kVocab = 20000;
  Round r = make_round(gen, kBatch, kGamma, kVocab);
  const auto logit = [&](std::int32_t b, std::int32_t i, std::int64_t k) -> float& {
    return r.target_logits[(static_cast<std::size_t>(b) * (kGamma + 1) + static_cast<std::size_t>(i)) * kVocab +
                           static_cast<std::size_t>(k)];
  };
  logit(1, 2, 12345) = std::nanf("");                                      // a NaN logit
  logit(2, 3, 7) = kInf;                                                   // +inf, in the bonus row
  std::fill(&logit(3, 0, 0), &logit(3, 0, 0) + kVocab, -kInf);             // every logit masked
  r.temperatures[4] = -0.5f;                                               // a negative temperature
  r.draft_tokens[5 * kGamma + 1] = static_cast<TokenId>(kVocab);           // a token outside the vocabulary
  Workspace ws(specdec::cuda::chain_from_logits_workspace_bytes(kBatch, kGamma, kVocab));
  const Result got = run_device(r, true, 5, 0, ws);
  for (std::int32_t b = 1; b < kBatch; ++b) {
    INFO("request " << b);
    CHECK(got.accepted[static_cast<std::size_t>(b)] == -1);
    for (std::int32_t j = 0; j <= kGamma; ++j)
      CHECK(got.tokens[static_cast<std::size_t>(b) * (kGamma + 1) + static_cast<std::size_t>(j)] == kNoToken);
  }
  // Request 0 is intact, and matches the host.
  Round first = r;
  first.batch = 1;
  first.target_logits.resize(static_cast<std::size_t>(kGamma + 1) * kVocab);
  first.draft_probs.resize(static_cast<std::size_t>(kGamma) * kVocab);
  first.draft_tokens.resize(kGamma);
  first.temperatures.resize(1);
  const Result want = run_host(first, true, 5, 0);
  CHECK(got.accepted[0] == want.accepted[0]);
  CHECK(std::vector<TokenId>(got.tokens.begin(), got.tokens.begin() + kGamma + 1) == want.tokens);
}

TEST_CASE("chain_speculative_sampling_from_logits falls back to p when the residual is empty, as the host does",
          "[cuda]") {
  SPECDEC_SKIP_WITHOUT_DEVICE();
  // Request 0, greedy: q one-hot at the argmax, the draft another token.
  // Request 1, T = 0.8: q equal to the warped p, the draft a masked token.
  // Both reject, and p - q has no positive mass: the host draws from p.
  std::mt19937 gen(47);
  constexpr std::int32_t kGamma = 2;
  constexpr std::int64_t kVocab = 9000;
  Round r = make_round(gen, 2, kGamma, kVocab);
  r.temperatures = {0.0f, 0.8f};
  specdec::Warper warp;
  const auto v = static_cast<std::size_t>(kVocab);
  for (std::int32_t b = 0; b < 2; ++b) {
    const std::size_t row = static_cast<std::size_t>(b) * (kGamma + 1) * v;  // row 0 of request b
    float* x = r.target_logits.data() + row;
    x[5] = -kInf;
    float* q = r.draft_probs.data() + static_cast<std::size_t>(b) * kGamma * v;
    warp(std::span<const float>(x, v), specdec::SamplingParams{.temperature = r.temperatures[b]},
         std::span<float>(q, v));
    r.draft_tokens[static_cast<std::size_t>(b) * kGamma] = 5;
  }
  Workspace ws(specdec::cuda::chain_from_logits_workspace_bytes(2, kGamma, kVocab));
  const Result want = run_host(r, true, 9, 3);
  const Result got = run_device(r, true, 9, 3, ws);
  CHECK(want.accepted == std::vector<std::int32_t>{0, 0});
  CHECK(want.tokens[0] == specdec::argmax(std::span<const float>(r.target_logits.data(), v)));
  CHECK(got.accepted == want.accepted);
  CHECK(got.tokens == want.tokens);
}
