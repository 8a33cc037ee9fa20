// Lyanna's decoder and the EAGLE-style head drafter end to end on host models
// (specdec/testing/hashed_context_model.hpp, support/fake_feature_head.hpp): greedy
// output equals greedy autoregressive output token for token with and
// without re-sampling and verification fusion, re-sampled trees are built and
// accepted (the tests are not vacuous), the target's hidden states reach the
// head aligned with their tokens, and sampled Lyanna keeps the target's law.
#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include "specdec/accept/greedy.hpp"
#include "specdec/accept/recursive_rejection_sampling.hpp"
#include "specdec/core/target_features.hpp"
#include "specdec/draft/eagle_head_drafter.hpp"
#include "specdec/draft/lyanna_drafter.hpp"
#include "specdec/engine/autoregressive_decoder.hpp"
#include "specdec/engine/lyanna_decoder.hpp"
#include "specdec/engine/speculative_decoder.hpp"
#include "specdec/tree/dynamic_tree_builder.hpp"
#include "specdec/verify/model_verifier.hpp"
#include "support/catch.hpp"
#include "specdec/testing/chi_square.hpp"
#include "support/fake_feature_head.hpp"
#include "specdec/testing/hashed_context_model.hpp"

namespace sd = specdec;
using sd::testing::FakeFeatureHead;
using sd::testing::HashedContextModel;

namespace {

constexpr std::int64_t kVocab = 24;
using Verifier = sd::ModelVerifier<HashedContextModel>;

// Lyanna as the engine composes it: with re-sampling (and fusion, as the
// options say) or without, behind one type.
struct AnyLyanna {
  std::function<sd::GenerationResult(std::span<const sd::TokenId>, const sd::GenerationOptions&)> run;
  sd::GenerationResult generate(std::span<const sd::TokenId> prompt, const sd::GenerationOptions& o) {
    return run(prompt, o);
  }
};
template <class Decoder>
AnyLyanna any_lyanna(std::shared_ptr<Decoder> d) {
  return {[d](std::span<const sd::TokenId> prompt, const sd::GenerationOptions& o) { return d->generate(prompt, o); }};
}
template <class Rule>
AnyLyanna make_lyanna(sd::LyannaDrafter<FakeFeatureHead>& drafter, Verifier& verifier, Rule rule,
                      const sd::LyannaOptions& o) {
  o.validate();
  const auto builder = o.builder();
  if (!o.resample)
    return any_lyanna(std::make_shared<sd::LyannaDecoderWithoutResampling<FakeFeatureHead, Verifier, Rule>>(
        drafter, builder, verifier, rule, o.policy()));
  return any_lyanna(std::make_shared<sd::LyannaDecoder<FakeFeatureHead, Verifier, Rule>>(
      drafter, builder, verifier, rule, o.policy(), 0, sd::SelectAll{}, o.resampling()));
}
const std::vector<sd::TokenId> kHot = {0, 3, 5, 7, 8, 11, 13, 17, 19, 23};

// The target every test here decodes with (vocabulary kVocab, seed 1).
std::vector<sd::TokenId> greedy_reference(std::span<const sd::TokenId> prompt, std::int64_t n) {
  return sd::testing::greedy_continuation(HashedContextModel(kVocab, 1), prompt, n);
}

struct Fixed {
  sd::DraftBudget b;
  sd::DraftBudget budget() { return b; }
  void observe(const sd::RoundOutcome&) {}
};

}  // namespace

