// The method registry over any Model (methods/standard_methods.hpp) and the
// type-erased face of a method built by name (AnyDecoder): a host's own
// Model gets every standard method by name, steps its requests one round at
// a time, and a request stepped with others emits what it emits alone.
#include <cstdint>
#include <map>
#include <string>
#include <vector>

#include "specdec/methods/standard_methods.hpp"
#include "specdec/testing/hashed_context_model.hpp"
#include "support/catch.hpp"
#include "support/toy_vocabulary.hpp"

namespace sd = specdec;
using sd::testing::HashedContextModel;

namespace {

constexpr std::int64_t kVocab = 24;

// Request i: greedy for even i, sampled for odd i; each its own seed.
sd::GenerationOptions options_of(std::int32_t i) {
  sd::GenerationOptions o;
  o.max_new_tokens = 10 + 2 * i;
  if (i % 2 == 1) o.sampling = sd::SamplingParams{0.9f, 0, 0.95f};
  o.sampling.seed = static_cast<std::uint64_t>(11 + i);
  return o;
}

struct Models {
  HashedContextModel target{kVocab, 1}, draft{kVocab, 1, 2, 2.0f, /*noise=*/0.7f};
};

}  // namespace

TEST_CASE("A method built by name steps its requests as generate() runs each alone", "[unit][engine][methods]") {
  const auto registry = sd::standard_methods<HashedContextModel>();
  const sd::SamplingParams setup{0.9f, 0, 0.95f};  // rule=auto: recursive rejection sampling, greedy requests too
  // (suffix without its global index: with it, a request drafts from the
  // others' outputs, so its sampled tokens depend on the batch; their law
  // does not, tests/statistical/engine_three_token_test.cpp)
  for (const char* spec :
       {"autoregressive", "chain:k=3", "tree:draw=iid", "tree:draw=sample", "dynamic:total=8", "ngram",
        "suffix:cached=0", "sequoia:p=0.6,0.3,0.1:total=6", "duo:gamma=3:pin=0:concurrent=0",
        "chain:rule=traversal", "chain:rule=block", "chain:rule=speculative"}) {
    INFO(spec);
    Models alone_models, stepped_models;
    auto alone = registry.make(spec, alone_models.target, &alone_models.draft, setup);
    auto stepped = registry.make(spec, stepped_models.target, &stepped_models.draft, setup);
    CHECK(stepped.name() == registry.parse(spec).spec());

    std::map<std::int32_t, std::vector<sd::TokenId>> expected;
    for (std::int32_t i = 0; i < 4; ++i)
      expected[i] = alone.generate(sd::testing::request_prompt(i, kVocab), options_of(i)).tokens;

    // Requests 0 and 1 start, 2 and 3 join after two steps; each leaves when done.
    std::map<std::int32_t, std::vector<sd::TokenId>> got;
    for (std::int32_t i = 0; i < 2; ++i) stepped.begin(i, sd::testing::request_prompt(i, kVocab), options_of(i));
    for (int step = 0; !stepped.requests().empty(); ++step) {
      if (step == 2)
        for (std::int32_t i = 2; i < 4; ++i) stepped.begin(i, sd::testing::request_prompt(i, kVocab), options_of(i));
      stepped.step();
      for (const auto id : stepped.requests())
        if (stepped.done(id)) got[id] = stepped.take_result(id).tokens;
    }
    CHECK(got == expected);
  }
}

// Vocabularies for slem and tli over the registry's hooks: the target's 24
// pieces over a, b, c, d (the letters, the 16 pairs, 4 triples) and a draft's
// 20 (the letters, 12 of the pairs, 4 other triples), sharing their first 16
// ids.
sd::TextVocabulary letters_vocabulary(bool target) {
  std::vector<std::string> pieces = {"a", "b", "c", "d"};
  for (const char x : std::string("abcd"))
    for (const char y : std::string("abcd"))
      if (target || pieces.size() < 16) pieces.push_back(std::string{x, y});
  for (const char* t : target ? std::vector<const char*>{"abc", "bcd", "cda", "dab"}
                              : std::vector<const char*>{"acd", "bad", "cab", "dcb"})
    pieces.emplace_back(t);
  return sd::testing::toy_vocabulary(target ? "letters target" : "letters draft", pieces);
}

sd::MethodHooks<HashedContextModel> other_vocabulary_hooks() {
  sd::MethodHooks<HashedContextModel> h;
  h.load_model = [](const std::filesystem::path&) {
    // The target's seed: where the last two tokens are shared (same ids in
    // both vocabularies), the draft's logits are the target's plus noise.
    return std::make_unique<HashedContextModel>(20, 1, 2, 2.0f, /*noise=*/0.7f);
  };
  h.load_vocabulary = [](const std::filesystem::path& path) {
    return letters_vocabulary(path.filename() != "tokenizer.model" ||
                              path.parent_path().filename() != "draft-4k");
  };
  return h;
}

