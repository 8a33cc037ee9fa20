// The speculative decoder end to end on host models whose logits depend on the
// visible context (specdec/testing/hashed_context_model.hpp): greedy speculative output
// equals greedy autoregressive output token for token, caches end consistent,
// stop conditions are exact, and bad input is a typed error.
#include <cstdint>
#include <string>
#include <vector>

#include "specdec/accept/greedy.hpp"
#include "specdec/accept/recursive_rejection_sampling.hpp"
#include "specdec/accept/typical_acceptance.hpp"
#include "specdec/draft/model_drafter.hpp"
#include "specdec/engine/autoregressive_decoder.hpp"
#include "specdec/engine/speculative_decoder.hpp"
#include "specdec/engine/timed_model.hpp"
#include "specdec/tree/chain_builder.hpp"
#include "specdec/tree/dynamic_tree_builder.hpp"
#include "specdec/tree/static_tree_builder.hpp"
#include "specdec/verify/model_verifier.hpp"
#include "support/catch.hpp"
#include "specdec/testing/chi_square.hpp"
#include "specdec/testing/hashed_context_model.hpp"

namespace sd = specdec;
using sd::testing::HashedContextModel;

namespace {

constexpr std::int64_t kVocab = 24;

struct Fixed {
  sd::DraftBudget b;
  sd::DraftBudget budget() { return b; }
  void observe(const sd::RoundOutcome&) {}
};

std::vector<sd::TokenId> random_prompt(std::uint64_t seed, int length) {
  sd::RandomStream r(seed, 99);
  std::vector<sd::TokenId> p(static_cast<std::size_t>(length));
  for (auto& t : p) t = static_cast<sd::TokenId>(r.uniform() * kVocab);
  return p;
}

// The target every test here decodes with (vocabulary kVocab, seed 1).
std::vector<sd::TokenId> greedy_reference(std::span<const sd::TokenId> prompt, std::int64_t n) {
  return sd::testing::greedy_continuation(HashedContextModel(kVocab, 1), prompt, n);
}

}  // namespace

TEST_CASE("Autoregressive decoding at temperature 0 is the model's greedy continuation", "[unit][engine]") {
  HashedContextModel target(kVocab, 1);
  sd::AutoregressiveDecoder ar(target);
  sd::GenerationOptions o;
  o.max_new_tokens = 40;
  for (std::uint64_t s = 0; s < 4; ++s) {
    const auto prompt = random_prompt(s, 1 + static_cast<int>(s) * 3);
    CHECK(ar.generate(prompt, o).tokens == greedy_reference(prompt, 40));
  }
}

TEST_CASE("Greedy chain speculation equals greedy autoregressive decoding", "[unit][engine]") {
  const auto depth = GENERATE(1, 2, 4, 7);
  const auto prompt_length = GENERATE(1, 5);
  HashedContextModel target(kVocab, 1), draft(kVocab, 1, 2, 2.0f, /*noise=*/1.0f);
  sd::ModelVerifier verifier(target);
  sd::ModelDrafter drafter(draft, 5);
  sd::SpeculativeDecoder decoder(drafter, sd::ChainBuilder{}, verifier, sd::GreedyAcceptance{},
                                 Fixed{{depth, depth, depth}}, 3);
  for (std::uint64_t s = 0; s < 4; ++s) {
    const auto prompt = random_prompt(s, prompt_length);
    sd::GenerationOptions o;
    o.max_new_tokens = 50;
    const auto got = decoder.generate(prompt, o);
    CHECK(got.tokens == greedy_reference(prompt, 50));
    // Each round emits accepted drafts + 1, never more than depth + 1.
    CHECK(got.stats.acceptance.mean_emitted() <= depth + 1.0);
    CHECK(got.stats.acceptance.lossless);
    // The target cache holds the prompt and every emitted token but the last
    // (the next round's root), unless the final round was cut by max_new_tokens.
    const auto committed = target.committed(3);
    REQUIRE(committed.size() >= prompt.size() + got.tokens.size() - 1);
    std::vector<sd::TokenId> text(prompt.begin(), prompt.end());
    text.insert(text.end(), got.tokens.begin(), got.tokens.end());
    for (std::size_t i = 0; i < prompt.size() + got.tokens.size() - 1; ++i) CHECK(committed[i] == text[i]);
  }
}

