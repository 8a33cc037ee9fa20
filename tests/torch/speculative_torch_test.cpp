// The speculative decoder on the reference Llama model (tiny random weights):
// greedy speculative output equals greedy autoregressive output token for
// token with a draft model drafting chains, and the default models in models/
// load and generate end to end.
#include <ATen/ATen.h>

#include <deque>
#include <filesystem>
#include <fstream>
#include <map>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "specdec/accept/greedy.hpp"
#include "specdec/cpu/row_linear.hpp"
#include "specdec/cpu/threads.hpp"
#include "specdec/draft/eagle_head_drafter.hpp"
#include "specdec/draft/model_drafter.hpp"
#include "specdec/engine/autoregressive_decoder.hpp"
#include "specdec/engine/lyanna_decoder.hpp"
#include "specdec/engine/speculative_decoder.hpp"
#include "specdec/engine/speculative_engine.hpp"
#include "specdec/io/sv_profile.hpp"
#include "specdec/policy/fixed_length.hpp"
#include "specdec/tokenizer/tokenizer.hpp"
#include "specdec/torch/draft_head.hpp"
#include "specdec/torch/llama_model.hpp"
#include "specdec/torch/methods.hpp"
#include "specdec/torch/spire_draft.hpp"
#include "specdec/tree/chain_builder.hpp"
#include "specdec/tree/dynamic_tree_builder.hpp"
#include "specdec/verify/model_verifier.hpp"
#include "support/catch.hpp"
#include "support/llama_fixtures.hpp"

namespace sd = specdec;
namespace tb = specdec::torch_backend;
namespace st = specdec::testing;

namespace {

// Both inference precisions; bf16 only where this CPU runs it natively.
std::vector<sd::DType> inference_dtypes() {
  if (tb::PackedLinear::native_bf16()) return {sd::DType::kF32, sd::DType::kBF16};
  WARN("this CPU has no native bf16 matmul: bf16 not exercised");
  return {sd::DType::kF32};
}

std::vector<sd::TokenId> greedy(tb::LlamaModel& target, std::span<const sd::TokenId> prompt, std::int64_t n) {
  sd::AutoregressiveDecoder ar(target, 9);
  sd::GenerationOptions o;
  o.max_new_tokens = n;
  return ar.generate(prompt, o).tokens;
}

// Random Lyanna, EAGLE-style and EAGLE-3 heads for `target` in
// <tmp>/<name>/{lyanna,eagle,eagle3}.
std::filesystem::path write_random_heads(const tb::LlamaModel& target, const char* name, sd::DType storage) {
  const auto heads = std::filesystem::temp_directory_path() / name;
  tb::DraftHeadConfig lyanna;
  lyanna.token_info_rank = 4;
  lyanna.hot_tokens = {1, 2, 3, 5, 7, 11, 13, 17, 19, 23, 29, 31};
  tb::DraftHead::random(lyanna, target, 1).save(heads / "lyanna", storage);
  tb::DraftHeadConfig eagle;
  eagle.kind = tb::HeadKind::kEagle;
  eagle.token_info_rank = 0;
  tb::DraftHead::random(eagle, target, 2).save(heads / "eagle", storage);
  tb::DraftHeadConfig eagle3 = eagle;
  eagle3.kind = tb::HeadKind::kEagle3;
  const auto last_layer = static_cast<std::int32_t>(target.config().num_hidden_layers - 1);
  eagle3.feature_layers = {0, last_layer};  // the test targets' first and last
  tb::DraftHead::random(eagle3, target, 4).save(heads / "eagle3", storage);
  // SPIRe: the target's last layer, a window small enough to evict.
  tb::SpireConfig spire;
  spire.layers = 1;
  spire.first_layer = target.config().num_hidden_layers - 1;
  spire.window = 4;
  tb::SpireDraft::init(spire, target, 3).save(heads / "spire", storage);
  return heads;
}

// The random target (2 layers, hidden 32) and draft (1 layer, 16) the method
// tests decode with, in `dtype`.
struct TargetAndDraft {
  tb::LlamaModel target, draft;
};
TargetAndDraft random_target_and_draft(sd::DType dtype) {
  TargetAndDraft m{tb::LlamaModel::random(st::tiny_decoding_config(2, 32), 3),
                   tb::LlamaModel::random(st::tiny_decoding_config(1, 16), 4)};
  m.target.set_inference_dtype(dtype);
  m.draft.set_inference_dtype(dtype);
  return m;
}

// sv's companion (smaller than the draft) in <heads>/companion and a greedy
// profile in <heads>/sv that cuts drafts.
void write_sv_files(const std::filesystem::path& heads, const sd::io::LlamaConfig& companion,
                    float temperature = 0.0f) {
  tb::LlamaModel::random(companion, 5).save(heads / "companion", sd::DType::kF32);
  sd::io::SvProfile profile;
  profile.drafts = "top1";
  profile.temperature = temperature;
  profile.draft_lengths = {3};
  profile.joint = sd::AcceptanceTable({0.5f}, {0.5f}, {0.1f, 0.6f, 0.3f, 0.95f}, {1, 1, 1, 1});
  profile.similarity = sd::AcceptanceTable({0.5f}, {}, {0.2f, 0.8f}, {1, 1});
  std::filesystem::create_directories(heads / "sv");
  sd::io::write_sv_profile(heads / "sv" / sd::io::sv_profile_name(sd::SamplingParams{temperature}, "top1"), profile);
}

}  // namespace