TEST_CASE("Greedy Lyanna equals greedy autoregressive decoding", "[unit][engine][lyanna]") {
  struct Setting {
    const char* name;
    bool resample, fusion;
    std::int32_t threshold;
  };
  const auto s = GENERATE(Setting{"no re-sampling", false, false, 0}, Setting{"re-sampling, separate verify", true, false, 0},
                          Setting{"re-sampling + fusion", true, true, 0}, Setting{"fusion, threshold 1", true, true, 1});
  INFO(s.name);
  const std::vector<std::vector<sd::TokenId>> prompts = {{3, 1, 4, 1, 5}, {7}, {2, 9}, {11, 12, 13, 14, 15, 16, 17}};
  sd::Stats total;
  for (const auto& prompt : prompts) {
    HashedContextModel target(kVocab, 1), draft(kVocab, 1, 2, 2.0f, /*noise=*/0.8f);
    sd::ModelVerifier verifier(target);
    FakeFeatureHead head(draft, kHot, 3);
    sd::LyannaDrafter drafter(head);
    sd::LyannaOptions o;
    o.resample = s.resample;
    o.fusion = s.fusion;
    o.resample_threshold = s.threshold;
    o.depth = 4;
    o.verify_budget = 3;  // narrow fresh trees leave room for re-sampled branches to win
    auto decoder = make_lyanna(drafter, verifier, sd::GreedyAcceptance{}, o);
    sd::GenerationOptions g;
    g.max_new_tokens = 60;
    const auto out = decoder.generate(prompt, g);
    const auto reference = greedy_reference(prompt, 80);
    CHECK(out.tokens == std::vector<sd::TokenId>(reference.begin(), reference.begin() + 60));
    // The target's cache holds a prefix of the greedy text (a round may
    // commit past max_new_tokens; the last bonus is the next root).
    auto text = prompt;
    text.insert(text.end(), reference.begin(), reference.end());
    const auto committed = target.committed(0);
    REQUIRE(committed.size() < text.size());
    CHECK(std::equal(committed.begin(), committed.end(), text.begin()));
    total.acceptance.num_rounds += out.stats.rounds();
    total.new_tokens += out.stats.new_tokens;
    total.resampling.trees += out.stats.resampling.trees;
    total.resampling.accepted += out.stats.resampling.accepted;
    total.resampling.nodes += out.stats.resampling.nodes;
    total.resampling.separate_forwards += out.stats.resampling.separate_forwards;
  }
  // Speculation happened: fewer rounds than tokens; re-sampling built trees
  // and some of their tokens were accepted.
  CHECK(total.acceptance.num_rounds < total.new_tokens);
  if (s.resample) {
    CHECK(total.resampling.trees > 0);
    CHECK(total.resampling.nodes > 0);
    if (s.threshold == 0) CHECK(total.resampling.accepted > 0);
    CHECK((total.resampling.separate_forwards > 0) == !s.fusion);
  } else {
    CHECK(total.resampling.trees == 0);
  }
}

TEST_CASE("Greedy EAGLE-style head drafting equals greedy autoregressive decoding", "[unit][engine][lyanna]") {
  const std::vector<std::vector<sd::TokenId>> prompts = {{3, 1, 4, 1, 5}, {7}, {11, 12, 13}};
  std::int64_t rounds = 0, tokens = 0;
  for (const auto& prompt : prompts) {
    HashedContextModel target(kVocab, 1), draft(kVocab, 1, 2, 2.0f, /*noise=*/0.8f);
    sd::ModelVerifier verifier(target);
    FakeFeatureHead head(draft, kHot, 3);
    sd::EagleHeadDrafter drafter(head);
    sd::SpeculativeDecoder decoder(drafter, sd::DynamicTreeBuilder{3, 3, 10}, verifier, sd::GreedyAcceptance{},
                                   Fixed{{3, 10, 10}});
    sd::GenerationOptions g;
    g.max_new_tokens = 50;
    const auto out = decoder.generate(prompt, g);
    CHECK(out.tokens == greedy_reference(prompt, 50));
    rounds += out.stats.rounds();
    tokens += out.stats.new_tokens;
  }
  CHECK(rounds < tokens / 2);  // a noisy copy of the target is accepted often
}

TEST_CASE("Lyanna options are checked", "[unit][engine][lyanna]") {
  sd::LyannaOptions bad;
  bad.branch = 0;
  CHECK_THROWS_AS(bad.validate(), sd::InvalidArgumentError);
}

