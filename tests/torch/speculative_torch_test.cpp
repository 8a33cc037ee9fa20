// The speculative decoder on the reference Llama model (tiny random weights):
// greedy speculative output equals greedy autoregressive output token for
// token with a draft model drafting chains, and the default models in models/
// load and generate end to end.
#include <filesystem>
#include <fstream>
#include <vector>

#include "specdec/accept/greedy.hpp"
#include "specdec/draft/model_drafter.hpp"
#include "specdec/engine/autoregressive_decoder.hpp"
#include "specdec/engine/speculative_decoder.hpp"
#include "specdec/policy/fixed_length.hpp"
#include "specdec/tokenizer/tokenizer.hpp"
#include "specdec/torch/llama_model.hpp"
#include "specdec/torch/methods.hpp"
#include "specdec/tree/chain_builder.hpp"
#include "specdec/verify/model_verifier.hpp"
#include "support/catch.hpp"

namespace sd = specdec;
namespace tb = specdec::torch_backend;

namespace {

sd::io::LlamaConfig tiny(std::int64_t layers, std::int64_t hidden) {
  sd::io::LlamaConfig c;
  c.vocab_size = 61;
  c.hidden_size = hidden;
  c.intermediate_size = 2 * hidden;
  c.num_hidden_layers = layers;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.head_dim = hidden / 4;
  c.max_position_embeddings = 256;
  return c;
}

std::vector<sd::TokenId> greedy(tb::LlamaModel& target, std::span<const sd::TokenId> prompt, std::int64_t n) {
  sd::AutoregressiveDecoder ar(target, sd::SamplingParams{0.0f}, 9);
  sd::GenerationOptions o;
  o.max_new_tokens = n;
  return ar.generate(prompt, o).tokens;
}

}  // namespace

TEST_CASE("Greedy chain speculation on Llama models equals greedy decoding", "[torch][engine]") {
  auto target = tb::LlamaModel::random(tiny(2, 32), 1);
  auto draft = tb::LlamaModel::random(tiny(1, 16), 2);
  target.start_sequence(0);
  target.start_sequence(9);
  draft.start_sequence(0);
  sd::ModelVerifier verifier(target, sd::SamplingParams{0.0f});
  sd::ModelDrafter drafter(draft, 0, sd::SamplingParams{1.0f});
  for (const std::int32_t k : {1, 3, 6}) {
    sd::SpeculativeDecoder decoder(drafter, sd::ChainBuilder{}, verifier, sd::GreedyAcceptance{},
                                   sd::FixedLength::chain(k));
    for (const auto& prompt : {std::vector<sd::TokenId>{5}, std::vector<sd::TokenId>{1, 2, 3, 4, 5, 6, 7}}) {
      sd::GenerationOptions o;
      o.max_new_tokens = 40;
      const auto got = decoder.generate(prompt, o);
      INFO("k " << k << ", prompt length " << prompt.size());
      CHECK(got.tokens == greedy(target, prompt, 40));
      CHECK(target.cached_length(0) >= static_cast<std::int64_t>(prompt.size() + got.tokens.size()) - 1);
    }
  }
}

TEST_CASE("Every method decodes greedily exactly like autoregressive decoding", "[torch][engine]") {
  auto target = tb::LlamaModel::random(tiny(2, 32), 3);
  auto draft = tb::LlamaModel::random(tiny(1, 16), 4);
  target.start_sequence(9);
  const std::vector<sd::TokenId> prompt{7, 3, 9, 3, 7, 3, 9};  // repeats, so prompt lookup finds matches
  const auto reference = greedy(target, prompt, 32);
  for (const char* spec : {"chain:k=3", "chain:k=2:policy=heuristic", "chain:k=6:policy=confidence:threshold=0.05",
                           "tree", "tree:shape=0;1;0.0;0.0.0", "dynamic:top_k=3:depth=3:total=8",
                           "sequoia:p=0.5,0.2,0.1:total=8:depth=3", "ngram:k=3", "autoregressive"}) {
    auto method = tb::make_method(tb::parse_method(spec), target, &draft, sd::SamplingParams{0.0f});
    sd::GenerationOptions o;
    o.max_new_tokens = 32;
    INFO(spec);
    CHECK(method.generate(prompt, o).tokens == reference);
    CHECK(method.name() == tb::parse_method(method.name()).spec());  // the spec round-trips
  }
}

TEST_CASE("Method specs with unknown names, keys or values are typed errors", "[torch][engine]") {
  auto target = tb::LlamaModel::random(tiny(1, 16), 3);
  CHECK_THROWS_AS(tb::parse_method("chain:k=x"), sd::InvalidArgumentError);
  CHECK_THROWS_AS(tb::parse_method("chain:depth"), sd::InvalidArgumentError);
  CHECK_THROWS_AS(tb::parse_method("chain:colour=red"), sd::InvalidArgumentError);
  CHECK_THROWS_AS(tb::make_method(tb::parse_method("beam"), target, nullptr, {}), sd::InvalidArgumentError);
  CHECK_THROWS_AS(tb::make_method(tb::parse_method("chain"), target, nullptr, {}), sd::InvalidArgumentError);
  CHECK_THROWS_AS(tb::make_method(tb::parse_method("chain:policy=sometimes"), target, &target, {}),
                  sd::InvalidArgumentError);
  CHECK_THROWS_AS(tb::make_method(tb::parse_method("sequoia"), target, &target, {}), sd::InvalidArgumentError);
  CHECK_THROWS_AS(tb::make_method(tb::parse_method("tree:shape=0;2"), target, &target, {}), sd::InvalidTreeError);
}

TEST_CASE("The default models in models/ load, share a tokenizer and generate", "[torch][engine][models]") {
  const std::filesystem::path models = SPECDEC_SOURCE_DIR "/models";
  REQUIRE(std::filesystem::exists(models / "draft" / "config.json"));
  const auto tok = sd::tokenizer::Tokenizer::load(models / "tokenizer.model");
  auto target = tb::LlamaModel::load(models / "target");
  auto draft = tb::LlamaModel::load(models / "draft");
  target.check_tokenizer_vocab(tok.vocab_size(), "models/tokenizer.model");
  draft.check_tokenizer_vocab(tok.vocab_size(), "models/tokenizer.model");
  target.start_sequence(0);
  target.start_sequence(9);
  draft.start_sequence(0);
  sd::ModelVerifier verifier(target, sd::SamplingParams{0.0f});
  sd::ModelDrafter drafter(draft, 0, sd::SamplingParams{1.0f});
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
}