TEST_CASE("A correlated draft is accepted often, and the drafter's cache tracks the text", "[unit][engine]") {
  HashedContextModel target(kVocab, 1), draft(kVocab, 1, 2, 2.0f, /*noise=*/0.5f);
  sd::ModelVerifier verifier(target);
  sd::ModelDrafter drafter(draft, 0);
  sd::SpeculativeDecoder decoder(drafter, sd::ChainBuilder{}, verifier, sd::GreedyAcceptance{}, Fixed{{4, 4, 4}});
  const auto prompt = random_prompt(11, 6);
  sd::GenerationOptions o;
  o.max_new_tokens = 200;
  const auto got = decoder.generate(prompt, o);
  CHECK(got.tokens == greedy_reference(prompt, 200));
  CHECK(got.stats.acceptance.mean_emitted() > 2.0);  // a noise-0.5 draft agrees most of the time
  // The draft cache holds a prefix of the text (the last round may have run
  // past max_new_tokens, so compare the common part) that grew past the prompt.
  const auto dc = draft.committed(0);
  std::vector<sd::TokenId> text(prompt.begin(), prompt.end());
  text.insert(text.end(), got.tokens.begin(), got.tokens.end());
  CHECK(dc.size() > prompt.size() + 150);
  for (std::size_t i = 0; i < std::min(dc.size(), text.size()); ++i) CHECK(dc[i] == text[i]);
}

namespace {

// Draws (t1, t2) `draws` times from `decoder` (seeds 0..draws-1) and tests
// them against the target's exact joint law at `sampling`.
template <class Decoder>
sd::testing::ChiSquareResult first_two_tokens_fit(Decoder& decoder, HashedContextModel& target, const sd::SamplingParams& sampling) {
  const std::vector<sd::TokenId> prompt{3, 1, 4};
  sd::Warper warp;
  std::vector<double> expected(static_cast<std::size_t>(kVocab * kVocab), 0.0);
  std::vector<float> p1(kVocab), p2(kVocab);
  warp(target.logits_after(prompt), sampling, p1);
  for (sd::TokenId a = 0; a < kVocab; ++a) {
    if (p1[a] == 0.0f) continue;
    auto ctx = prompt;
    ctx.push_back(a);
    warp(target.logits_after(ctx), sampling, p2);
    for (sd::TokenId b = 0; b < kVocab; ++b) expected[a * kVocab + b] = double(p1[a]) * p2[b];
  }
  std::vector<std::int64_t> counts(expected.size(), 0);
  sd::GenerationOptions o;
  o.max_new_tokens = 2;
  o.sampling = sampling;
  const int draws = 40000;
  for (int i = 0; i < draws; ++i) {
    o.sampling.seed = static_cast<std::uint64_t>(i);
    const auto t = decoder.generate(prompt, o).tokens;
    ++counts[static_cast<std::size_t>(t[0] * kVocab + t[1])];
  }
  return sd::testing::chi_square_gof(counts, expected);
}

template <class Decoder>
void check_first_two_tokens(Decoder& decoder, HashedContextModel& target, const sd::SamplingParams& sampling) {
  const auto fit = first_two_tokens_fit(decoder, target, sampling);
  INFO(fit.describe());
  CHECK_FALSE(fit.rejects(1e-3));
}

}  // namespace

TEST_CASE("Sampled speculation keeps the target's law of the first two tokens", "[statistical][engine]") {
  // Temperature 0.8 with top-k 8, and plain temperature 1 with top-p 0.9.
  const auto sampling = GENERATE(sd::SamplingParams{0.8f, 8, 1.0f}, sd::SamplingParams{1.0f, 0, 0.9f});
  HashedContextModel target(kVocab, 1), draft(kVocab, 1, 2, 2.0f, /*noise=*/1.0f);
  sd::ModelVerifier verifier(target);
  sd::ModelDrafter drafter(draft, 0);
  SECTION("sampled chain") {
    sd::SpeculativeDecoder decoder(drafter, sd::ChainBuilder{sd::ChainBuilder::Pick::kSample}, verifier,
                                   sd::RecursiveRejectionSampling{}, Fixed{{3, 3, 3}});
    check_first_two_tokens(decoder, target, sampling);
  }
  SECTION("static tree, deterministic top-k children") {
    sd::SpeculativeDecoder decoder(drafter, sd::StaticTreeBuilder{sd::parse_tree_shape("0;1;2;0.0;0.1;1.0;0.0.0")},
                                   verifier, sd::RecursiveRejectionSampling{}, Fixed{{3, 7, 7}});
    check_first_two_tokens(decoder, target, sampling);
  }
  SECTION("static tree, children sampled without replacement") {
    sd::SpeculativeDecoder decoder(
        drafter, sd::StaticTreeBuilder{sd::parse_tree_shape("0;1;0.0;0.1"), sd::ChildMode::kSampledWithoutReplacement},
        verifier, sd::RecursiveRejectionSampling{}, Fixed{{2, 4, 4}});
    check_first_two_tokens(decoder, target, sampling);
  }
  SECTION("dynamic tree") {
    sd::SpeculativeDecoder decoder(drafter, sd::DynamicTreeBuilder{3, 3, 8}, verifier,
                                   sd::RecursiveRejectionSampling{}, Fixed{{3, 8, 8}});
    check_first_two_tokens(decoder, target, sampling);
  }
}