TEST_CASE("Greedy chain speculation on Llama models equals greedy decoding", "[torch][engine]") {
  auto target = tb::LlamaModel::random(st::tiny_decoding_config(2, 32), 1);
  auto draft = tb::LlamaModel::random(st::tiny_decoding_config(1, 16), 2);
  sd::ModelVerifier verifier(target);
  sd::ModelDrafter drafter(draft, 0);
  for (const std::int32_t k : {1, 3, 6}) {
    sd::SpeculativeDecoder decoder(drafter, sd::ChainBuilder{}, verifier, sd::GreedyAcceptance{},
                                   sd::FixedLength::chain(k));
    for (const auto& prompt : {std::vector<sd::TokenId>{5}, std::vector<sd::TokenId>{1, 2, 3, 4, 5, 6, 7}}) {
      sd::GenerationOptions o;
      o.max_new_tokens = 40;
      const auto got = decoder.generate(prompt, o);
      INFO("k " << k << ", prompt length " << prompt.size());
      CHECK(got.tokens == greedy(target, prompt, 40));
      CHECK_THROWS_AS(target.cached_length(0), sd::InvalidArgumentError);  // closed once generated
      CHECK_THROWS_AS(draft.cached_length(0), sd::InvalidArgumentError);
    }
  }
}

// Two host threads, each stepping its own chain decoder over its own
// requests of one shared target and draft (docs/integration.md, "Threads"):
// LlamaModel's open and close (a finished request's sequences close inside a
// step) run against the other thread's forwards; every output is greedy
// decoding's.
TEST_CASE("Two host threads decode over one shared target and draft as greedy decoding", "[torch][engine]") {
  auto target = tb::LlamaModel::random(st::tiny_decoding_config(2, 32), 1);
  auto draft = tb::LlamaModel::random(st::tiny_decoding_config(1, 16), 2);
  const auto prompt_of = [](std::int32_t id) {
    std::vector<sd::TokenId> p;
    for (std::int32_t i = 0; i < 1 + id % 6; ++i)
      p.push_back(static_cast<sd::TokenId>((id * 13 + i * 5) % 61));
    return p;
  };
  const auto length_of = [](std::int32_t id) { return std::int64_t{8} + id % 17; };
  const auto serve = [&](std::int32_t first, std::map<std::int32_t, std::vector<sd::TokenId>>& out) {
    sd::cpu::set_forward_threads(1);  // the two threads share the cores
    auto chain = tb::make_method(tb::parse_method("chain:k=3"), target, &draft, sd::SamplingParams{0.0f});
    std::int32_t next = first;
    std::vector<std::int32_t> live;
    while (next < first + 12 || !live.empty()) {
      while (live.size() < 3 && next < first + 12) {  // three at once, continuously refilled
        sd::GenerationOptions o;
        o.max_new_tokens = length_of(next);
        chain.begin(next, prompt_of(next), o);
        live.push_back(next++);
      }
      chain.step();
      std::erase_if(live, [&](std::int32_t id) {
        if (!chain.done(id)) return false;
        out[id] = chain.take_result(id).tokens;
        return true;
      });
    }
  };
  std::map<std::int32_t, std::vector<sd::TokenId>> a, b;
  std::thread host_a([&] { serve(0, a); });
  std::thread host_b([&] { serve(100, b); });
  host_a.join();
  host_b.join();
  REQUIRE(a.size() == 12);
  REQUIRE(b.size() == 12);
  for (const auto* out : {&a, &b})
    for (const auto& [id, tokens] : *out) {
      INFO("request " << id);
      CHECK(tokens == greedy(target, prompt_of(id), length_of(id)));
      CHECK_THROWS_AS(target.cached_length(id), sd::InvalidArgumentError);  // closed
    }
}

