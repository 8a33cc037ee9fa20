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
      sd::testing::check_prefill_steps_batch(ref, m, 2e-3);
    }
}

TEST_CASE("cuda::LlamaModel: a tree under its mask, accept(path), extend_staged and rollback", "[cuda]") {
  SPECDEC_SKIP_WITHOUT_DEVICE();
  auto [ref, m] = make_pair(false, sd::DType::kBF16, "specdec_cuda_llama_b");
  sd::testing::check_tree_accept_rollback(ref, m, 2e-3);
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
  sd::testing::check_refusals(m);
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

TEST_CASE("Greedy speculation with the CUDA model equals its greedy autoregressive decoding", "[cuda]") {
  SPECDEC_SKIP_WITHOUT_DEVICE();
  auto [ref, target] = make_pair(false, sd::DType::kBF16, "specdec_cuda_llama_e");
  auto other = sd::cuda::LlamaModel::random(tiny_config(false), 9);  // a draft that is often wrong
  // Verified on the device (DeviceVerifier), drafts on the host path.
  sd::testing::check_greedy_speculation(
      target, other,
      [&](sd::cuda::LlamaModel& draft, auto builder, sd::DraftBudget budget,
          const std::vector<TokenId>& prompt, const sd::GenerationOptions& options) {
        using Drafter = sd::ModelDrafter<sd::cuda::LlamaModel>;
        using Verifier = sd::cuda::DeviceVerifier<sd::cuda::LlamaModel>;
        Drafter drafter(draft, 7);
        Verifier verifier(target, {}, target.stream(), target.device());
        sd::SpeculativeDecoder<Drafter, decltype(builder), Verifier, sd::GreedyAcceptance, sd::FixedLength>
            decoder(drafter, std::move(builder), verifier, sd::GreedyAcceptance{}, sd::FixedLength(budget),
                    3);
        return decoder.generate(prompt, options).tokens;
      });
}
