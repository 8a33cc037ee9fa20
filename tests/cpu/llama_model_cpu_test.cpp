// cpu::LlamaModel, the Llama model without libtorch, against a Llama forward
// in plain loops (support/reference_llama.hpp): the logits of prefills,
// decode steps, ragged batches and trees under their masks, through accept,
// extend_staged and rollback, with f32 and bf16 weights, tied and untied
// heads; a verification's rows equal to the autoregressive steps' bit for
// bit; greedy speculation equal to greedy decoding; a sink + window cache
// under the StreamingLLM mask; the errors it names.
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "specdec/accept/greedy.hpp"
#include "specdec/core/error.hpp"
#include "specdec/cpu/llama_model.hpp"
#include "specdec/cpu/row_linear.hpp"
#include "specdec/draft/model_drafter.hpp"
#include "specdec/engine/speculative_decoder.hpp"
#include "specdec/io/safetensors.hpp"
#include "specdec/verify/target_verifier.hpp"
#include "support/catch.hpp"
#include "support/llama_checks.hpp"
#include "support/reference_llama.hpp"
#include "support/sink_window_schedule.hpp"

namespace sd = specdec;
using sd::TokenId;
using sd::testing::positions_from;
using sd::testing::run;

static_assert(sd::Model<sd::cpu::LlamaModel>);

namespace {

sd::io::LlamaConfig tiny_config(bool tied) {
  return sd::testing::tiny_llama_config(64, 96, 2, tied);
}

// cpu::LlamaModel::load needs the row kernel (AVX-512F, or AVX2 and FMA).
bool row_kernel_here() {
  if (sd::cpu::RowLinear::available(sd::DType::kF32)) return true;
  WARN("this CPU has no f32 row kernel (AVX-512F, or AVX2 and FMA): cpu::LlamaModel not exercised");
  return false;
}

// The weight precisions this CPU runs (bf16 needs AVX512_BF16).
std::vector<sd::DType> precisions() {
  std::vector<sd::DType> out{sd::DType::kF32};
  if (sd::cpu::RowLinear::available(sd::DType::kBF16)) out.push_back(sd::DType::kBF16);
  return out;
}

// A reference model and the CPU model loaded from its checkpoint.
struct Pair {
  sd::testing::ReferenceLlama ref;
  sd::cpu::LlamaModel cpu;
};
Pair make_pair(bool tied, sd::DType weights, const char* dir_name, std::uint32_t seed = 11) {
  sd::testing::ReferenceLlama ref(tiny_config(tied), seed, weights == sd::DType::kBF16);
  const auto dir = std::filesystem::temp_directory_path() / dir_name;
  std::filesystem::remove_all(dir);
  ref.save(dir);
  return {std::move(ref), sd::cpu::LlamaModel::load(dir, weights)};
}

}  // namespace

TEST_CASE("cpu::LlamaModel's logits equal a plain forward's: prefill, steps, a ragged batch") {
  if (!row_kernel_here()) return;
  for (const bool tied : {false, true})
    for (const auto dtype : precisions()) {
      INFO("tied " << tied << ", " << sd::dtype_name(dtype));
      auto [ref, m] = make_pair(tied, dtype, "specdec_cpu_llama_a");
      sd::testing::check_prefill_steps_batch(ref, m, 2e-3);
    }
}

TEST_CASE("cpu::LlamaModel: a tree under its mask, accept(path), extend_staged and rollback") {
  if (!row_kernel_here()) return;
  auto [ref, m] = make_pair(false, sd::DType::kF32, "specdec_cpu_llama_b");
  sd::testing::check_tree_accept_rollback(ref, m, 2e-3);
}