TEST_CASE("Every method decodes greedily exactly like autoregressive decoding", "[torch][engine]") {
  for (const auto dtype : inference_dtypes()) {
  INFO(sd::dtype_name(dtype));
  auto [target, draft] = random_target_and_draft(dtype);
  const std::vector<sd::TokenId> prompt{7, 3, 9, 3, 7, 3, 9};  // repeats, so prompt lookup finds matches
  const auto reference = greedy(target, prompt, 32);
  for (const char* spec :
       {"chain:k=3", "chain:k=2:policy=heuristic", "chain:k=6:policy=confidence:threshold=0.05", "tree",
        "tree:shape=0;1;0.0;0.0.0", "dynamic:top_k=3:depth=3:total=8",
        "sequoia:p=0.5,0.2,0.1:total=8:depth=3", "ngram:k=3", "autoregressive", "suffix",
        "suffix:shape=path:rule=traversal", "suffix:tokens=4:factor=0.5:rule=rrs",
        // every rule: at temperature 0 the lossless ones, and typical acceptance (a one-hot
        // target row is accepted only at its argmax), emit the greedy text
        "chain:k=3:rule=rrs", "chain:k=3:rule=speculative", "chain:k=3:rule=typical", "tree:rule=rrs",
        "dynamic:top_k=3:depth=3:total=8:rule=typical", "ngram:k=3:rule=rrs", "chain:k=4:rule=block",
        "chain:k=4:rule=traversal", "ngram:k=3:rule=block", "tree:rule=traversal",
        "tree:draw=sample:rule=traversal", "tree:draw=iid", "tree:draw=iid:rule=traversal",
        "dynamic:top_k=3:depth=3:total=8:rule=traversal",
        "sequoia:p=0.5,0.2,0.1:total=8:depth=3:draw=sample:rule=traversal",
        // budgets from the measured forward cost (policy/cost_aware_tree.hpp)
        "chain:k=4:policy=cost", "dynamic:top_k=3:depth=3:total=8:policy=cost", "tree:policy=cost",
        "ngram:k=3:policy=cost",
        // self-speculation through a sink + window cache small enough to evict
        "magicdec:k=3:sink=1:window=4", "magicdec:k=3:sink=2:window=6:positions=text",
        "magicdec:k=4:window=5:rule=speculative", "magicdec:k=3:window=4:rule=block"}) {
    auto method = tb::make_method(tb::parse_method(spec), target, &draft, sd::SamplingParams{0.0f});
    sd::GenerationOptions o;
    o.max_new_tokens = 32;
    INFO(spec);
    CHECK(method.generate(prompt, o).tokens == reference);
    CHECK(method.name() == tb::parse_method(method.name()).spec());  // the spec round-trips
  }
  }
}

TEST_CASE("Every method's continuous batching equals greedy decoding, request by request", "[torch][engine]") {
  for (const auto dtype : inference_dtypes()) {
  INFO(sd::dtype_name(dtype));
  auto [target, draft] = random_target_and_draft(dtype);
  const auto heads = write_random_heads(target, "specdec_batch_heads", sd::DType::kF32);
  write_sv_files(heads, st::tiny_decoding_config(1, 8));

  std::vector<std::vector<sd::TokenId>> prompts;
  std::vector<sd::GenerationOptions> options;
  for (int i = 0; i < 5; ++i) {
    prompts.push_back({static_cast<sd::TokenId>(7 + i), 3, 9, 3, static_cast<sd::TokenId>(7 + 2 * i), 3});
    sd::GenerationOptions o;
    o.max_new_tokens = 10 + 4 * i;  // ragged: requests leave at different steps
    options.push_back(o);
  }
  for (const char* spec : {"autoregressive", "chain:k=3", "tree", "dynamic:top_k=3:depth=3:total=8",
                           "sequoia:p=0.5,0.2,0.1:total=8:depth=3", "ngram:k=3", "suffix", "lyanna", "eagle",
                           "eagle3", "spire:k=3", "duo:gamma=3:pin=0", "sv:k=3:lat_batch=4:lat_reps=1",
                           "sv:k=3:all=1", "magicdec:k=3:window=4"}) {
    auto method = tb::make_method(tb::parse_method(spec), target, &draft, sd::SamplingParams{0.0f}, heads);
    INFO(spec);
    const auto run = method.generate_batch(prompts, options, 3);
    REQUIRE(run.results.size() == prompts.size());
    CHECK(run.peak_batch == 3);
    CHECK(run.mean_batch > 1.0);
    for (std::size_t i = 0; i < prompts.size(); ++i)
      CHECK(run.results[i].tokens == greedy(target, prompts[i], options[i].max_new_tokens));
  }
  }
}