TEST_CASE("The same test rejects a lossy rule (it has power)", "[statistical][engine]") {
  const sd::SamplingParams sampling{1.0f, 0, 1.0f};
  HashedContextModel target(kVocab, 1), draft(kVocab, 1, 2, 2.0f, /*noise=*/1.0f);
  sd::ModelVerifier verifier(target);
  sd::ModelDrafter drafter(draft, 0);
  sd::SpeculativeDecoder decoder(drafter, sd::ChainBuilder{sd::ChainBuilder::Pick::kSample}, verifier,
                                 sd::TypicalAcceptance{}, Fixed{{3, 3, 3}});
  const auto fit = first_two_tokens_fit(decoder, target, sampling);
  INFO(fit.describe());
  CHECK(fit.rejects(1e-3));
}

TEST_CASE("Greedy tree speculation equals greedy autoregressive decoding", "[unit][engine]") {
  HashedContextModel target(kVocab, 1), draft(kVocab, 1, 2, 2.0f, /*noise=*/0.7f);
  sd::ModelVerifier verifier(target);
  sd::ModelDrafter drafter(draft, 0);
  sd::SpeculativeDecoder stat(drafter, sd::StaticTreeBuilder{sd::parse_tree_shape("0;1;2;0.0;0.1;1.0;0.0.0;0.0.0.0")},
                              verifier, sd::GreedyAcceptance{}, Fixed{{4, 8, 8}});
  sd::SpeculativeDecoder dyn(drafter, sd::DynamicTreeBuilder{4, 4, 12}, verifier, sd::GreedyAcceptance{},
                             Fixed{{4, 12, 12}});
  for (std::uint64_t s = 0; s < 4; ++s) {
    const auto prompt = random_prompt(s, 4);
    sd::GenerationOptions o;
    o.max_new_tokens = 60;
    const auto reference = greedy_reference(prompt, 60);
    const auto a = stat.generate(prompt, o), b = dyn.generate(prompt, o);
    CHECK(a.tokens == reference);
    CHECK(b.tokens == reference);
    // Trees accept more per round than a single chain could at depth 1.
    CHECK(a.stats.acceptance.mean_emitted() > 1.5);
    CHECK(b.stats.acceptance.mean_emitted() > 1.5);
  }
}

TEST_CASE("Stop tokens, stop strings and max_new_tokens end generation exactly", "[unit][engine]") {
  HashedContextModel target(kVocab, 1), draft(kVocab, 1, 2, 2.0f, 0.5f);
  sd::ModelVerifier verifier(target);
  sd::ModelDrafter drafter(draft, 0);
  sd::SpeculativeDecoder decoder(drafter, sd::ChainBuilder{}, verifier, sd::GreedyAcceptance{}, Fixed{{5, 5, 5}});
  const auto prompt = random_prompt(5, 4);
  const auto reference = greedy_reference(prompt, 80);
  sd::GenerationOptions o;
  o.max_new_tokens = 80;
  SECTION("max_new_tokens cuts inside a round") {
    for (const std::int64_t n : {0, 1, 2, 3, 7, 13}) {
      o.max_new_tokens = n;
      std::vector<sd::TokenId> streamed;
      const auto got = decoder.generate(prompt, o, [&](sd::TokenId t) { streamed.push_back(t); });
      CHECK(got.tokens == std::vector<sd::TokenId>(reference.begin(), reference.begin() + n));
      CHECK(streamed == got.tokens);
      CHECK(got.stop_reason == sd::StopReason::kMaxNewTokens);
    }
  }
  SECTION("a stop token ends after its first occurrence") {
    const sd::TokenId stop = reference[10];
    const auto first = std::find(reference.begin(), reference.end(), stop) - reference.begin();
    o.stop_tokens = {stop};
    const auto got = decoder.generate(prompt, o);
    CHECK(got.tokens == std::vector<sd::TokenId>(reference.begin(), reference.begin() + first + 1));
    CHECK(got.stop_reason == sd::StopReason::kStopToken);
  }
  SECTION("a stop string ends at the token completing it") {
    // Text: each token is a letter; stop at the text of tokens 12..14.
    o.detokenize = [](std::span<const sd::TokenId> ts) {
      std::string s;
      for (auto t : ts) s.push_back(static_cast<char>('a' + t));
      return s;
    };
    std::string all = o.detokenize(reference);
    const std::string stop = all.substr(12, 3);
    o.stop_strings = {stop};
    const auto end = all.find(stop) + stop.size();
    const auto got = decoder.generate(prompt, o);
    CHECK(got.tokens == std::vector<sd::TokenId>(reference.begin(), reference.begin() + static_cast<std::ptrdiff_t>(end)));
    CHECK(got.stop_reason == sd::StopReason::kStopString);
  }
  SECTION("bad input is a typed error") {
    CHECK_THROWS_AS(decoder.generate(std::vector<sd::TokenId>{}, o), sd::InvalidArgumentError);
    o.max_new_tokens = -1;
    CHECK_THROWS_AS(decoder.generate(prompt, o), sd::InvalidArgumentError);
    o.max_new_tokens = 4;
    o.stop_strings = {"x"};  // without detokenize
    CHECK_THROWS_AS(decoder.generate(prompt, o), sd::InvalidArgumentError);
  }
}