TEST_CASE("slem and tli built by name emit the greedy tokens and step as generate() runs each alone",
          "[unit][engine][methods][cross-vocabulary]") {
  const auto registry = sd::standard_methods<HashedContextModel>(other_vocabulary_hooks());
  for (const char* spec : {"slem", "slem:hold=1:k=6", "tli", "tli:k=6:policy=heuristic", "tli:rule=block",
                           "tli:rule=speculative"}) {
    INFO(spec);
    // Greedy: exactly the target's own greedy continuation.
    {
      Models m;
      auto method = registry.make(spec, m.target, nullptr, sd::SamplingParams{0.0f});
      std::int64_t accepted = 0;
      for (std::int32_t i = 0; i < 3; ++i) {
        const auto prompt = sd::testing::request_prompt(i, kVocab);
        sd::GenerationOptions o;
        o.max_new_tokens = 40;
        const auto out = method.generate(prompt, o);
        CHECK(out.tokens == sd::testing::greedy_continuation(m.target, prompt, 40));
        accepted += out.stats.acceptance.num_accepted;
      }
      CHECK(accepted > 0);  // drafts were accepted, so the equality tested them
    }
    // Mixed greedy and sampled requests, stepped together.
    const sd::SamplingParams setup{0.9f, 0, 0.95f};
    Models alone_models, stepped_models;
    auto alone = registry.make(spec, alone_models.target, nullptr, setup);
    auto stepped = registry.make(spec, stepped_models.target, nullptr, setup);
    std::map<std::int32_t, std::vector<sd::TokenId>> expected, got;
    for (std::int32_t i = 0; i < 4; ++i)
      expected[i] = alone.generate(sd::testing::request_prompt(i, kVocab), options_of(i)).tokens;
    for (std::int32_t i = 0; i < 4; ++i)
      stepped.begin(i, sd::testing::request_prompt(i, kVocab), options_of(i));
    while (!stepped.requests().empty()) {
      stepped.step();
      for (const auto id : stepped.requests())
        if (stepped.done(id)) got[id] = stepped.take_result(id).tokens;
    }
    CHECK(got == expected);
  }
  Models m;
  CHECK_THROWS_WITH(registry.make("slem:rule=speculative", m.target, nullptr, {}), Catch::Contains("rule="));
  CHECK(registry.describe_rule(registry.parse("tli:rule=block"), {}).find("block") != std::string::npos);
}

TEST_CASE("A stepped method's requests: ids, results, abort and misuse", "[unit][engine][methods]") {
  const auto registry = sd::standard_methods<HashedContextModel>();
  Models m;
  auto chain = registry.make("chain:k=3", m.target, &m.draft, sd::SamplingParams{0.0f});
  const auto prompt = sd::testing::request_prompt(0, kVocab);
  sd::GenerationOptions o;
  o.max_new_tokens = 40;
  chain.begin(7, prompt, o);
  chain.begin(3, prompt, o);
  CHECK(chain.requests() == std::vector<sd::AnyDecoder::RequestId>{3, 7});
  CHECK_THROWS_WITH(chain.begin(7, prompt, o), Catch::Contains("request 7 is open"));
  chain.step();
  const auto after_one = chain.result(7).tokens.size();
  CHECK(after_one >= 1);
  CHECK(chain.result(3).tokens == chain.result(7).tokens);  // same prompt, greedy
  CHECK_THROWS_WITH(chain.take_result(7), Catch::Contains("still generating"));
  CHECK_THROWS_WITH(chain.step(std::vector<sd::AnyDecoder::RequestId>{5}), Catch::Contains("no open request 5"));
  CHECK_THROWS_WITH(chain.generate_batch(std::vector<std::vector<sd::TokenId>>{prompt},
                                         std::vector<sd::GenerationOptions>{o}, 1),
                    Catch::Contains("2 requests are open"));

  chain.abort(7);  // the host cancelled it: what it generated stays
  CHECK(chain.done(7));
  chain.step(std::vector<sd::AnyDecoder::RequestId>{3});  // request 3 alone
  const auto cancelled = chain.take_result(7);
  CHECK(cancelled.tokens.size() == after_one);
  CHECK(cancelled.stop_reason == sd::StopReason::kCancelled);
  CHECK(chain.requests() == std::vector<sd::AnyDecoder::RequestId>{3});
  chain.begin(7, prompt, o);  // its id is free again, its sequence closed in the models
  while (!chain.done(3) || !chain.done(7)) chain.step();
  CHECK(chain.take_result(3).tokens == chain.take_result(7).tokens);
  CHECK(chain.requests().empty());

  // A greedy-only rule refuses a sampled request at begin, which opens nothing.
  auto greedy = registry.make("chain:rule=greedy", m.target, &m.draft, sd::SamplingParams{0.0f});
  sd::GenerationOptions sampled = o;
  sampled.sampling = sd::SamplingParams{0.8f};
  CHECK_THROWS_WITH(greedy.begin(1, prompt, sampled), Catch::Contains("greedy decoding only"));
  CHECK(greedy.requests().empty());
  greedy.begin(1, prompt, o);
  CHECK(greedy.requests().size() == 1);
}

