// examples/host_engine, an engine that is not ours (its own Model without
// libtorch, its own cache and scheduler), driving specdec's engine for
// several concurrent requests: on the default models its greedy output
// equals the libtorch reference model's greedy decoding, for every method it
// offers (Lyanna with its own plain C++ head too), with requests joining as
// others finish.
#include <cmath>
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "../../examples/host_engine/methods.hpp"
#include "../../examples/host_engine/scheduler.hpp"
#include "specdec/engine/autoregressive_decoder.hpp"
#include "specdec/tokenizer/tokenizer.hpp"
#include "specdec/torch/draft_head.hpp"
#include "specdec/torch/llama_model.hpp"
#include "support/catch.hpp"
#include "support/reference_llama.hpp"
#include "support/sink_window_schedule.hpp"

namespace sd = specdec;
namespace tb = specdec::torch_backend;

TEST_CASE("The host engine's own Llama model matches the libtorch model's logits", "[torch][host_engine]") {
  const std::filesystem::path models = SPECDEC_SOURCE_DIR "/models";
  host_engine::HostLlama host(models / "target");
  auto reference = tb::LlamaModel::load(models / "target");
  const std::vector<sd::TokenId> tokens = {1, 300, 41, 7, 2048, 13, 500, 9};
  std::vector<std::int64_t> positions(tokens.size());
  for (std::size_t i = 0; i < positions.size(); ++i) positions[i] = static_cast<std::int64_t>(i);
  host.open(0);
  const sd::SequenceInput in{0, tokens, positions};
  sd::HostRows rows;
  sd::ForwardRequest request{std::span(&in, 1)};
  request.logits = rows.view(static_cast<std::int64_t>(tokens.size()), host.vocab_size());
  host.forward(request);
  const auto ref = reference.forward_train(at::tensor(std::vector<std::int64_t>(tokens.begin(), tokens.end()), at::kLong)
                                               .unsqueeze(0))
                       .squeeze(0)
                       .contiguous();
  const float* got = request.logits.data_as<float>();
  double worst = 0.0, scale = 0.0;
  for (std::int64_t i = 0; i < ref.numel(); ++i) {
    worst = std::max(worst, std::abs(double(got[i]) - double(ref.data_ptr<float>()[i])));
    scale = std::max(scale, std::abs(double(ref.data_ptr<float>()[i])));
  }
  CHECK(worst / scale < 1e-4);
}

TEST_CASE("The host engine's own Llama model keeps a sink + window cache as the StreamingLLM mask says",
          "[torch][host_engine][sparse]") {
  using Positions = sd::CachePolicy::Positions;
  const auto positions = GENERATE(Positions::kText, Positions::kCache);
  CAPTURE(positions == Positions::kCache);
  const sd::testing::ReferenceLlama ref(sd::testing::tiny_llama_config(32, 48, 2), 5, false);
  const auto dir = std::filesystem::temp_directory_path() / "specdec_host_sink";
  std::filesystem::remove_all(dir);
  ref.save(dir);
  host_engine::HostLlama host(dir);
  const std::int64_t sink = 3, window = 10;
  host.open(0, sd::CachePolicy::sink_window(sink, window, positions));
  const auto run = sd::testing::run_sink_window_schedule(host, 17, [] {});
  CHECK(sd::testing::worst_row_error(run, ref.all_logits(run.context, run.committed, sink, window,
                                                         positions == Positions::kCache)) < 1e-4);
  CHECK_THROWS_AS(host.rollback(0, static_cast<std::int64_t>(run.context.size()) - 1), sd::InvalidArgumentError);
}