TEST_CASE("Generation that fills the context ends there and keeps every token", "[unit][engine]") {
  // Models whose forward throws past their context: a decoder that drafted
  // or verified past it would fail here, not just stop late.
  constexpr std::int64_t kContext = 40;
  const auto prompt = random_prompt(7, 5);
  const auto reference = greedy_reference(prompt, kContext - 5);
  HashedContextModel target(kVocab, 1), draft(kVocab, 1, 2, 2.0f, /*noise=*/0.5f);
  target.set_max_context(kContext);
  sd::ModelVerifier verifier(target);
  sd::ModelDrafter drafter(draft, 0);
  sd::GenerationOptions o;
  o.max_new_tokens = 100000;

  const auto check_full = [&](const sd::GenerationResult& got, std::int64_t context) {
    CHECK(got.tokens == std::vector<sd::TokenId>(reference.begin(), reference.begin() + (context - 5)));
    CHECK(got.stop_reason == sd::StopReason::kContextLimit);
    CHECK(got.stats.stop_reason == sd::StopReason::kContextLimit);
    CHECK(got.stats.new_tokens == context - 5);
  };
  SECTION("autoregressive") {
    sd::AutoregressiveDecoder ar(target);
    check_full(ar.generate(prompt, o), kContext);
  }
  SECTION("chain, static tree and dynamic tree; the draft's smaller context is the limit") {
    const auto depth = GENERATE(1, 4, 7);
    const auto draft_context = GENERATE(std::int64_t{40}, std::int64_t{37});  // kContext, and 3 fewer
    draft.set_max_context(draft_context);
    const auto limit = std::min<std::int64_t>(kContext, draft_context);
    sd::SpeculativeDecoder chain(drafter, sd::ChainBuilder{}, verifier, sd::GreedyAcceptance{},
                                 Fixed{{depth, depth, depth}});
    check_full(chain.generate(prompt, o), limit);
    sd::SpeculativeDecoder stat(drafter, sd::StaticTreeBuilder{sd::parse_tree_shape("0;1;2;0.0;0.1;1.0;0.0.0;0.0.0.0")},
                                verifier, sd::GreedyAcceptance{}, Fixed{{4, 8, 8}});
    check_full(stat.generate(prompt, o), limit);
    sd::SpeculativeDecoder dyn(drafter, sd::DynamicTreeBuilder{4, depth, 12}, verifier, sd::GreedyAcceptance{},
                               Fixed{{depth, 12, 12}});
    check_full(dyn.generate(prompt, o), limit);
  }
  SECTION("max_new_tokens that ends exactly at the context is the reason given") {
    sd::SpeculativeDecoder chain(drafter, sd::ChainBuilder{}, verifier, sd::GreedyAcceptance{}, Fixed{{4, 4, 4}});
    o.max_new_tokens = kContext - 5;
    const auto got = chain.generate(prompt, o);
    CHECK(got.tokens == reference);
    CHECK(got.stop_reason == sd::StopReason::kMaxNewTokens);
  }
  SECTION("a prompt that fills the context generates nothing; a longer one is refused with both numbers") {
    sd::SpeculativeDecoder chain(drafter, sd::ChainBuilder{}, verifier, sd::GreedyAcceptance{}, Fixed{{4, 4, 4}});
    const auto full = random_prompt(3, static_cast<int>(kContext));
    const auto got = chain.generate(full, o);
    CHECK(got.tokens.empty());
    CHECK(got.stop_reason == sd::StopReason::kContextLimit);
    const auto longer = random_prompt(3, static_cast<int>(kContext) + 1);
    CHECK_THROWS_WITH(chain.generate(longer, o), Catch::Matchers::Contains("the prompt has 41 tokens") &&
                                                     Catch::Matchers::Contains("the context holds 40"));
    sd::AutoregressiveDecoder ar(target);
    CHECK_THROWS_AS(ar.generate(longer, o), sd::InvalidArgumentError);
  }
}