TEST_CASE("The registry lists, parses and builds by name, and a host adds its own method", "[unit][engine][methods]") {
  auto registry = sd::standard_methods<HashedContextModel>();
  std::vector<std::string> names;
  for (const auto& m : registry.methods()) names.push_back(m.name);
  CHECK(names == std::vector<std::string>{"autoregressive", "chain", "tree", "dynamic", "sequoia", "ngram",
                                          "suffix", "magicdec", "duo", "sv", "slem", "tli"});
  CHECK_THROWS_WITH(registry.find("beam"), Catch::Contains("unknown method 'beam'") && Catch::Contains("duo"));
  CHECK_THROWS_WITH(registry.parse("chain:colour=red"), Catch::Contains("k, policy, threshold, rule"));
  CHECK_THROWS_WITH(registry.parse("chain:k=x"), Catch::Contains("k=x is not a number"));
  CHECK_THROWS_WITH(registry.parse("chain:k=4:k=8"), Catch::Contains("key 'k' is given twice"));
  CHECK_THROWS_AS(registry.parse("chain:"), sd::InvalidArgumentError);  // an item that is not key=value
  CHECK(registry.parse("chain:rule=rrs:k=6").spec() == "chain:k=6:rule=rrs");
  CHECK(registry.describe_rule(registry.parse("autoregressive"), {}) == "no acceptance rule");
  CHECK(registry.describe_rule(registry.parse("chain:rule=typical"), {}) ==
        "typical acceptance, LOSSY (not the target's distribution)");

  Models m;
  CHECK_THROWS_WITH(registry.make("chain", m.target, nullptr, {}), Catch::Contains("needs a draft model"));
  HashedContextModel other_vocab(kVocab + 1, 3);
  CHECK_THROWS_AS(registry.make("chain", m.target, &other_vocab, {}), sd::ShapeError);
  CHECK_THROWS_WITH(registry.make("sv:all=1", m.target, &m.draft, {}), Catch::Contains("load_model"));
  CHECK_THROWS_WITH(registry.make("slem", m.target, nullptr, {}), Catch::Contains("load_vocabulary"));
  CHECK_THROWS_WITH(registry.make("tree:rule=block", m.target, &m.draft, {}), Catch::Contains("rule=traversal"));

  // A host's own method: its recipe, registered beside the library's.
  registry.add(sd::MethodInfo<HashedContextModel>{
      "chain2", "a chain of two, top-1", "", sd::MethodModels::kDraftModel, true, {sd::methods::rule_param()},
      [](const sd::MethodContext<HashedContextModel>& c) {
        return sd::methods::draft_model_method(c, sd::ChainBuilder{sd::ChainPick::kTop1},
                                               sd::methods::RuntimePolicy(sd::FixedLength::chain(2)));
      }});
  CHECK_THROWS_WITH(registry.add(registry.find("chain")), Catch::Contains("registered already"));
  auto mine = registry.make("chain2", m.target, &m.draft, {});
  auto reference = registry.make("chain:k=2", m.target, &m.draft, {});
  sd::GenerationOptions o;
  o.max_new_tokens = 20;
  const auto prompt = sd::testing::request_prompt(1, kVocab);
  const auto r = mine.generate(prompt, o);
  CHECK(r.tokens == reference.generate(prompt, o).tokens);
  CHECK(r.stats.rounds() < 20);  // drafts were accepted
}

TEST_CASE("The registry's chain at T = 1 emits the tokens the Python package checks",
          "[unit][engine][methods]") {
  // python/tests/test_engine.py decodes this request through the same
  // registry over a model written in Python that returns these logits, and
  // expects these tokens: the same seeds give the same tokens from Python.
  const auto registry = sd::standard_methods<HashedContextModel>();
  HashedContextModel target(5, 1), draft(5, 1, 2, 2.0f, /*noise=*/0.7f);
  auto chain = registry.make("chain:k=3", target, &draft, sd::SamplingParams{1.0f});
  sd::GenerationOptions o;
  o.max_new_tokens = 16;
  o.sampling = sd::SamplingParams{1.0f, 0, 1.0f, 5};
  o.request_id = 7;
  const std::vector<sd::TokenId> prompt{1, 2};
  CHECK(chain.generate(prompt, o).tokens ==
        std::vector<sd::TokenId>{0, 0, 4, 2, 0, 4, 2, 1, 0, 4, 2, 1, 2, 1, 3, 1});
}