TEST_CASE("The host engine's own Lyanna head drafts what the libtorch head drafts", "[torch][host_engine]") {
  const std::filesystem::path models = SPECDEC_SOURCE_DIR "/models";
  const host_engine::HostLlama host_target(models / "target");
  host_engine::HostLyannaHead host(models / "lyanna", host_target);
  auto target = tb::LlamaModel::load(models / "target");
  auto head = tb::DraftHead::load(models / "lyanna", target);
  const auto d = head.hidden_size(), v = head.vocab_size();
  // The same committed entries (arbitrary states, real tokens), then a chain.
  const std::vector<sd::TokenId> tokens = {300, 41, 7, 2048, 13};
  std::vector<float> states(tokens.size() * static_cast<std::size_t>(d));
  for (std::size_t i = 0; i < states.size(); ++i) states[i] = static_cast<float>(std::sin(0.37 * double(i)));
  std::vector<float> h1_host(static_cast<std::size_t>(d)), h1_torch(h1_host.size());
  host.reset();
  head.reset();
  host.advance(states, tokens, 1, h1_host);
  head.advance(states, tokens, 1, h1_torch);
  constexpr std::int64_t kSteps = 3;
  std::vector<float> chain_host(static_cast<std::size_t>(kSteps * d)), chain_torch(chain_host.size());
  host.chain(h1_host, kSteps, 5, chain_host);
  head.chain(h1_torch, kSteps, 5, chain_torch);
  // A second chain from the same h_1 (a builder asking for a level again)
  // starts afresh: it does not see what the first one staged.
  std::vector<float> again(chain_torch.size());
  head.chain(h1_torch, kSteps, 5, again);
  CHECK(again == chain_torch);
  std::vector<float> logits_host(static_cast<std::size_t>(kSteps * v)), logits_torch(logits_host.size());
  host.logits(chain_host, logits_host);
  head.logits(chain_torch, logits_torch);
  double worst = 0.0, scale = 0.0;
  for (std::size_t i = 0; i < logits_host.size(); ++i) {
    worst = std::max(worst, std::abs(double(logits_host[i]) - double(logits_torch[i])));
    scale = std::max(scale, std::abs(double(logits_torch[i])));
  }
  CHECK(worst / scale < 1e-4);
  // The collapsed token-info tables agree too.
  REQUIRE(host.token_info().num_hot() == head.token_info().num_hot());
  for (const sd::TokenId parent : {sd::TokenId{13}, sd::TokenId{270}}) {
    const auto a = host.token_info().bias(parent), b = head.token_info().bias(parent);
    REQUIRE(a.size() == b.size());
    for (std::size_t i = 0; i < a.size(); ++i) CHECK(std::abs(a[i] - b[i]) < 1e-4f * (1.0f + std::abs(b[i])));
  }
}

TEST_CASE("The host engine decodes concurrent requests exactly like greedy decoding on the libtorch model",
          "[torch][host_engine]") {
  const std::filesystem::path models = SPECDEC_SOURCE_DIR "/models";
  const auto tok = sd::tokenizer::Tokenizer::load(models / "tokenizer.model");
  host_engine::HostLlama target(models / "target"), draft(models / "draft");
  const host_engine::HostLyannaHead head(models / "lyanna", target);
  auto reference_model = tb::LlamaModel::load(models / "target");
  std::vector<std::vector<sd::TokenId>> prompts;
  for (const char* set : {"prose", "code", "definitions"}) {
    std::ifstream in(std::filesystem::path(SPECDEC_SOURCE_DIR) / "data/prompts" / (std::string(set) + ".jsonl"));
    std::string line;
    for (int i = 0; i < 2 && std::getline(in, line); ++i)
      prompts.push_back(tok.encode(nlohmann::json::parse(line).at("prompt").get<std::string>(), true));
  }
  REQUIRE(prompts.size() == 6);
  constexpr std::int64_t kTokens = 24;
  std::vector<std::vector<sd::TokenId>> reference;
  sd::AutoregressiveDecoder ar(reference_model);
  for (const auto& p : prompts) {
    sd::GenerationOptions o;
    o.max_new_tokens = kTokens;
    reference.push_back(ar.generate(p, o).tokens);
  }
  const auto registry = host_engine::method_registry();
  std::vector<sd::GenerationOptions> options(prompts.size());
  for (auto& o : options) o.max_new_tokens = kTokens;
  for (const char* spec : {"chain", "dynamic", "ngram", "lyanna", "duo", "sv:lat_batch=4:lat_reps=1"}) {
    INFO(spec);
    // By name from specdec's registry, stepped by the engine's scheduler:
    // three at once, the other three join as the first ones finish.
    auto method = registry.make(spec, target, &draft, sd::SamplingParams{0.0f}, models);
    const auto out = host_engine::run_requests(method, prompts, options, 3);
    REQUIRE(out.results.size() == prompts.size());
    CHECK(out.peak_batch == 3);
    std::int64_t rounds = 0;
    for (std::size_t i = 0; i < prompts.size(); ++i) {
      INFO("prompt " << i);
      const auto& r = out.results.at(static_cast<std::int32_t>(i));
      CHECK(r.tokens == reference[i]);
      rounds += r.stats.rounds();
    }
    CHECK(out.steps < rounds);  // requests shared target forwards
    std::int64_t tokens = 0;
    for (const auto& [id, r] : out.results) tokens += static_cast<std::int64_t>(r.tokens.size());
    CHECK(rounds < tokens);  // and drafts were accepted (a broken drafter would still be exact, but slow)
  }
}