TEST_CASE("A sampled request draws the same tokens alone and in batches of 4 to 64 in any slot",
          "[torch][engine]") {
  // Its random streams follow its seed and request id (GenerationOptions),
  // not its slot or sequence id, and every row it is scored on is
  // bit-identical whatever the forward holds around it.
  for (const auto dtype : inference_dtypes()) {
  INFO(sd::dtype_name(dtype));
  auto [target, draft] = random_target_and_draft(dtype);
  const auto heads = write_random_heads(target, "specdec_sampled_batch_heads", sd::DType::kF32);
  write_sv_files(heads, st::tiny_decoding_config(1, 8), 1.0f);
  const std::vector<sd::TokenId> prompt{7, 3, 9, 3, 7, 3, 9};
  sd::GenerationOptions mine;
  mine.max_new_tokens = 16;
  mine.sampling = sd::SamplingParams{1.0f, 0, 1.0f, 5};
  mine.request_id = 3;
  for (const char* spec : {"autoregressive", "chain:k=3", "tree", "dynamic:top_k=3:depth=3:total=8",
                           "sequoia:p=0.5,0.2,0.1:total=8:depth=3", "ngram:k=3", "lyanna", "eagle", "eagle3",
                           "spire:k=3", "duo:gamma=3:pin=0", "sv:k=3:all=1"}) {
    // (Not SV with a measured latency profile: its goodput allocation picks
    // each request's verified nodes from the batch around it and from
    // latencies timed at start-up, so a sampled request's path follows its
    // batch and the machine's load by design. It is lossless all the same:
    // the statistical suite; greedy, it equals AR in any batch: above.)
    auto method = tb::make_method(tb::parse_method(spec), target, &draft, sd::SamplingParams{1.0f}, heads);
    INFO(spec);
    const auto alone = method.generate(prompt, mine).tokens;
    REQUIRE(alone.size() == 16);
    for (const std::size_t batch : {4, 16, 64}) {
      INFO("batch " << batch);
      // Other requests around it: other prompts, lengths, seeds and ids; two
      // share its seed (and differ by id). Its place, and so its slot and
      // sequence id, changes with the batch.
      std::vector<std::vector<sd::TokenId>> prompts;
      std::vector<sd::GenerationOptions> options;
      const std::size_t place = batch / 2 + 1;
      for (std::size_t i = 0; i < batch + 4; ++i) {
        if (i == place) {
          prompts.push_back(prompt);
          options.push_back(mine);
          continue;
        }
        prompts.push_back({static_cast<sd::TokenId>(1 + i % 29), 3, static_cast<sd::TokenId>(2 + i % 17)});
        sd::GenerationOptions o;
        o.max_new_tokens = 4 + static_cast<std::int64_t>(i % 13);
        o.sampling = sd::SamplingParams{1.0f, 0, 1.0f, i % 3 == 0 ? mine.sampling.seed : 100 + i};
        o.request_id = 10 + i;
        options.push_back(o);
      }
      const auto run = method.generate_batch(prompts, options, batch);
      CHECK(run.results[place].tokens == alone);
    }
  }
  }
}

TEST_CASE("Every registered method shows its rounds to a round-view observer", "[torch][engine]") {
  auto [target, draft] = random_target_and_draft(sd::DType::kF32);
  const auto heads = write_random_heads(target, "specdec_observer_heads", sd::DType::kF32);
  write_sv_files(heads, st::tiny_decoding_config(1, 8), 1.0f);
  const std::vector<sd::TokenId> prompt{7, 3, 9, 3, 7, 3, 9};
  sd::GenerationOptions o;
  o.max_new_tokens = 12;
  // slem and tli load their draft and both tokenizers: they run on the
  // default target and models/draft-4k.
  const std::filesystem::path models = SPECDEC_SOURCE_DIR "/models";
  auto default_target = tb::LlamaModel::load(models / "target");
  for (const auto& info : tb::registered_methods()) {
    INFO(info.name);
    const std::string spec = info.name == "duo"       ? "duo:gamma=3:pin=0"
                             : info.name == "sv"      ? "sv:k=3:all=1"
                             : info.name == "sequoia" ? "sequoia:p=0.5,0.2,0.1:total=8:depth=3"
                                                      : info.name;
    auto method = info.models == sd::MethodModels::kOtherVocabularyDraft
                      ? tb::make_method(tb::parse_method(spec), default_target, nullptr, sd::SamplingParams{0.0f}, models)
                      : tb::make_method(tb::parse_method(spec), target, &draft, sd::SamplingParams{0.0f}, heads);
    std::int64_t rounds = 0, emitted = 0;
    method.set_round_view_observer([&](const sd::RoundView& v) {
      ++rounds;
      emitted += static_cast<std::int64_t>(v.result->accepted_nodes.size()) + 1;
      CHECK(v.target.num_rows() == v.tree->size() + 1);
    });
    const auto out = method.generate(prompt, o);
    CHECK(rounds == out.stats.rounds());
    CHECK(emitted >= static_cast<std::int64_t>(out.tokens.size()));  // the last round may emit past the limit
  }
}

