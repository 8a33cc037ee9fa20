// examples/host_engine, an engine that is not ours (its own Model without
// libtorch, its own cache and scheduler), driving specdec's engine for
// several concurrent requests: on the default models its greedy output
// equals the libtorch reference model's greedy decoding, for every method it
// offers, with requests joining as others finish.
#include <filesystem>
#include <fstream>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "../../examples/host_engine/generate.hpp"
#include "specdec/engine/autoregressive_decoder.hpp"
#include "specdec/tokenizer/tokenizer.hpp"
#include "specdec/torch/llama_model.hpp"
#include "support/catch.hpp"

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
  sd::AutoregressiveDecoder ar(reference_model, sd::SamplingParams{0.0f});
  for (const auto& p : prompts) {
    sd::GenerationOptions o;
    o.max_new_tokens = kTokens;
    reference.push_back(ar.generate(p, o).tokens);
  }
  for (const char* method : {"chain", "dynamic", "ngram"}) {
    INFO(method);
    // Three at once: the other three join as the first ones finish.
    const auto out = host_engine::generate(target, draft, method, prompts, kTokens, 3);
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
  }
}
