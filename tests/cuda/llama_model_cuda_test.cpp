// cuda::LlamaModel against a Llama forward in plain loops
// (support/reference_llama.hpp): the logits of prefills, decode steps,
// ragged batches and trees under their masks, through accept, extend_staged
// and rollback, with f32 and bf16 weights, tied and untied heads; a
// verification's rows equal to the autoregressive steps' bit for bit; the
// errors of the host model. Without a device the [cuda] tests WARN and pass.
#include <cuda_runtime.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <string>
#include <vector>

#include "device_support.hpp"
#include "specdec/accept/greedy.hpp"
#include "specdec/accept/recursive_rejection_sampling.hpp"
#include "specdec/core/bit_matrix.hpp"
#include "specdec/core/error.hpp"
#include "specdec/cuda/device_verifier.hpp"
#include "specdec/cuda/llama_model.hpp"
#include "specdec/draft/model_drafter.hpp"
#include "specdec/engine/autoregressive_decoder.hpp"
#include "specdec/engine/speculative_decoder.hpp"
#include "specdec/policy/fixed_length.hpp"
#include "specdec/tree/chain_builder.hpp"
#include "specdec/tree/dynamic_tree_builder.hpp"
#include "support/catch.hpp"
#include "support/llama_checks.hpp"
#include "support/reference_llama.hpp"

namespace sd = specdec;
using sd::TokenId;
using sd::testing::check_row;
using sd::testing::positions_from;
using sd::testing::run;

static_assert(sd::Model<sd::cuda::LlamaModel>);

namespace {

sd::io::LlamaConfig tiny_config(bool tied) { return sd::testing::tiny_llama_config(64, 96, 2, tied); }

// A reference model and the CUDA model loaded from its checkpoint.
struct Pair {
  sd::testing::ReferenceLlama ref;
  sd::cuda::LlamaModel gpu;
};
Pair make_pair(bool tied, sd::DType weights, const char* dir_name) {
  sd::testing::ReferenceLlama ref(tiny_config(tied), 11, weights == sd::DType::kBF16);
  const auto dir = std::filesystem::temp_directory_path() / dir_name;
  std::filesystem::remove_all(dir);
  ref.save(dir);
  return {std::move(ref), sd::cuda::LlamaModel::load(dir, weights)};
}

}  // namespace

TEST_CASE("cuda::LlamaModel's logits equal a plain forward's: prefill, steps, a ragged batch", "[cuda]") {
  SPECDEC_SKIP_WITHOUT_DEVICE();
  for (const bool tied : {false, true})
    for (const auto dtype : {sd::DType::kF32, sd::DType::kBF16}) {
      INFO("tied " << tied << ", " << sd::dtype_name(dtype));
      auto [ref, m] = make_pair(tied, dtype, "specdec_cuda_llama_a");
      const std::vector<TokenId> prompt = {3, 14, 15, 92, 65, 35, 89, 79};
      m.open(0);
      const auto pre = run(m, 0, prompt, positions_from(0, prompt.size()));
      std::vector<TokenId> ctx;
      for (std::size_t i = 0; i < prompt.size(); ++i) {
        ctx.push_back(prompt[i]);
        check_row(pre, i, ref, ctx, 2e-3);
      }
      m.accept(0, std::vector<std::int32_t>{0, 1, 2, 3, 4, 5, 6, 7});
      CHECK(m.cached_length(0) == 8);
      for (const TokenId t : {26, 53, 58}) {  // decode steps
        const auto step = run(m, 0, {t}, {static_cast<std::int64_t>(ctx.size())});
        ctx.push_back(t);
        check_row(step, 0, ref, ctx, 2e-3);
        m.accept(0, std::vector<std::int32_t>{0});
      }
      // A ragged batch: sequence 1 prefills 3 tokens while sequence 0 steps.
      m.open(1);
      const std::vector<TokenId> other = {9, 7, 9}, next = {32};
      std::vector<float> logits(4 * static_cast<std::size_t>(m.vocab_size()));
      const auto p1 = positions_from(0, 3), p0 = positions_from(static_cast<std::int64_t>(ctx.size()), 1);
      const std::vector<sd::SequenceInput> seqs = {{1, other, p1, {}, false}, {0, next, p0, {}, false}};
      m.forward({seqs, sd::TensorView(logits.data(), sd::DType::kF32, {4, m.vocab_size()}), {}, -1});
      check_row(logits, 2, ref, other, 2e-3);
      ctx.push_back(32);
      check_row(logits, 3, ref, ctx, 2e-3);
    }
}