TEST_CASE("Lyanna and the EAGLE-style head decode greedily exactly like autoregressive decoding",
          "[torch][engine][lyanna]") {
  auto target = tb::LlamaModel::random(st::tiny_decoding_config(2, 32), 5);
  // Random heads in a heads directory, as models/ holds the trained one.
  const auto heads = write_random_heads(target, "specdec_method_heads", sd::DType::kF16);
  for (const auto dtype : inference_dtypes())  // the heads follow their target's precision
  for (const auto& prompt : {std::vector<sd::TokenId>{7, 3, 9, 3, 7, 3, 9}, std::vector<sd::TokenId>{4}}) {
    target.set_inference_dtype(dtype);
    INFO(sd::dtype_name(dtype));
    const auto reference = greedy(target, prompt, 40);
    for (const char* spec :
         {"lyanna", "lyanna:resample=0", "lyanna:fusion=0", "lyanna:k=2:depth=4:budget=6:r=1:rbudget=3",
          "lyanna:k=1:depth=5:budget=5", "eagle", "eagle:top_k=2:depth=4:total=8", "eagle3",
          "eagle3:top_k=2:depth=4:total=8:policy=cost", "lyanna:policy=cost", "eagle:policy=cost", "spire",
          "spire:k=6:rule=speculative", "spire:k=3:rule=block", "spire:k=2:policy=heuristic"}) {
      auto method = tb::make_method(tb::parse_method(spec), target, nullptr, sd::SamplingParams{0.0f}, heads);
      sd::GenerationOptions o;
      o.max_new_tokens = 40;
      INFO(spec << ", prompt length " << prompt.size());
      const auto out = method.generate(prompt, o);
      CHECK(out.tokens == reference);
      if (!std::string_view(spec).starts_with("spire")) CHECK(out.stats.draft_layer_seconds > 0.0);  // the head ran
      CHECK(method.name() == tb::parse_method(method.name()).spec());
    }
  }
  // Sampling runs (its law is tested on host models) and a head of the wrong
  // kind is a typed error.
  auto sampled = tb::make_method(tb::parse_method("lyanna"), target, nullptr, sd::SamplingParams{0.8f, 0, 0.9f}, heads);
  sd::GenerationOptions o;
  o.max_new_tokens = 20;
  o.sampling = sd::SamplingParams{0.8f, 0, 0.9f};
  CHECK(sampled.generate(std::vector<sd::TokenId>{1, 2, 3}, o).tokens.size() == 20);
  CHECK_THROWS_AS(tb::make_method(tb::parse_method("lyanna:head=" + (heads / "eagle").string()), target, nullptr, {}),
                  sd::InvalidArgumentError);
  CHECK_THROWS_AS(
      tb::make_method(tb::parse_method("eagle:head=" + (heads / "eagle3").string()), target, nullptr, {}),
      sd::InvalidArgumentError);
  CHECK_THROWS_AS(
      tb::make_method(tb::parse_method("eagle3:head=" + (heads / "eagle").string()), target, nullptr, {}),
      sd::InvalidArgumentError);
  CHECK_THROWS_AS(tb::parse_method("lyanna:fusion=2"), sd::InvalidArgumentError);
}

// Feature heads batch: each request drafts with its own fork of the head
// (shared weights, its own cache) and its own TargetFeatures hand-off.
template <class Drafter, class Builder, class Carry, class MakeDrafter>
void check_batched_feature_heads(tb::LlamaModel& target, Builder builder, Carry carry, sd::DraftBudget budget,
                                 MakeDrafter make_drafter) {
  using Verifier = sd::ModelVerifier<tb::LlamaModel>;
  using Engine = sd::SpeculativeEngine<Drafter, Builder, Verifier, sd::GreedyAcceptance, sd::FixedLength,
                                       sd::SelectAll, Carry>;
  Verifier verifier(target);
  Engine engine(std::move(builder), verifier, sd::GreedyAcceptance{}, sd::SelectAll{}, std::move(carry));
  const std::vector<std::vector<sd::TokenId>> prompts = {{7, 3, 9, 3, 7, 3, 9}, {4}, {11, 12, 13, 5}};
  std::deque<tb::DraftHead> heads;
  std::deque<Drafter> drafters;
  std::deque<sd::FixedLength> policies;
  std::deque<typename Engine::Request> requests;
  sd::GenerationOptions o;
  o.max_new_tokens = 30;
  for (std::size_t i = 0; i < prompts.size(); ++i) {
    drafters.push_back(make_drafter(heads));
    policies.emplace_back(budget);
    requests.emplace_back(static_cast<std::int32_t>(i), drafters.back(), policies.back(), o);
    engine.begin(requests.back(), prompts[i]);
  }
  for (;;) {
    std::vector<typename Engine::Request*> batch;
    for (auto& r : requests)
      if (r.active()) batch.push_back(&r);
    if (batch.empty()) break;
    engine.step(batch);
  }
  for (std::size_t i = 0; i < prompts.size(); ++i) {
    INFO("request " << i);
    CHECK(requests[i].result().tokens == greedy(target, prompts[i], 30));
  }
}