TEST_CASE("cpu::LlamaModel: a verification's rows equal the steps' bit for bit, alone or among sequences") {
  if (!row_kernel_here()) return;
  for (const auto dtype : precisions()) {
    INFO(sd::dtype_name(dtype));
    auto [ref, m] = make_pair(true, dtype, "specdec_cpu_llama_c");
    const std::vector<TokenId> prompt = {1, 2, 3, 4, 5, 6};
    // 14 tokens: from PackedWeights::kFillInTeam rows on, a team of two or
    // more threads fills the rows (the calling thread alone otherwise).
    const std::vector<TokenId> chain = {60, 61, 62, 63, 64, 65, 66, 67, 68, 69, 70, 71, 72, 73};
    for (const std::int32_t seq : {0, 1, 2, 3}) {
      m.open(seq);
      run(m, seq, prompt, positions_from(0, prompt.size()));
      m.accept(seq, std::vector<std::int32_t>{0, 1, 2, 3, 4, 5});
    }
    const auto v = static_cast<std::size_t>(m.vocab_size());
    const auto pos = positions_from(6, chain.size());
    const auto verified = run(m, 0, chain, pos);
    for (std::size_t i = 0; i < chain.size(); ++i) {
      const auto step = run(m, 1, {chain[i]}, {static_cast<std::int64_t>(6 + i)});
      m.accept(1, std::vector<std::int32_t>{0});
      CHECK(std::memcmp(step.data(), verified.data() + i * v, v * sizeof(float)) == 0);
    }
    // Three sequences verifying the chain in one forward: each sequence's
    // rows are the same bits.
    m.rollback(0, 6);
    std::vector<sd::SequenceInput> three;
    for (const std::int32_t seq : {0, 2, 3}) three.push_back({seq, chain, pos, {}, false});
    std::vector<float> batch(3 * chain.size() * v);
    m.forward({three,
               sd::TensorView(batch.data(), sd::DType::kF32,
                              {static_cast<std::int64_t>(3 * chain.size()), m.vocab_size()}),
               {},
               -1});
    for (std::size_t q = 0; q < 3; ++q) {
      INFO("sequence " << q);
      CHECK(std::memcmp(batch.data() + q * chain.size() * v, verified.data(),
                        chain.size() * v * sizeof(float)) == 0);
    }
  }
}

TEST_CASE("cpu::LlamaModel names what it refuses") {
  if (!row_kernel_here()) return;
  auto [ref, m] = make_pair(false, sd::DType::kF32, "specdec_cpu_llama_d");
  sd::testing::check_refusals(m);
  const auto dir = std::filesystem::temp_directory_path() / "specdec_cpu_llama_d";
  CHECK_THROWS_AS(sd::cpu::LlamaModel::load(dir, sd::DType::kF16), sd::InvalidArgumentError);
  CHECK_THROWS_AS(
      sd::cpu::LlamaModel::load(std::filesystem::temp_directory_path() / "specdec_cpu_llama_none"),
      sd::Error);
  // A tensor no Llama layer has: a checkpoint of another architecture.
  {
    const sd::io::SafetensorsFile file(dir / "model.safetensors");
    std::vector<sd::io::NamedTensor> tensors;
    for (const auto& name : file.names()) tensors.emplace_back(name, file.view(name));
    float extra[2] = {1.0f, 2.0f};
    tensors.emplace_back("model.layers.0.self_attn.rotary_bias", sd::TensorView(extra, sd::DType::kF32, {2}));
    const auto other = std::filesystem::temp_directory_path() / "specdec_cpu_llama_extra";
    std::filesystem::remove_all(other);
    std::filesystem::create_directories(other);
    std::filesystem::copy_file(dir / "config.json", other / "config.json");
    sd::io::save_safetensors(other / "model.safetensors", tensors);
    CHECK_THROWS_WITH(sd::cpu::LlamaModel::load(other),
                      Catch::Matchers::Contains("rotary_bias is not part of a Llama model"));
  }
  // Without weights: the caches work, a forward says what is missing.
  sd::cpu::LlamaModel bare(tiny_config(false), sd::cpu::rope_tables(tiny_config(false)));
  bare.open(0);
  CHECK_THROWS_WITH(run(bare, 0, {1}, {0}), Catch::Matchers::Contains("no weights"));
  // Weights of another shape are refused by name.
  const std::vector<float> embedding(97 * 64, 0.0f);
  sd::cpu::LlamaWeights wrong;
  wrong.embedding = embedding;
  wrong.final_norm.assign(64, 1.0f);
  CHECK_THROWS_WITH(bare.set_weights(std::move(wrong)),
                    Catch::Matchers::Contains("0 layers, the config has 2"));
  CHECK_THROWS_AS(sd::cpu::LlamaModel(tiny_config(false), sd::cpu::RopeTables{}), sd::ShapeError);
}