TEST_CASE("cuda::LlamaModel: a tree under its mask, accept(path), extend_staged and rollback", "[cuda]") {
  SPECDEC_SKIP_WITHOUT_DEVICE();
  auto [ref, m] = make_pair(false, sd::DType::kBF16, "specdec_cuda_llama_b");
  const std::vector<TokenId> prompt = {5, 8, 13, 21, 34};
  m.open(4);
  run(m, 4, prompt, positions_from(0, prompt.size()));
  m.accept(4, std::vector<std::int32_t>{0, 1, 2, 3, 4});
  // The tree: root 40 -> {41 -> 43, 42}; nodes 0: 40, 1: 41, 2: 42, 3: 43.
  const std::vector<TokenId> tree = {40, 41, 42, 43};
  const std::vector<std::int32_t> parent = {-1, 0, 0, 1};
  sd::BitMatrix mask(4);
  for (std::int32_t i = 0; i < 4; ++i)
    for (std::int32_t a = i; a >= 0; a = parent[static_cast<std::size_t>(a)]) mask.set(i, a);
  const std::vector<std::int64_t> depth = {5, 6, 6, 7};
  const auto logits = run(m, 4, tree, depth, sd::PackedMask::of(mask));
  std::vector<TokenId> base = prompt;
  const std::vector<std::vector<TokenId>> paths = {{40}, {40, 41}, {40, 42}, {40, 41, 43}};
  for (std::size_t i = 0; i < 4; ++i) {
    auto ctx = base;
    ctx.insert(ctx.end(), paths[i].begin(), paths[i].end());
    check_row(logits, i, ref, ctx, 2e-3);
  }
  // Grow the tree by one level (extend_staged): node 4 = 44 under node 2.
  sd::BitMatrix grown(5);
  for (std::int32_t i = 0; i < 4; ++i)
    for (std::int32_t j = 0; j < 4; ++j)
      if (mask.test(i, j)) grown.set(i, j);
  grown.set(4, 4);
  grown.set(4, 2);
  grown.set(4, 0);
  const auto more = run(m, 4, {44}, {7}, sd::PackedMask::of(grown), true);
  check_row(more, 0, ref, {5, 8, 13, 21, 34, 40, 42, 44}, 2e-3);
  // Accept 40 -> 42 -> 44: the next step sees exactly those.
  m.accept(4, std::vector<std::int32_t>{0, 2, 4});
  CHECK(m.cached_length(4) == 8);
  const auto after = run(m, 4, {45}, {8});
  check_row(after, 0, ref, {5, 8, 13, 21, 34, 40, 42, 44, 45}, 2e-3);
  // Roll back to the prompt and go another way.
  m.rollback(4, 5);
  const auto other = run(m, 4, {46}, {5});
  check_row(other, 0, ref, {5, 8, 13, 21, 34, 46}, 2e-3);
}

TEST_CASE(
    "cuda::LlamaModel: a verification's rows equal the steps' bit for bit, and device outputs land in place",
    "[cuda]") {
  SPECDEC_SKIP_WITHOUT_DEVICE();
  auto [ref, m] = make_pair(true, sd::DType::kBF16, "specdec_cuda_llama_c");
  const std::vector<TokenId> prompt = {1, 2, 3, 4, 5, 6}, chain = {60, 61, 62, 63, 64};
  for (const std::int32_t seq : {0, 1}) {
    m.open(seq);
    run(m, seq, prompt, positions_from(0, prompt.size()));
    m.accept(seq, std::vector<std::int32_t>{0, 1, 2, 3, 4, 5});
  }
  const auto v = static_cast<std::size_t>(m.vocab_size());
  const auto verified = run(m, 0, chain, positions_from(6, chain.size()));
  for (std::size_t i = 0; i < chain.size(); ++i) {
    const auto step = run(m, 1, {chain[i]}, {static_cast<std::int64_t>(6 + i)});
    m.accept(1, std::vector<std::int32_t>{0});
    CHECK(std::memcmp(step.data(), verified.data() + i * v, v * sizeof(float)) == 0);
  }
  // The same forward into a device view.
  m.rollback(0, 6);
  float* dev = nullptr;
  REQUIRE(cudaMalloc(reinterpret_cast<void**>(&dev), chain.size() * v * sizeof(float)) == cudaSuccess);
  const auto pos = positions_from(6, chain.size());
  const std::vector<sd::SequenceInput> seqs = {{0, chain, pos, {}, false}};
  m.forward({seqs,
             sd::TensorView(dev, sd::DType::kF32, {static_cast<std::int64_t>(chain.size()), m.vocab_size()},
                            m.device()),
             {},
             -1});
  std::vector<float> back(chain.size() * v);
  REQUIRE(cudaStreamSynchronize(static_cast<cudaStream_t>(m.stream())) == cudaSuccess);
  REQUIRE(cudaMemcpy(back.data(), dev, back.size() * sizeof(float), cudaMemcpyDeviceToHost) == cudaSuccess);
  cudaFree(dev);
  CHECK(back == verified);
  // Four sequences verifying the chain in one forward (20 rows: the
  // projections' many-row path): each sequence's rows are the same bits.
  m.rollback(0, 6);
  m.rollback(1, 6);
  for (const std::int32_t seq : {2, 3}) {
    m.open(seq);
    run(m, seq, prompt, positions_from(0, prompt.size()));
    m.accept(seq, std::vector<std::int32_t>{0, 1, 2, 3, 4, 5});
  }
  std::vector<sd::SequenceInput> four;
  for (const std::int32_t seq : {0, 1, 2, 3}) four.push_back({seq, chain, pos, {}, false});
  std::vector<float> batch(4 * chain.size() * v);
  m.forward({four,
             sd::TensorView(batch.data(), sd::DType::kF32,
                            {static_cast<std::int64_t>(4 * chain.size()), m.vocab_size()}),
             {},
             -1});
  for (std::size_t q = 0; q < 4; ++q) {
    INFO("sequence " << q);
    CHECK(std::memcmp(batch.data() + q * chain.size() * v, verified.data(), chain.size() * v * sizeof(float)) ==
          0);
  }
}