TEST_CASE("Batched Lyanna and EAGLE-head decoding (a head fork per request) equal greedy decoding",
          "[torch][engine][lyanna]") {
  auto target = tb::LlamaModel::random(st::tiny_decoding_config(2, 32), 5);
  const auto dir = write_random_heads(target, "specdec_batched_heads", sd::DType::kF32);
  auto lyanna = tb::DraftHead::load(dir / "lyanna", target);
  auto eagle = tb::DraftHead::load(dir / "eagle", target);
  sd::LyannaOptions o;
  o.depth = 3;
  o.branch = 2;
  o.verify_budget = 4;
  check_batched_feature_heads<sd::LyannaDrafter<tb::DraftHead>>(
      target, o.builder(), o.resampling(), o.policy().budget(),
      [&](std::deque<tb::DraftHead>& heads) {
        heads.push_back(lyanna.fork());
        return sd::LyannaDrafter<tb::DraftHead>(heads.back());
      });
  check_batched_feature_heads<sd::EagleHeadDrafter<tb::DraftHead>>(
      target, sd::DynamicTreeBuilder{2, 3, 6}, sd::NoCarryOver{}, sd::DraftBudget{3, 6, 6, 0.0f},
      [&](std::deque<tb::DraftHead>& heads) {
        heads.push_back(eagle.fork());
        return sd::EagleHeadDrafter<tb::DraftHead>(heads.back());
      });
}

TEST_CASE("Method specs with unknown names, keys or values are typed errors", "[torch][engine]") {
  auto target = tb::LlamaModel::random(st::tiny_decoding_config(1, 16), 3);
  CHECK_THROWS_AS(tb::parse_method("chain:k=x"), sd::InvalidArgumentError);
  CHECK_THROWS_AS(tb::parse_method("chain:depth"), sd::InvalidArgumentError);
  CHECK_THROWS_AS(tb::parse_method("chain:colour=red"), sd::InvalidArgumentError);
  CHECK_THROWS_AS(tb::make_method(tb::parse_method("beam"), target, nullptr, {}), sd::InvalidArgumentError);
  CHECK_THROWS_AS(tb::make_method(tb::parse_method("chain"), target, nullptr, {}), sd::InvalidArgumentError);
  CHECK_THROWS_AS(tb::make_method(tb::parse_method("chain:policy=sometimes"), target, &target, {}),
                  sd::InvalidArgumentError);
  CHECK_THROWS_AS(tb::make_method(tb::parse_method("sequoia"), target, &target, {}), sd::InvalidArgumentError);
  CHECK_THROWS_AS(tb::make_method(tb::parse_method("tree:shape=0;2"), target, &target, {}), sd::InvalidTreeError);
  // Rules that do not fit the method or the sampling.
  CHECK_THROWS_WITH(tb::make_method(tb::parse_method("tree:rule=speculative"), target, &target, {}),
                    Catch::Contains("rule=speculative"));
  CHECK_THROWS_AS(tb::make_method(tb::parse_method("ngram:rule=speculative"), target, nullptr, {}),
                  sd::InvalidArgumentError);
  CHECK_THROWS_WITH(tb::make_method(tb::parse_method("chain:rule=greedy"), target, &target, sd::SamplingParams{0.8f}),
                    Catch::Contains("temperature 0"));
  CHECK_THROWS_AS(tb::make_method(tb::parse_method("chain:rule=maybe"), target, &target, {}), sd::InvalidArgumentError);
  CHECK_THROWS_WITH(tb::make_method(tb::parse_method("dynamic:rule=block"), target, &target, {}),
                    Catch::Contains("rule=block") && Catch::Contains("rule=traversal"));
  CHECK_THROWS_WITH(tb::make_method(tb::parse_method("tree:draw=uniform"), target, &target, {}),
                    Catch::Contains("unknown draw 'uniform'"));
}

TEST_CASE("The registry lists every method, specs round-trip, and lossy rules say so", "[torch][engine]") {
  std::vector<std::string> names;
  for (const auto& m : tb::registered_methods()) {
    names.push_back(m.name);
    CHECK_FALSE(m.summary.empty());
    CHECK(static_cast<bool>(m.make));
    for (const auto& p : m.params) CHECK_FALSE(p.help.empty());
    if (m.name != "sequoia") CHECK(tb::parse_method(m.name).spec() == tb::parse_method(tb::parse_method(m.name).spec()).spec());
  }
  // The registry's standard methods, then the feature-head methods this backend adds.
  CHECK(names == std::vector<std::string>{"autoregressive", "chain", "tree", "dynamic", "sequoia", "ngram",
                                          "suffix", "magicdec", "duo", "sv", "slem", "tli", "lyanna", "eagle",
                                          "eagle3", "spire"});
  CHECK_THROWS_WITH(tb::find_method("beam"), Catch::Contains("beam") && Catch::Contains("lyanna"));
  CHECK_THROWS_WITH(tb::parse_method("chain:colour=red"), Catch::Contains("k, policy, threshold, hot, rule"));
  const sd::SamplingParams greedy{0.0f}, sampled{0.8f};
  CHECK(tb::describe_rule(tb::parse_method("chain"), greedy) == "greedy acceptance, lossless");
  CHECK(tb::describe_rule(tb::parse_method("chain"), sampled) == "recursive rejection sampling, lossless");
  CHECK(tb::describe_rule(tb::parse_method("chain:rule=speculative"), sampled) == "speculative sampling, lossless");
  CHECK(tb::describe_rule(tb::parse_method("chain:rule=block"), sampled) == "block verification, lossless");
  CHECK(tb::describe_rule(tb::parse_method("tree:rule=traversal"), sampled) == "traversal verification, lossless");
  CHECK_THAT(tb::describe_rule(tb::parse_method("dynamic:rule=typical"), sampled), Catch::Contains("LOSSY"));
  // A lossy rule's rounds are recorded as lossy.
  auto target = tb::LlamaModel::random(st::tiny_decoding_config(2, 32), 3);
  auto draft = tb::LlamaModel::random(st::tiny_decoding_config(1, 16), 4);
  auto typical = tb::make_method(tb::parse_method("chain:k=3:rule=typical"), target, &draft, sampled);
  sd::GenerationOptions o;
  o.max_new_tokens = 16;
  o.sampling = sampled;
  const auto out = typical.generate(std::vector<sd::TokenId>{1, 2, 3}, o);
  CHECK_FALSE(out.stats.acceptance.lossless);
}