namespace {

// A fixed-budget policy that keeps what it observed (copied: the outcome's
// pointers are valid during observe() only).
struct Recording {
  sd::DraftBudget b;
  struct Seen {
    sd::RoundOutcome outcome;
    std::vector<sd::TokenId> tokens;
    std::vector<float> draft_probs;
    std::vector<std::int32_t> accepted;
    std::int32_t pool_size = 0;
  };
  std::vector<Seen>* seen;
  const sd::DynamicTreeBuilder* pool_of = nullptr;
  sd::DraftBudget budget() { return b; }
  void observe(const sd::RoundOutcome& o) {
    Seen s{o, {}, {}, {o.accepted_nodes.begin(), o.accepted_nodes.end()}, pool_of ? pool_of->pool().size() : -1};
    for (std::int32_t i = 0; i < o.tree->size(); ++i) {
      s.tokens.push_back(o.tree->token(i));
      s.draft_probs.push_back(o.tree->node(i).draft_prob);
    }
    s.outcome.tree = nullptr;
    s.outcome.accepted_nodes = {};
    seen->push_back(std::move(s));
  }
};

}  // namespace

TEST_CASE("Policies see the round: tree, draft probabilities, accepted path, drafted and verified counts, model times",
          "[unit][engine]") {
  HashedContextModel target_model(kVocab, 1), draft_model(kVocab, 1, 2, 2.0f, /*noise=*/0.7f);
  sd::TimedModel target(target_model), draft(draft_model);
  sd::ModelVerifier verifier(target);
  sd::ModelDrafter drafter(draft, 0);
  std::vector<Recording::Seen> seen;
  sd::SpeculativeDecoder decoder(drafter, sd::DynamicTreeBuilder{3, 3, 6}, verifier, sd::GreedyAcceptance{},
                                 Recording{{3, 12, 6}, &seen});
  decoder.policy().pool_of = &decoder.builder();
  decoder.set_model_clocks(&target.clock(), &draft.clock());
  std::vector<std::vector<sd::TokenId>> trees;
  std::vector<std::vector<std::int32_t>> paths;
  decoder.set_round_observer([&](const sd::DraftTree& t, const sd::VerifyResult& r) {
    std::vector<sd::TokenId> tokens;
    for (std::int32_t i = 0; i < t.size(); ++i) tokens.push_back(t.token(i));
    trees.push_back(tokens);
    paths.push_back(r.accepted_nodes);
  });
  sd::GenerationOptions o;
  o.max_new_tokens = 40;
  const auto out = decoder.generate(random_prompt(4, 5), o);
  REQUIRE(seen.size() == static_cast<std::size_t>(out.stats.rounds()));
  REQUIRE(trees.size() == seen.size());
  bool pool_larger = false;
  for (std::size_t r = 0; r < seen.size(); ++r) {
    INFO("round " << r);
    const auto& s = seen[r];
    CHECK(s.tokens == trees[r]);
    CHECK(s.accepted == paths[r]);
    CHECK(s.outcome.num_verified == static_cast<std::int32_t>(s.tokens.size()));
    CHECK(s.outcome.num_accepted == static_cast<std::int32_t>(s.accepted.size()));
    CHECK(s.outcome.num_drafted == s.pool_size);  // the whole pool, not just the verified tree
    pool_larger = pool_larger || s.outcome.num_drafted > s.outcome.num_verified;
    for (const float q : s.draft_probs) CHECK((q > 0.0f && q <= 1.0f));
    CHECK(s.outcome.target_forwards == 1);
    CHECK(s.outcome.draft_forwards == 3);  // one per level
    CHECK(s.outcome.target_model_us >= 0.0);
    CHECK(s.outcome.target_model_us <= s.outcome.verify_us);
    CHECK(s.outcome.draft_model_us <= s.outcome.draft_us + s.outcome.verify_us);  // its commit falls in verify
  }
  CHECK(pool_larger);
}