TEST_CASE("Sampled Lyanna keeps the target's law of the first two tokens", "[statistical][engine][lyanna]") {
  const sd::SamplingParams sampling = GENERATE(sd::SamplingParams{0.8f, 8, 1.0f}, sd::SamplingParams{1.0f, 0, 0.9f});
  const bool fusion = GENERATE(false, true);
  HashedContextModel target(kVocab, 1), draft(kVocab, 1, 2, 2.0f, /*noise=*/1.0f);
  sd::ModelVerifier verifier(target);
  FakeFeatureHead head(draft, kHot, 3);
  sd::LyannaDrafter drafter(head);
  sd::LyannaOptions o;
  o.fusion = fusion;
  o.verify_budget = 3;
  auto decoder = make_lyanna(drafter, verifier, sd::RecursiveRejectionSampling{}, o);

  const std::vector<sd::TokenId> prompt{3, 1, 4};
  sd::Warper warp;
  std::vector<double> expected(static_cast<std::size_t>(kVocab * kVocab), 0.0);
  std::vector<float> p1(kVocab), p2(kVocab);
  warp(target.logits_after(prompt), sampling, p1);
  for (sd::TokenId a = 0; a < kVocab; ++a) {
    if (p1[static_cast<std::size_t>(a)] == 0.0f) continue;
    auto ctx = prompt;
    ctx.push_back(a);
    warp(target.logits_after(ctx), sampling, p2);
    for (sd::TokenId b = 0; b < kVocab; ++b)
      expected[static_cast<std::size_t>(a * kVocab + b)] = double(p1[static_cast<std::size_t>(a)]) * p2[static_cast<std::size_t>(b)];
  }
  std::vector<std::int64_t> counts(expected.size(), 0);
  sd::GenerationOptions g;
  g.max_new_tokens = 2;
  g.sampling = sampling;
  std::int64_t resampled_accepts = 0;
  for (int i = 0; i < 40000; ++i) {
    g.sampling.seed = static_cast<std::uint64_t>(i);
    const auto out = decoder.generate(prompt, g);
    resampled_accepts += out.stats.resampling.accepted;
    ++counts[static_cast<std::size_t>(out.tokens[0] * kVocab + out.tokens[1])];
  }
  const auto fit = sd::testing::chi_square_gof(counts, expected);
  INFO(fit.describe());
  CHECK_FALSE(fit.rejects(1e-3));
  CHECK(resampled_accepts > 0);  // the second token did come from re-sampled trees at times
}

TEST_CASE("Lyanna and EAGLE-head generation that fills the context ends there", "[unit][engine][lyanna]") {
  // The target throws past its context: the chain, the fresh tree and the
  // re-sampled tree must all shrink to what is left.
  constexpr std::int64_t kContext = 37;
  const std::vector<sd::TokenId> prompt = {3, 1, 4, 1, 5};
  const auto reference = greedy_reference(prompt, kContext - 5);
  const auto fusion = GENERATE(false, true);
  HashedContextModel target(kVocab, 1), draft(kVocab, 1, 2, 2.0f, /*noise=*/0.8f);
  target.set_max_context(kContext);
  sd::ModelVerifier verifier(target);
  FakeFeatureHead head(draft, kHot, 3);
  sd::GenerationOptions g;
  g.max_new_tokens = 1000;
  {
    sd::LyannaDrafter drafter(head);
    sd::LyannaOptions o;
    o.fusion = fusion;
    o.depth = 4;
    o.verify_budget = 6;
    auto decoder = make_lyanna(drafter, verifier, sd::GreedyAcceptance{}, o);
    const auto out = decoder.generate(prompt, g);
    CHECK(out.tokens == reference);
    CHECK(out.stop_reason == sd::StopReason::kContextLimit);
  }
  {
    sd::EagleHeadDrafter drafter(head);
    sd::SpeculativeDecoder decoder(drafter, sd::DynamicTreeBuilder{3, 3, 10}, verifier, sd::GreedyAcceptance{},
                                   Fixed{{3, 10, 10}});
    const auto out = decoder.generate(prompt, g);
    CHECK(out.tokens == reference);
    CHECK(out.stop_reason == sd::StopReason::kContextLimit);
  }
}