namespace {

std::vector<std::string> first_prompts(const std::filesystem::path& file, int n) {
  std::ifstream in(file);
  REQUIRE(in.good());
  std::vector<std::string> out;
  std::string line;
  while (static_cast<int>(out.size()) < n && std::getline(in, line))
    out.push_back(nlohmann::json::parse(line).at("prompt").get<std::string>());
  REQUIRE(static_cast<int>(out.size()) == n);
  return out;
}

// Gap between the two largest logits after `context`, relative to the largest
// magnitude: a disagreement between a batched and a one-token forward can only
// be legitimate when this is at rounding level.
double top2_gap(const tb::LlamaModel& m, const std::vector<sd::TokenId>& context) {
  std::vector<std::int64_t> ids(context.begin(), context.end());
  const auto logits = m.forward_train(at::tensor(ids, at::kLong).unsqueeze(0)).squeeze(0)[static_cast<std::int64_t>(ids.size()) - 1];
  const auto top = logits.topk(2);
  const auto v = std::get<0>(top);
  return (v[0] - v[1]).item<double>() / logits.abs().max().item<double>();
}

}  // namespace

TEST_CASE("The default models in models/ load, share a tokenizer and generate", "[torch][engine][models]") {
  const std::filesystem::path models = SPECDEC_SOURCE_DIR "/models";
  REQUIRE(std::filesystem::exists(models / "draft" / "config.json"));
  const auto tok = sd::tokenizer::Tokenizer::load(models / "tokenizer.model");
  auto target = tb::LlamaModel::load(models / "target");
  auto draft = tb::LlamaModel::load(models / "draft");
  target.check_tokenizer_vocab(tok.vocab_size(), "models/tokenizer.model");
  draft.check_tokenizer_vocab(tok.vocab_size(), "models/tokenizer.model");
  sd::ModelVerifier verifier(target);
  sd::ModelDrafter drafter(draft, 0);
  sd::SpeculativeDecoder decoder(drafter, sd::ChainBuilder{}, verifier, sd::GreedyAcceptance{},
                                 sd::FixedLength::chain(4));
  const auto prompt = tok.encode("And God said, Let there be");
  sd::GenerationOptions o;
  o.max_new_tokens = 48;
  const auto got = decoder.generate(prompt, o);
  CHECK(got.tokens == greedy(target, prompt, 48));
  // A trained pair agrees often: more than one token per target forward.
  CHECK(got.stats.acceptance.mean_emitted() > 1.5);
  const auto text = tok.decode(got.tokens);
  INFO(text);
  CHECK(text.size() > 40);

  // Every method, greedy, on a prompt of each task: output equal to greedy
  // autoregressive decoding token for token, or a documented near-tie. (CI's
  // exact grid, scripts/exact_grid.args, runs the methods' defaults on eight
  // prompts of each set, in both precisions; here their variants.)
  std::int64_t runs = 0, near_ties = 0;
  for (const char* set : {"prose", "code", "definitions"}) {
    for (const auto& p : first_prompts(std::filesystem::path(SPECDEC_SOURCE_DIR) / "data/prompts" / (std::string(set) + ".jsonl"), 1)) {
      const auto ids = tok.encode(p, true);
      const auto reference = greedy(target, ids, 32);
      for (const char* spec :
           {"chain:k=4", "chain:k=4:policy=heuristic", "tree", "dynamic:top_k=4:depth=4:total=12",
            "sequoia:p=0.6,0.15,0.05:total=12:depth=4", "ngram:k=4", "suffix", "lyanna", "lyanna:fusion=0",
            "eagle3", "chain:k=4:hot=1024", "lyanna:hot=1024:policy=cost", "eagle",
            "eagle:policy=cost:hot=1024", "spire", "slem", "slem:hold=1", "tli", "tli:rule=speculative"}) {
        auto method = tb::make_method(tb::parse_method(spec), target, &draft, sd::SamplingParams{0.0f}, models);
        sd::GenerationOptions go;
        go.max_new_tokens = 32;
        const auto out = method.generate(ids, go).tokens;
        ++runs;
        if (out == reference) continue;
        std::size_t i = 0;
        while (i < out.size() && out[i] == reference[i]) ++i;
        std::vector<sd::TokenId> context = ids;
        context.insert(context.end(), reference.begin(), reference.begin() + static_cast<std::ptrdiff_t>(i));
        const double gap = top2_gap(target, context);
        INFO(spec << " on a " << set << " prompt differs at token " << i << "; top-2 logit gap " << gap);
        CHECK(gap < 1e-4);  // anything larger is a bug, not rounding
        ++near_ties;
      }
    }
  }
  WARN("greedy outputs differing from autoregressive decoding by a near-tie: " << near_ties << " of " << runs);
}