TEST_CASE("cuda::LlamaModel refuses what the host model refuses, and loads only Llama checkpoints",
          "[cuda]") {
  SPECDEC_SKIP_WITHOUT_DEVICE();
  auto [ref, m] = make_pair(false, sd::DType::kF32, "specdec_cuda_llama_d");
  CHECK_THROWS_AS(run(m, 3, {1}, {0}), sd::InvalidArgumentError);  // not open
  m.open(3);
  CHECK_THROWS_AS(run(m, 3, {97}, {0}), sd::ShapeError);
  CHECK_THROWS_AS(run(m, 3, {1}, {128}), sd::ShapeError);
  run(m, 3, {1, 2}, {0, 1});
  CHECK_THROWS_AS(m.accept(3, std::vector<std::int32_t>{1, 0}), sd::InvalidArgumentError);
  CHECK_THROWS_AS(m.rollback(3, 1), sd::InvalidArgumentError);  // nothing committed yet
  CHECK_THROWS_AS(m.close(8), sd::InvalidArgumentError);
  CHECK_THROWS_AS(sd::cuda::LlamaModel::load(std::filesystem::temp_directory_path() / "specdec_cuda_llama_d",
                                             sd::DType::kF16),
                  sd::InvalidArgumentError);
  // Random weights of the same shape: the forward runs, the logits are finite.
  auto r = sd::cuda::LlamaModel::random(tiny_config(false), 5);
  r.open(0);
  const auto logits = run(r, 0, {1, 2, 3}, {0, 1, 2});
  for (const float x : logits) REQUIRE(std::isfinite(x));
  CHECK(r.num_parameters() == 97 * 64 * 2 + 2 * (2 * 64 + (64 + 2 * 32) * 64 + 64 * 64 + 3 * 96 * 64) + 64);
}

namespace {

// Greedy speculation on the device (DeviceVerifier over the CUDA target,
// drafts from `draft` on the host path) with builder B; its tokens.
template <class Builder>
std::vector<TokenId> speculate(sd::cuda::LlamaModel& target, sd::cuda::LlamaModel& draft, Builder builder,
                               sd::DraftBudget budget, const std::vector<TokenId>& prompt,
                               const sd::GenerationOptions& options) {
  using Drafter = sd::ModelDrafter<sd::cuda::LlamaModel>;
  using Verifier = sd::cuda::DeviceVerifier<sd::cuda::LlamaModel>;
  Drafter drafter(draft, 7);
  Verifier verifier(target, {}, target.stream(), target.device());
  sd::SpeculativeDecoder<Drafter, Builder, Verifier, sd::GreedyAcceptance, sd::FixedLength> decoder(
      drafter, std::move(builder), verifier, sd::GreedyAcceptance{}, sd::FixedLength(budget), 3);
  return decoder.generate(prompt, options).tokens;
}

}  // namespace

TEST_CASE("Greedy speculation with the CUDA model equals its greedy autoregressive decoding", "[cuda]") {
  SPECDEC_SKIP_WITHOUT_DEVICE();
  auto [ref, target] = make_pair(false, sd::DType::kBF16, "specdec_cuda_llama_e");
  auto other = sd::cuda::LlamaModel::random(tiny_config(false), 9);  // a draft that is often wrong
  sd::GenerationOptions options;
  options.max_new_tokens = 40;
  options.sampling.temperature = 0.0f;
  for (const std::vector<TokenId>& prompt :
       {std::vector<TokenId>{4, 8, 15, 16, 23, 42}, std::vector<TokenId>{1}}) {
    sd::AutoregressiveDecoder<sd::cuda::LlamaModel> ar(target, 0);
    const auto want = ar.generate(prompt, options).tokens;
    REQUIRE(want.size() == 40);
    const sd::DraftBudget chain = sd::FixedLength::chain(4).budget(), tree{3, 8, 8, 0.0f};
    // The target drafting for itself: every draft accepted, long paths compacted.
    CHECK(speculate(target, target, sd::ChainBuilder{}, chain, prompt, options) == want);
    CHECK(speculate(target, other, sd::ChainBuilder{}, chain, prompt, options) == want);
    CHECK(speculate(target, other, sd::DynamicTreeBuilder{3, 3, 8}, tree, prompt, options) == want);
  }
}