TEST_CASE("Greedy speculation with the CPU model equals its greedy autoregressive decoding") {
  if (!row_kernel_here()) return;
  auto [ref, target] = make_pair(false, sd::DType::kF32, "specdec_cpu_llama_e");
  auto [ref2, other] = make_pair(false, sd::DType::kF32, "specdec_cpu_llama_f", 9);
  sd::testing::check_greedy_speculation(
      target, other,
      [&](sd::cpu::LlamaModel& draft, auto builder, sd::DraftBudget budget,
          const std::vector<TokenId>& prompt, const sd::GenerationOptions& options) {
        using Drafter = sd::ModelDrafter<sd::cpu::LlamaModel>;
        using Verifier = sd::TargetVerifier<sd::cpu::LlamaModel>::type;
        Drafter drafter(draft, 7);
        Verifier verifier(target);
        sd::SpeculativeDecoder<Drafter, decltype(builder), Verifier, sd::GreedyAcceptance, sd::FixedLength>
            decoder(drafter, std::move(builder), verifier, sd::GreedyAcceptance{}, sd::FixedLength(budget),
                    3);
        return decoder.generate(prompt, options).tokens;
      });
}

TEST_CASE("cpu::LlamaModel: a sink + window cache equals a dense forward under the StreamingLLM mask") {
  if (!row_kernel_here()) return;
  using Positions = sd::CachePolicy::Positions;
  const auto positions = GENERATE(Positions::kText, Positions::kCache);
  // A sink of 3 and a window of 10: 77 slots of room. Either the 79-token
  // prompt grows the empty cache for its forward, or a forward of 70 tokens
  // grows it once its window has wrapped.
  const std::int64_t late = GENERATE(0, 70);
  CAPTURE(positions == Positions::kCache, late);
  sd::testing::ReferenceLlama ref(sd::testing::tiny_llama_config(32, 48, 2), 5, false);
  const auto dir = std::filesystem::temp_directory_path() / "specdec_cpu_sink";
  std::filesystem::remove_all(dir);
  ref.save(dir);
  auto m = sd::cpu::LlamaModel::load(dir);
  const std::int64_t sink = 3, window = 10, prompt = late > 0 ? 20 : 79;
  m.open(0, sd::CachePolicy::sink_window(sink, window, positions));
  const auto room = m.cache_slots(0);
  std::int64_t after_prompt = 0;
  const auto run = sd::testing::run_sink_window_schedule(
      m, prompt, [&] { after_prompt = m.cache_slots(0); }, late);
  CHECK(after_prompt == room);  // shrunk back once the prompt was accepted
  REQUIRE(m.cached_length(0) == static_cast<std::int64_t>(run.context.size()));
  CHECK(m.cache_slots(0) == room);  // constant as the sequence grows
  const auto e = sd::testing::sink_window_errors(run, ref, sink, window, positions == Positions::kCache);
  CHECK(e.streaming < 1e-4);
  CHECK(e.dense_last > 1e-3);  // the mask matters: a dense reference differs once tokens are evicted
  if (positions == Positions::kCache) CHECK(e.text_last > 1e-3);  // and so do the positions
}