TEST_CASE("Every method stops cleanly when the context is full, keeping every token", "[torch][engine]") {
  // LlamaModel::forward throws past max_position_embeddings: each method's
  // drafting and verification must fit in what is left of the context.
  auto config = st::tiny_decoding_config(2, 32);
  config.max_position_embeddings = 48;
  auto target = tb::LlamaModel::random(config, 7);
  auto small = st::tiny_decoding_config(1, 16);
  small.max_position_embeddings = 48;
  auto draft = tb::LlamaModel::random(small, 8);
  const auto heads = write_random_heads(target, "specdec_context_heads", sd::DType::kF32);
  auto companion = st::tiny_decoding_config(1, 8);
  companion.max_position_embeddings = 48;
  write_sv_files(heads, companion);
  const std::vector<sd::TokenId> prompt{7, 3, 9, 3, 7, 3, 9};
  const auto reference = greedy(target, prompt, 48 - 7);
  for (const char* spec : {"autoregressive", "chain:k=6", "tree", "dynamic:top_k=3:depth=5:total=10",
                           "ngram:k=5", "lyanna:depth=4:budget=10", "lyanna:fusion=0", "eagle", "eagle3",
                           "sv:k=6:lat_batch=2:lat_reps=1", "magicdec:k=6:window=8"}) {
    auto method = tb::make_method(tb::parse_method(spec), target, &draft, sd::SamplingParams{0.0f}, heads);
    sd::GenerationOptions o;
    o.max_new_tokens = 100000;
    INFO(spec);
    const auto out = method.generate(prompt, o);
    CHECK(out.tokens == reference);
    CHECK(out.stop_reason == sd::StopReason::kContextLimit);
    CHECK(out.stats.stop_reason == sd::StopReason::kContextLimit);
  }
}

TEST_CASE("duo:host_draft= drafts on cpu::LlamaModel: the tokens of duo with the libtorch draft",
          "[torch][engine]") {
  if (!sd::cpu::RowLinear::available(sd::DType::kF32)) {
    WARN("this CPU has no f32 row kernel: cpu::LlamaModel not exercised");
    return;
  }
  for (const auto dtype : inference_dtypes()) {
    INFO(sd::dtype_name(dtype));
    auto [target, draft] = random_target_and_draft(dtype);
    const auto dir = std::filesystem::temp_directory_path() / "specdec_duo_host_draft";
    draft.save(dir, sd::DType::kF32);
    const std::vector<sd::TokenId> prompt{7, 3, 9, 3, 7, 3, 9};
    const auto reference = greedy(target, prompt, 24);
    for (const std::string options : {"", ":concurrent=0", ":seqs=2"}) {
      const std::string plain = "duo:gamma=3" + options, hosted = plain + ":host_draft=" + dir.string();
      INFO(hosted);
      sd::GenerationOptions o;
      o.max_new_tokens = 24;
      CHECK(tb::make_method(tb::parse_method(hosted), target, &draft, sd::SamplingParams{0.0f})
                .generate(prompt, o)
                .tokens == reference);
      // Sampled, seeded: the host draft's rows are the libtorch draft's bits,
      // so the same draws come out.
      o.sampling = sd::SamplingParams{1.0f};
      o.sampling.seed = 17;
      auto a = tb::make_method(tb::parse_method(plain), target, &draft, o.sampling);
      auto b = tb::make_method(tb::parse_method(hosted), target, &draft, o.sampling);
      CHECK(b.generate(prompt, o).tokens == a.generate(prompt, o).tokens);
    }
    // A draft of another vocabulary is refused by name.
    auto other = st::tiny_decoding_config(1, 16);
    other.vocab_size = 50;
    tb::LlamaModel::random(other, 4).save(dir / "other", sd::DType::kF32);
    CHECK_THROWS_WITH(tb::make_method(tb::parse_method("duo:host_draft=" + (dir / "other").string()), target,
                                      &draft, sd::SamplingParams{0.0f}),
                      Catch::Matchers::Contains("vocabulary"));
  }
}
