// examples/host_engine, an engine that is not ours (its own Model without
// libtorch, its own cache and scheduler), driving specdec's engine for
// several concurrent requests: on the default models its greedy output
// equals the libtorch reference model's greedy decoding, for every method it
// offers (Lyanna with its own plain C++ head too), with requests joining as
// others finish. Its own file: it compiles specdec's whole registry over the
// engine's model, which the sanitizer builds leave out (tests/torch/CMakeLists.txt).
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "../../examples/host_engine/methods.hpp"
#include "../../examples/host_engine/scheduler.hpp"
#include "specdec/engine/autoregressive_decoder.hpp"
#include "specdec/tokenizer/tokenizer.hpp"
#include "specdec/torch/llama_model.hpp"
#include "support/catch.hpp"

namespace sd = specdec;
namespace tb = specdec::torch_backend;

TEST_CASE("The host engine decodes concurrent requests exactly like greedy decoding on the libtorch model",
          "[torch][host_engine]") {
  const std::filesystem::path models = SPECDEC_SOURCE_DIR "/models";
  const auto tok = sd::tokenizer::Tokenizer::load(models / "tokenizer.model");
  host_engine::HostLlama target(models / "target"), draft(models / "draft");
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
