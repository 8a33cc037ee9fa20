// cpu::LlamaModel, the Llama model without libtorch, against a Llama forward
// in plain loops (support/reference_llama.hpp): the logits of prefills,
// decode steps, ragged batches and trees under their masks, through accept,
// extend_staged and rollback, with f32 and bf16 weights, tied and untied
// heads; a verification's rows equal to the autoregressive steps' bit for
// bit; greedy speculation equal to greedy decoding; the errors it names.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "specdec/accept/greedy.hpp"
#include "specdec/core/bit_matrix.hpp"
#include "specdec/core/error.hpp"
#include "specdec/cpu/llama_model.hpp"
#include "specdec/cpu/row_linear.hpp"
#include "specdec/draft/model_drafter.hpp"
#include "specdec/engine/autoregressive_decoder.hpp"
#include "specdec/engine/speculative_decoder.hpp"
#include "specdec/policy/fixed_length.hpp"
#include "specdec/tree/chain_builder.hpp"
#include "specdec/tree/dynamic_tree_builder.hpp"
#include "specdec/verify/target_verifier.hpp"
#include "support/catch.hpp"
#include "support/llama_checks.hpp"
#include "support/reference_llama.hpp"

namespace sd = specdec;
using sd::TokenId;
using sd::testing::check_row;
using sd::testing::positions_from;
using sd::testing::run;

static_assert(sd::Model<sd::cpu::LlamaModel>);

namespace {

sd::io::LlamaConfig tiny_config(bool tied) {
  return sd::testing::tiny_llama_config(64, 96, 2, tied);
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
  for (const bool tied : {false, true})
    for (const auto dtype : precisions()) {
      INFO("tied " << tied << ", " << sd::dtype_name(dtype));
      auto [ref, m] = make_pair(tied, dtype, "specdec_cpu_llama_a");
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

TEST_CASE("cpu::LlamaModel: a tree under its mask, accept(path), extend_staged and rollback") {
  auto [ref, m] = make_pair(false, sd::DType::kF32, "specdec_cpu_llama_b");
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
  const auto logits = run(m, 4, tree, {5, 6, 6, 7}, sd::PackedMask::of(mask));
  const std::vector<std::vector<TokenId>> paths = {{40}, {40, 41}, {40, 42}, {40, 41, 43}};
  for (std::size_t i = 0; i < 4; ++i) {
    auto ctx = prompt;
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

TEST_CASE("cpu::LlamaModel: a verification's rows equal the steps' bit for bit, alone or among sequences") {
  for (const auto dtype : precisions()) {
    INFO(sd::dtype_name(dtype));
    auto [ref, m] = make_pair(true, dtype, "specdec_cpu_llama_c");
    const std::vector<TokenId> prompt = {1, 2, 3, 4, 5, 6};
    // 14 tokens: past the row kernel's team-filled rows (kFillInTeam).
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
  auto [ref, m] = make_pair(false, sd::DType::kF32, "specdec_cpu_llama_d");
  CHECK_THROWS_AS(run(m, 3, {1}, {0}), sd::InvalidArgumentError);  // not open
  m.open(3);
  CHECK_THROWS_AS(run(m, 3, {97}, {0}), sd::ShapeError);
  CHECK_THROWS_AS(run(m, 3, {1}, {128}), sd::ShapeError);
  run(m, 3, {1, 2}, {0, 1});
  CHECK_THROWS_AS(m.accept(3, std::vector<std::int32_t>{1, 0}), sd::InvalidArgumentError);
  CHECK_THROWS_AS(m.rollback(3, 1), sd::InvalidArgumentError);  // nothing committed yet
  CHECK_THROWS_AS(m.close(8), sd::InvalidArgumentError);
  const auto dir = std::filesystem::temp_directory_path() / "specdec_cpu_llama_d";
  CHECK_THROWS_AS(sd::cpu::LlamaModel::load(dir, sd::DType::kF16), sd::InvalidArgumentError);
  CHECK_THROWS_AS(
      sd::cpu::LlamaModel::load(std::filesystem::temp_directory_path() / "specdec_cpu_llama_none"),
      sd::Error);
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

namespace {

// Greedy speculation over the CPU models with builder B; its tokens.
template <class Builder>
std::vector<TokenId> speculate(sd::cpu::LlamaModel& target, sd::cpu::LlamaModel& draft, Builder builder,
                               sd::DraftBudget budget, const std::vector<TokenId>& prompt,
                               const sd::GenerationOptions& options) {
  using Drafter = sd::ModelDrafter<sd::cpu::LlamaModel>;
  using Verifier = sd::TargetVerifier<sd::cpu::LlamaModel>::type;
  Drafter drafter(draft, 7);
  Verifier verifier(target);
  sd::SpeculativeDecoder<Drafter, Builder, Verifier, sd::GreedyAcceptance, sd::FixedLength> decoder(
      drafter, std::move(builder), verifier, sd::GreedyAcceptance{}, sd::FixedLength(budget), 3);
  return decoder.generate(prompt, options).tokens;
}

}  // namespace

TEST_CASE("Greedy speculation with the CPU model equals its greedy autoregressive decoding") {
  auto [ref, target] = make_pair(false, sd::DType::kF32, "specdec_cpu_llama_e");
  auto [ref2, other] = make_pair(false, sd::DType::kF32, "specdec_cpu_llama_f", 9);  // a draft often wrong
  sd::GenerationOptions options;
  options.max_new_tokens = 40;
  options.sampling.temperature = 0.0f;
  for (const std::vector<TokenId>& prompt :
       {std::vector<TokenId>{4, 8, 15, 16, 23, 42}, std::vector<TokenId>{1}}) {
    sd::AutoregressiveDecoder<sd::cpu::LlamaModel> ar(target, 0);
    const auto want = ar.generate(prompt, options).tokens;
    REQUIRE(want.size() == 40);
    const sd::DraftBudget chain = sd::FixedLength::chain(4).budget(), tree{3, 8, 8, 0.0f};
    // The target drafting for itself: every draft accepted, long paths compacted.
    CHECK(speculate(target, target, sd::ChainBuilder{}, chain, prompt, options) == want);
    CHECK(speculate(target, other, sd::ChainBuilder{}, chain, prompt, options) == want);
    CHECK(speculate(target, other, sd::DynamicTreeBuilder{3, 3, 8}, tree, prompt, options) == want);
  }
}
