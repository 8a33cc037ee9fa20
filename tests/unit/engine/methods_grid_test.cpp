// bench/methods_grid.hpp, the batched long-context grid that
// cuda_methods_bench runs on a GPU, here over a toy model: every cell runs
// autoregressive decoding first and each method against it on the same
// workload; prompts are filled to the context; greedy outputs equal
// autoregressive decoding's.
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "../../../bench/methods_grid.hpp"
#include "specdec/io/prompts.hpp"
#include "specdec/methods/autoregressive.hpp"
#include "specdec/methods/chain.hpp"
#include "specdec/methods/magicdec.hpp"
#include "specdec/methods/ngram.hpp"
#include "specdec/testing/hashed_context_model.hpp"
#include "support/catch.hpp"

namespace sd = specdec;
using sd::TokenId;
using sd::testing::HashedContextModel;

namespace {

constexpr std::int64_t kVocab = 24;

std::vector<TokenId> held_out_text() {
  std::mt19937 gen(3);
  std::vector<TokenId> t;
  for (int i = 0; i < 300; ++i) t.push_back(static_cast<TokenId>(2 + gen() % (kVocab - 2)));
  return t;
}

}  // namespace

TEST_CASE("fill_to_context: BOS, a stretch of held-out text per request, the prompt's end", "[unit]") {
  const auto text = held_out_text();
  const std::vector<TokenId> prompt = {1, 9, 8, 7};  // BOS first
  const auto a = sd::io::fill_to_context(prompt, text, 1, 40, 16, 0, "text");
  const auto b = sd::io::fill_to_context(prompt, text, 1, 40, 16, 1, "text");
  REQUIRE(a.size() == 24);  // 40 - 16: generation ends at the context
  REQUIRE(b.size() == 24);
  CHECK(a.front() == 1);
  CHECK(std::vector<TokenId>(a.end() - 3, a.end()) == std::vector<TokenId>{9, 8, 7});
  CHECK(std::vector<TokenId>(a.begin() + 1, a.end() - 3) ==
        std::vector<TokenId>(text.begin(), text.begin() + 20));
  CHECK(std::vector<TokenId>(b.begin() + 1, b.end() - 3) != std::vector<TokenId>(a.begin() + 1, a.end() - 3));
  // A prompt longer than the room keeps its last tokens.
  const std::vector<TokenId> long_prompt(30, 5);
  const auto c = sd::io::fill_to_context(long_prompt, text, 1, 20, 4, 0, "text");
  CHECK(c.size() == 16);
  CHECK(c == [] {
    std::vector<TokenId> v(16, 5);
    v[0] = 1;
    return v;
  }());
  CHECK_THROWS_AS(sd::io::fill_to_context(prompt, text, 1, 16, 16, 0, "text"), sd::InvalidArgumentError);
  CHECK_THROWS_WITH(sd::io::fill_to_context(prompt, text, 1, 1000, 16, 0, "held.txt"),
                    Catch::Contains("held.txt holds 300 tokens"));
}

TEST_CASE("The methods grid runs every method against autoregressive decoding in each cell", "[unit]") {
  HashedContextModel target{kVocab, 1}, draft{kVocab, 1, 2, 2.0f, /*noise=*/0.7f};
  // The four methods the grid runs (the whole standard registry is compiled
  // in method_registry_test.cpp).
  sd::MethodRegistry<HashedContextModel> registry;
  registry.add(sd::methods::autoregressive_method<HashedContextModel>());
  registry.add(sd::methods::chain_method<HashedContextModel>(registry.hooks()));
  registry.add(sd::methods::magicdec_method<HashedContextModel>());
  registry.add(sd::methods::ngram_method<HashedContextModel>());
  const auto text = held_out_text();
  std::vector<std::vector<TokenId>> prompts;
  for (std::int32_t i = 0; i < 3; ++i) {
    auto p = sd::testing::request_prompt(i, kVocab);
    p.insert(p.begin(), 1);
    prompts.push_back(p);
  }
  std::vector<std::size_t> lengths;  // of the prompts filled to context 48
  const sd::bench::ContextFill fill = [&](const std::vector<TokenId>& p, std::int64_t context,
                                          std::size_t i) {
    if (context == 0) return p;
    auto out = sd::io::fill_to_context(p, text, 1, context, 12, i, "text");
    lengths.push_back(out.size());
    return out;
  };
  sd::bench::GridOptions o;
  o.methods = {"chain:k=3", "magicdec:k=3:sink=1:window=4", "ngram"};
  o.batches = {1, 4};
  o.contexts = {0, 48};
  o.waves = 2;
  o.max_new_tokens = 12;
  std::vector<std::string> seen;
  const auto cells =
      sd::bench::run_methods_grid(registry, target, &draft, prompts, fill, o,
                                  [&](const sd::bench::GridCell& c) { seen.push_back(c.method); });
  REQUIRE(cells.size() == 2 * 2 * 4);
  CHECK(seen.size() == cells.size());
  for (std::size_t i = 0; i < cells.size(); ++i) {
    const auto& c = cells[i];
    INFO(c.method << " context " << c.context << " batch " << c.batch);
    CHECK(c.method == (i % 4 == 0 ? "autoregressive" : o.methods[i % 4 - 1]));
    CHECK(c.context == o.contexts[i / 8]);
    CHECK(c.batch == o.batches[(i / 4) % 2]);
    CHECK(c.requests == std::max<std::int64_t>(3, 2 * c.batch));  // the prompts cycled to waves x batch
    CHECK(c.tokens == 12 * c.requests);
    CHECK(c.differing == 0);  // greedy: every output equals autoregressive decoding's
    CHECK(c.occupancy <= c.batch);
    CHECK(c.occupancy > 0.0);
    CHECK(c.ttft_ms > 0.0);  // each request's first token came after its prefill
    if (c.method == "autoregressive") {
      CHECK(c.tau == 1.0);
      CHECK(c.speedup == 1.0);
    } else {
      CHECK(c.tau > 1.0);
    }
  }
  for (const auto l : lengths) CHECK(l == 36);
  CHECK(lengths.size() == 3 + 8);  // the two batch sizes' workloads at context 48, each filled once

  // Sampled runs are not compared with autoregressive decoding's outputs
  // (the same seeds draw different tokens through a different method).
  o.sampling = sd::SamplingParams{0.8f, 0, 1.0f, 7};
  o.contexts = {0};
  o.batches = {2};
  o.methods = {"chain:k=3"};
  for (const auto& c : sd::bench::run_methods_grid(registry, target, &draft, prompts, fill, o))
    CHECK(c.differing == 0);
}
