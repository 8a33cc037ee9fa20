// The joint law of the first THREE generated tokens, through the real engine
// and the real builders, for every lossless method: a chi-square test against
// the warped target's law P(a) P(b | a) P(c | a, b) on an order-2 host model
// (so each token depends on the ones before it), at temperature 1 and at one
// warped setting. Batched decoding (4 ragged requests per step) is tested the
// same way, Speculative Verification too (at batch 4), and typical acceptance
// and SV steering sampled drafts with A (both lossy) must be rejected by the
// same test.
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <set>
#include <tuple>
#include <string>
#include <vector>

#include "lossless_harness.hpp"
#include "specdec/accept/block_verification.hpp"
#include "specdec/accept/recursive_rejection_sampling.hpp"
#include "specdec/accept/speculative_sampling.hpp"
#include "specdec/accept/traversal_verification.hpp"
#include "specdec/accept/typical_acceptance.hpp"
#include "specdec/carry/lagged_tail.hpp"
#include "specdec/draft/eagle_head_drafter.hpp"
#include "specdec/draft/intersection_drafter.hpp"
#include "specdec/draft/model_drafter.hpp"
#include "specdec/draft/ngram_drafter.hpp"
#include "specdec/draft/string_match_drafter.hpp"
#include "specdec/draft/suffix_drafter.hpp"
#include "specdec/engine/lyanna_decoder.hpp"
#include "specdec/engine/speculative_decoder.hpp"
#include "specdec/engine/speculative_engine.hpp"
#include "specdec/methods/magicdec.hpp"
#include "specdec/methods/spire.hpp"
#include "specdec/policy/cost_aware_tree.hpp"
#include "specdec/policy/fixed_length.hpp"
#include "specdec/policy/hardware_budget.hpp"
#include "specdec/select/goodput_selector.hpp"
#include "specdec/testing/chi_square.hpp"
#include "specdec/testing/hashed_context_model.hpp"
#include "specdec/tree/chain_builder.hpp"
#include "specdec/tree/dynamic_tree_builder.hpp"
#include "specdec/tree/multi_sequence_builder.hpp"
#include "specdec/tree/sequoia.hpp"
#include "specdec/tree/static_tree_builder.hpp"
#include "specdec/tree/suffix_tree_builder.hpp"
#include "specdec/verify/model_verifier.hpp"
#include "support/catch.hpp"
#include "support/fake_feature_head.hpp"
#include "support/fake_spire_head.hpp"
#include "support/toy_vocabulary.hpp"

namespace sd = specdec;
namespace st = specdec::testing;
using sd::testing::FakeFeatureHead;
using sd::testing::HashedContextModel;

namespace {

constexpr std::int64_t kVocab = 8;
constexpr std::int64_t kCells = kVocab * kVocab * kVocab;
const std::vector<sd::TokenId> kHot = {0, 2, 3, 5};
using Verifier = sd::ModelVerifier<HashedContextModel>;
using Drafter = sd::ModelDrafter<HashedContextModel>;

// Generations per check: a fifth of the harness's count (40,000 by default).
std::int64_t generations() { return std::max<std::int64_t>(1000, st::outcomes() / 5); }

std::vector<double> three_token_law(const HashedContextModel& target, std::vector<sd::TokenId> prompt,
                                    const sd::SamplingParams& sampling) {
  sd::Warper warp;
  std::vector<double> law(static_cast<std::size_t>(kCells), 0.0);
  std::vector<float> p1(kVocab), p2(kVocab), p3(kVocab);
  warp(target.logits_after(prompt), sampling, p1);
  for (sd::TokenId a = 0; a < kVocab; ++a) {
    if (p1[static_cast<std::size_t>(a)] == 0.0f) continue;
    prompt.push_back(a);
    warp(target.logits_after(prompt), sampling, p2);
    for (sd::TokenId b = 0; b < kVocab; ++b) {
      if (p2[static_cast<std::size_t>(b)] == 0.0f) continue;
      prompt.push_back(b);
      warp(target.logits_after(prompt), sampling, p3);
      for (sd::TokenId c = 0; c < kVocab; ++c)
        law[static_cast<std::size_t>((a * kVocab + b) * kVocab + c)] =
            double(p1[static_cast<std::size_t>(a)]) * p2[static_cast<std::size_t>(b)] * p3[static_cast<std::size_t>(c)];
      prompt.pop_back();
    }
    prompt.pop_back();
  }
  return law;
}

std::size_t cell(std::span<const sd::TokenId> t) {
  REQUIRE(t.size() >= 3);
  return static_cast<std::size_t>((t[0] * kVocab + t[1]) * kVocab + t[2]);
}

// Counts of the first three tokens over `generations()` runs of `generate`
// (called with the seed), tested against the target's law after `prompt`.
sd::testing::ChiSquareResult fit_three_tokens(const HashedContextModel& target, const std::vector<sd::TokenId>& prompt,
                                              const sd::SamplingParams& sampling,
                                              const std::function<sd::GenerationResult(std::uint64_t)>& generate) {
  std::vector<std::int64_t> counts(static_cast<std::size_t>(kCells), 0);
  for (std::int64_t i = 0; i < generations(); ++i) ++counts[cell(generate(static_cast<std::uint64_t>(i)).tokens)];
  return sd::testing::chi_square_gof(counts, three_token_law(target, prompt, sampling));
}

sd::GenerationOptions three_tokens(std::uint64_t seed, const sd::SamplingParams& sampling) {
  sd::GenerationOptions g;
  g.max_new_tokens = 3;
  g.sampling = sampling;
  g.sampling.seed = seed;
  return g;
}

struct Models {
  HashedContextModel target{kVocab, 11}, draft{kVocab, 11, 2, 2.0f, /*noise=*/1.0f};
};

// A draft-model method: `builder` over a ModelDrafter warped like the target.
template <class Builder, class Rule>
sd::testing::ChiSquareResult draft_model_fit(Builder builder, Rule rule, sd::DraftBudget budget,
                                             const sd::SamplingParams& sampling) {
  Models m;
  Verifier verifier(m.target);
  Drafter drafter(m.draft, 0);
  sd::SpeculativeDecoder decoder(drafter, std::move(builder), verifier, std::move(rule), sd::FixedLength(budget));
  const std::vector<sd::TokenId> prompt = {3, 1, 4};
  return fit_three_tokens(m.target, prompt, sampling, [&](std::uint64_t seed) {
    return decoder.generate(prompt, three_tokens(seed, sampling));
  });
}

// DuoDecoding (arXiv 2503.00784): the lagged tail, multi-sequence drafting
// with deterministic first tokens, the drafts grown on `worker` if given.
// Three tokens span the first round (no tail: the root's target-only pick
// among the sequences' first tokens) and the tail verified in the second.
template <class Rule>
sd::testing::ChiSquareResult duo_fit(std::int32_t gamma, std::int32_t sequences, const sd::SamplingParams& sampling,
                                     sd::DraftWorker* worker, sd::Stats* totals = nullptr) {
  using Engine = sd::SpeculativeEngine<Drafter, sd::MultiSequenceBuilder, Verifier, Rule, sd::HardwareBudget,
                                       sd::SelectAll, sd::LaggedTail>;
  Models m;
  Verifier verifier(m.target);
  Drafter drafter(m.draft, 0);
  sd::HardwareBudget policy(gamma);
  Engine engine(sd::MultiSequenceBuilder(sd::MultiSequenceOptions{8, sequences, sd::ChainPick::kSample}), verifier, Rule{});
  engine.set_draft_worker(worker);
  const std::vector<sd::TokenId> prompt = {3, 1, 4};
  return fit_three_tokens(m.target, prompt, sampling, [&](std::uint64_t seed) {
    typename Engine::Request r(0, drafter, policy, three_tokens(seed, sampling));
    engine.begin(r, prompt);
    while (r.active()) engine.step(r);
    if (totals != nullptr) totals->lag += r.result().stats.lag;
    return r.take_result();
  });
}

// Four ragged requests (prompts of different lengths, the last joining one
// step after the others) through `engine`, batch after batch; tests each
// request's first three tokens against its own law. `each` sees every
// finished request's Stats.
template <class Engine>
sd::testing::ChiSquareResult ragged_batch_fit(Engine& engine, HashedContextModel& target, HashedContextModel& draft,
                                              const sd::SamplingParams& sampling, sd::FixedLength policy,
                                              const std::function<void(const sd::Stats&)>& each = {}) {
  const std::vector<std::vector<sd::TokenId>> prompts = {{3, 1, 4}, {2}, {7, 7, 1, 0, 6}, {5, 2}};
  std::vector<double> law;
  for (const auto& p : prompts)
    for (const double v : three_token_law(target, p, sampling)) law.push_back(v / double(prompts.size()));
  std::vector<std::int64_t> counts(law.size(), 0);
  const auto batches = std::max<std::int64_t>(250, generations() / 4);
  for (std::int64_t i = 0; i < batches; ++i) {
    std::deque<Drafter> drafters;
    std::deque<typename Engine::Request> requests;
    for (std::size_t r = 0; r < prompts.size(); ++r) {
      drafters.emplace_back(draft, static_cast<std::int32_t>(r));
      requests.emplace_back(static_cast<std::int32_t>(r), drafters.back(), policy,
                            three_tokens(static_cast<std::uint64_t>(i) * 4 + r, sampling));
    }
    for (std::size_t r = 0; r + 1 < prompts.size(); ++r) engine.begin(requests[r], prompts[r]);
    for (int step = 0;; ++step) {
      if (step == 1) engine.begin(requests.back(), prompts.back());  // joins late
      std::vector<typename Engine::Request*> batch;
      for (auto& r : requests)
        if (r.active()) batch.push_back(&r);
      if (batch.empty() && step >= 1) break;
      if (!batch.empty()) engine.step(batch);
    }
    for (std::size_t r = 0; r < prompts.size(); ++r) {
      ++counts[r * static_cast<std::size_t>(kCells) + cell(requests[r].result().tokens)];
      if (each) each(requests[r].result().stats);
    }
  }
  return sd::testing::chi_square_gof(counts, law);
}

// Speculative Verification (arXiv 2509.24328) at batch 4: chains of 3 from
// the draft, a companion equal to the target (so A tracks p / q closely and a
// schedule that reads A on a sampled token is strongly biased), tables that
// make the schedule cut hard, and a latency where each verified token costs a
// quarter of a forward. Four ragged requests, one joining a step late.
struct SvFit {
  sd::testing::ChiSquareResult fit;
  std::int64_t truncated = 0, verified = 0, drafted = 0;
  bool lossless = true;
};

// How a sampled token's A steers: not at all (the S-only table), the tokens
// after it (lossless), or the token itself (the paper's; LOSSY).
enum class SteerA { kNo, kAfter, kItself };

template <class Rule = sd::RecursiveRejectionSampling>
SvFit sv_batch_fit(const sd::SamplingParams& sampling, sd::ChainBuilder::Pick pick,
                   SteerA steer = SteerA::kNo) {
  using Selector = sd::GoodputSelector<Verifier>;
  using Engine = sd::SpeculativeEngine<Drafter, sd::ChainBuilder, Verifier, Rule, sd::FixedLength, Selector>;
  Models m;
  HashedContextModel companion_model(kVocab, 11);
  Verifier verifier(m.target), companion(companion_model);
  const std::vector<std::int32_t> batches{1, 2, 4};
  const std::vector<std::int32_t> tokens{1, 2, 4};
  std::vector<double> seconds;
  for (const auto b : batches)
    for (const auto t : tokens) seconds.push_back(1.0 + 0.25 * b * t);
  sd::GoodputOptions options;
  options.biased_sampled_acceptance = steer == SteerA::kItself;
  options.acceptance_after = steer == SteerA::kAfter;
  Engine engine(sd::ChainBuilder{pick}, verifier, Rule{},
                Selector(companion, sd::AcceptanceTable({}, {0.5f}, {0.05f, 0.95f}, {1, 1}),
                         sd::AcceptanceTable({0.6f}, {}, {0.2f, 0.9f}, {1, 1}),
                         sd::VerifyLatency(batches, tokens, seconds, {0.0, 0.0, 0.0}), options));
  SvFit out;
  engine.set_round_view_observer([&](const typename Engine::RoundView& v) {
    const auto& round = engine.selector().last_round(v.seq);
    out.truncated += round.verified < static_cast<std::int32_t>(round.indicators.size());
  });
  out.fit = ragged_batch_fit(engine, m.target, m.draft, sampling, sd::FixedLength::chain(3), [&](const sd::Stats& st) {
    out.verified += st.verified.verified_nodes;
    out.drafted += st.verified.drafted_nodes;
    out.lossless = out.lossless && st.acceptance.lossless;
  });
  return out;
}

// A draft with another vocabulary (arXiv 2502.05202): the toy target's 8
// pieces and a draft of 6 (sharing a, b, c, bc; its "cab" straddles the
// target's "ca" + "b"), a draft model over the draft's vocabulary. SLEM drafts
// text re-tokenized for the target (one-hot guesses); TLI drafts `builder`'s
// trees from the shared tokens. Prompt 3 1 4 is "ab" "b" "bc".
template <bool kSlem, class Builder, class Rule>
sd::testing::ChiSquareResult cross_vocabulary_fit(Builder builder, Rule rule, sd::DraftBudget budget,
                                                  const sd::SamplingParams& sampling) {
  HashedContextModel target(kVocab, 11), draft(6, 12, 2, 2.0f, /*noise=*/1.0f);
  const auto target_vocabulary = st::toy_target_vocabulary();
  const auto draft_vocabulary = st::toy_draft_vocabulary();
  const sd::VocabularyMap map(draft_vocabulary, target_vocabulary);
  Verifier verifier(target);
  const std::vector<sd::TokenId> prompt = {3, 1, 4};
  std::int64_t accepted = 0;
  auto run = [&](auto& drafter) {
    sd::SpeculativeDecoder decoder(drafter, std::move(builder), verifier, std::move(rule),
                                   sd::FixedLength(budget));
    return fit_three_tokens(target, prompt, sampling, [&](std::uint64_t seed) {
      auto out = decoder.generate(prompt, three_tokens(seed, sampling));
      accepted += out.stats.acceptance.num_accepted;
      return out;
    });
  };
  sd::testing::ChiSquareResult fit;
  if constexpr (kSlem) {
    sd::StringMatchDrafter drafter(Drafter(draft, 0), map);
    fit = run(drafter);
  } else {
    sd::IntersectionDrafter drafter(Drafter(draft, 0), map);
    fit = run(drafter);
  }
  CHECK(accepted > 0);  // drafts were accepted, so their law was tested
  return fit;
}

sd::StaticTreeShape small_tree() { return sd::StaticTreeShape::from_choices({{0}, {1}, {0, 0}, {0, 1}, {1, 0}, {0, 0, 0}}); }

// The three-token fit of one method verified by `rule`: a draft model's
// sampled or greedy-drafted chain, static trees (children without replacement
// or top-k), the dynamic tree, Sequoia, n-gram lookup, the EAGLE-style head
// and Lyanna. Branches a rule does not fit (a chain-only rule and a tree, a
// rule that needs draft probabilities and the n-gram drafter) are not built.
template <class Rule>
sd::testing::ChiSquareResult method_fit(const std::string& method, const sd::SamplingParams& sampling, Rule rule) {
  const sd::DraftBudget chain_budget{3, 3, 3, 0.0f}, tree_budget{3, 6, 6, 0.0f};
  const std::vector<sd::TokenId> prompt = {3, 1, 4};
  if (method == "chain") return draft_model_fit(sd::ChainBuilder{sd::ChainBuilder::Pick::kSample}, rule, chain_budget, sampling);
  if (method == "greedy-drafted chain")
    return draft_model_fit(sd::ChainBuilder{sd::ChainBuilder::Pick::kTop1}, rule, chain_budget, sampling);
  if constexpr (sd::RuleFitsDrafter<Rule, sd::NgramDrafter>) {
    if (method == "n-gram") {
      Models m;
      Verifier verifier(m.target);
      sd::NgramDrafter drafter(kVocab, 1, 2);
      sd::SpeculativeDecoder decoder(drafter, sd::ChainBuilder{sd::ChainBuilder::Pick::kTop1}, verifier, rule,
                                     sd::FixedLength::chain(3));
      const std::vector<sd::TokenId> repeats = {3, 1, 4, 3, 1, 4, 3, 1};  // the lookup finds matches
      return fit_three_tokens(m.target, repeats, sampling,
                              [&](std::uint64_t seed) { return decoder.generate(repeats, three_tokens(seed, sampling)); });
    }
  }
  if constexpr (sd::RuleFitsDrafter<Rule, sd::StringMatchDrafter<Drafter>>) {
    if (method == "slem")
      return cross_vocabulary_fit<true>(sd::ChainBuilder{sd::ChainBuilder::Pick::kTop1}, rule, chain_budget,
                                        sampling);
  }
  if (method == "tli") return cross_vocabulary_fit<false>(sd::ChainBuilder{}, rule, chain_budget, sampling);
  if constexpr (!sd::kVerifiesChainsOnly<Rule>) {
    if (method == "tli, dynamic tree")
      return cross_vocabulary_fit<false>(sd::DynamicTreeBuilder{2, 3, 6}, rule, tree_budget, sampling);
  }
  if constexpr (!sd::kVerifiesChainsOnly<Rule> && sd::RuleFitsDrafter<Rule, sd::SuffixDrafter>) {
    if (method == "suffix") {  // the global index grows over the generations: trees from both indexes
      Models m;
      Verifier verifier(m.target);
      sd::SuffixCache cache(8, 64);
      sd::SuffixDrafter drafter(kVocab, &cache, 8,
                                {.max_tokens = 6, .factor = 2.0, .min_prob = 0.05f, .tree = true});
      sd::SpeculativeDecoder decoder(drafter, sd::SuffixTreeBuilder{}, verifier, rule,
                                     sd::FixedLength(tree_budget));
      const std::vector<sd::TokenId> repeats = {3, 1, 4, 3, 1, 4, 3, 1};
      std::int64_t accepted = 0;
      const auto fit = fit_three_tokens(m.target, repeats, sampling, [&](std::uint64_t seed) {
        auto out = decoder.generate(repeats, three_tokens(seed, sampling));
        accepted += out.stats.acceptance.num_accepted;
        return out;
      });
      CHECK(accepted > 0);  // drafts were accepted, so the trees' law was tested
      return fit;
    }
  }
  if constexpr (!sd::kVerifiesChainsOnly<Rule>) {
    if (method == "static tree, sampled without replacement")
      return draft_model_fit(sd::StaticTreeBuilder(small_tree(), sd::ChildMode::kSampledWithoutReplacement), rule,
                             tree_budget, sampling);
    if (method == "static tree, i.i.d.")
      return draft_model_fit(sd::StaticTreeBuilder(small_tree(), sd::ChildMode::kSampledWithReplacement), rule,
                             tree_budget, sampling);
    if (method == "static tree, top-k") return draft_model_fit(sd::StaticTreeBuilder(small_tree()), rule, tree_budget, sampling);
    if (method == "dynamic tree") return draft_model_fit(sd::DynamicTreeBuilder{2, 3, 6}, rule, tree_budget, sampling);
    if (method == "sequoia") {
      const std::vector<double> p = {0.5, 0.2, 0.1};
      return draft_model_fit(sd::StaticTreeBuilder(sd::sequoia_shape(p, 6, 3)), rule, tree_budget, sampling);
    }
    Models m;
    Verifier verifier(m.target);
    FakeFeatureHead head(m.draft, kHot, 3);
    if (method == "eagle-3 head") {  // reads target layers 0..2 (the verifier's layer span), uses layer 2
      FakeFeatureHead head3(m.draft, kHot, 3, /*layer=*/2);
      const auto [first, count] = sd::feature_layers_of(head3);
      verifier.set_feature_layers(first, count);
      sd::EagleHeadDrafter drafter(head3);
      sd::SpeculativeDecoder decoder(drafter, sd::DynamicTreeBuilder{2, 3, 6}, verifier, rule,
                                     sd::FixedLength(tree_budget));
      return fit_three_tokens(m.target, prompt, sampling, [&](std::uint64_t seed) {
        return decoder.generate(prompt, three_tokens(seed, sampling));
      });
    }
    if (method == "eagle head") {
      sd::EagleHeadDrafter drafter(head);
      sd::SpeculativeDecoder decoder(drafter, sd::DynamicTreeBuilder{2, 3, 6}, verifier, rule,
                                     sd::FixedLength(tree_budget));
      return fit_three_tokens(m.target, prompt, sampling,
                              [&](std::uint64_t seed) { return decoder.generate(prompt, three_tokens(seed, sampling)); });
    }
    if (method.starts_with("lyanna")) {
      sd::LyannaDrafter drafter(head);
      sd::LyannaOptions o;
      o.depth = 3;
      o.branch = 2;
      o.verify_budget = 3;  // narrow: re-sampled trees get accepted
      o.fusion = method == "lyanna, fusion";
      if (method == "lyanna, no re-sampling") {
        auto decoder = sd::lyanna_decoder_without_resampling(drafter, verifier, rule, o);
        return fit_three_tokens(m.target, prompt, sampling,
                                [&](std::uint64_t seed) { return decoder.generate(prompt, three_tokens(seed, sampling)); });
      }
      auto decoder = sd::lyanna_decoder(drafter, verifier, rule, o);
      std::int64_t resampled = 0;
      const auto fit = fit_three_tokens(m.target, prompt, sampling, [&](std::uint64_t seed) {
        auto out = decoder.generate(prompt, three_tokens(seed, sampling));
        resampled += out.stats.resampling.accepted;
        return out;
      });
      CHECK(resampled > 0);  // re-sampled nodes were verified and accepted, so their law was tested
      return fit;
    }
  }
  FAIL("no method '" << method << "' for rule " << Rule::kName);
  return {};
}

}  // namespace

TEST_CASE("Every lossless method keeps the target's joint law of three tokens", "[statistical][engine]") {
  const sd::SamplingParams sampling = GENERATE(sd::SamplingParams{1.0f, 0, 1.0f}, sd::SamplingParams{0.7f, 5, 0.95f});
  const std::string method =
      GENERATE("chain, speculative sampling", "chain", "static tree, sampled without replacement",
               "static tree, i.i.d.", "static tree, top-k", "dynamic tree", "sequoia", "n-gram", "suffix",
               "slem", "tli, speculative sampling", "tli, dynamic tree", "eagle head", "eagle-3 head",
               "lyanna, fusion", "lyanna, separate re-sampled forward", "lyanna, no re-sampling");
  INFO(method << ", " << st::describe(sampling));
  const auto fit = method == "chain, speculative sampling"
                       ? method_fit("chain", sampling, sd::SpeculativeSampling{})
                   : method == "tli, speculative sampling"
                       ? method_fit("tli", sampling, sd::SpeculativeSampling{})
                       : method_fit(method, sampling, sd::RecursiveRejectionSampling{});
  INFO(fit.describe());
  CHECK_FALSE(fit.rejects(st::kAlpha));
}

TEST_CASE("Block and traversal verification keep the three-token law in every method", "[statistical][engine]") {
  const sd::SamplingParams sampling = GENERATE(sd::SamplingParams{1.0f, 0, 1.0f}, sd::SamplingParams{0.7f, 5, 0.95f});
  const std::string method = GENERATE(
      "chain, block", "chain, traversal", "greedy-drafted chain, block", "n-gram, block",
      "static tree, sampled without replacement, traversal", "static tree, i.i.d., traversal",
      "static tree, top-k, traversal", "dynamic tree, traversal", "sequoia, traversal", "suffix, traversal",
      "slem, block", "tli, block", "tli, dynamic tree, traversal", "eagle head, traversal",
      "eagle-3 head, traversal", "lyanna, fusion, traversal", "duo, traversal", "sv at batch 4, block");
  INFO(method << ", " << st::describe(sampling));
  sd::testing::ChiSquareResult fit;
  const auto cut = method.rfind(", ");
  const std::string name = method.substr(0, cut), rule = method.substr(cut + 2);
  if (name == "duo") {
    fit = duo_fit<sd::TraversalVerification>(4, 0, sampling, nullptr);
  } else if (name == "sv at batch 4") {
    const auto r = sv_batch_fit<sd::BlockVerification>(sampling, sd::ChainBuilder::Pick::kTop1);
    CHECK(r.truncated > 0);
    fit = r.fit;
  } else {
    fit = rule == "block" ? method_fit(name, sampling, sd::BlockVerification{})
                          : method_fit(name, sampling, sd::TraversalVerification{});
  }
  INFO(fit.describe());
  CHECK_FALSE(fit.rejects(st::kAlpha));
}

TEST_CASE("Batched decoding (4 ragged requests per step) keeps each request's three-token law",
          "[statistical][engine]") {
  const sd::SamplingParams sampling = GENERATE(sd::SamplingParams{1.0f, 0, 1.0f}, sd::SamplingParams{0.7f, 5, 0.95f});
  INFO(st::describe(sampling));
  using Engine = sd::SpeculativeEngine<Drafter, sd::DynamicTreeBuilder, Verifier, sd::RecursiveRejectionSampling,
                                       sd::FixedLength>;
  Models m;
  Verifier verifier(m.target);
  Engine engine(sd::DynamicTreeBuilder{2, 3, 6}, verifier, sd::RecursiveRejectionSampling{});
  const auto fit = ragged_batch_fit(engine, m.target, m.draft, sampling, sd::FixedLength(sd::DraftBudget{3, 6, 6, 0.0f}));
  INFO(fit.describe());
  CHECK_FALSE(fit.rejects(st::kAlpha));
}

TEST_CASE("Speculative Verification keeps each request's three-token law at batch 4", "[statistical][engine][sv]") {
  const sd::SamplingParams sampling = GENERATE(sd::SamplingParams{1.0f, 0, 1.0f}, sd::SamplingParams{0.7f, 5, 0.95f});
  // top-1 drafts: S and A steer; sampled drafts: S alone steers.
  const auto pick = GENERATE(sd::ChainBuilder::Pick::kTop1, sd::ChainBuilder::Pick::kSample);
  INFO(st::describe(sampling) << (pick == sd::ChainBuilder::Pick::kTop1 ? ", top-1 drafts" : ", sampled drafts"));
  const auto r = sv_batch_fit(sampling, pick);
  INFO(r.fit.describe() << "; verified " << r.verified << " of " << r.drafted << " drafts");
  CHECK_FALSE(r.fit.rejects(st::kAlpha));
  CHECK(r.lossless);
  CHECK(r.truncated > 0);            // the schedule cut drafts ...
  CHECK(r.verified > r.drafted / 5);  // ... and verified many
  CHECK(r.verified < r.drafted);
}

TEST_CASE("The three-token test rejects Speculative Verification steering sampled drafts with A (power)",
          "[statistical][engine][sv]") {
  // The paper's setting: whether a sampled token is verified depends on its
  // own A, which biases the output (docs/acceptance.md).
  const auto r =
      sv_batch_fit(sd::SamplingParams{1.0f, 0, 1.0f}, sd::ChainBuilder::Pick::kSample, SteerA::kItself);
  INFO(r.fit.describe());
  CHECK(r.fit.rejects(st::kAlpha));
  CHECK_FALSE(r.lossless);  // and the run says so
}

TEST_CASE(
    "Speculative Verification keeps the three-token law with a sampled token's A steering the tokens after "
    "it",
    "[statistical][engine][sv]") {
  // Cut after the token (docs/acceptance.md): token i's own A decides only
  // whether tokens i+1.. are verified, whose context holds token i. The
  // power test above is its must-fail twin: the same A deciding on token i.
  const sd::SamplingParams sampling =
      GENERATE(sd::SamplingParams{1.0f, 0, 1.0f}, sd::SamplingParams{0.7f, 5, 0.95f});
  INFO(st::describe(sampling));
  const auto r = sv_batch_fit(sampling, sd::ChainBuilder::Pick::kSample, SteerA::kAfter);
  INFO(r.fit.describe() << "; verified " << r.verified << " of " << r.drafted << " drafts");
  CHECK_FALSE(r.fit.rejects(st::kAlpha));
  CHECK(r.lossless);
  CHECK(r.truncated > 0);
  // A did steer: the same draws verify other drafts than S alone does.
  const auto s_only = sv_batch_fit(sampling, sd::ChainBuilder::Pick::kSample, SteerA::kNo);
  INFO("S alone verified " << s_only.verified << " of " << s_only.drafted);
  CHECK(r.verified != s_only.verified);
}

TEST_CASE("DuoDecoding keeps the target's joint law of three tokens", "[statistical][engine][duo]") {
  const sd::SamplingParams sampling = GENERATE(sd::SamplingParams{1.0f, 0, 1.0f}, sd::SamplingParams{0.7f, 5, 0.95f});
  const std::string variant = GENERATE("dynamic, gamma 4", "two sequences, gamma 4", "one sequence, gamma 3",
                                       "dynamic, gamma 6, drafts on a worker");
  INFO(variant << ", " << st::describe(sampling));
  sd::Stats totals;
  sd::testing::ChiSquareResult fit;
  if (variant == "dynamic, gamma 4") {
    fit = duo_fit<sd::RecursiveRejectionSampling>(4, 0, sampling, nullptr, &totals);
  } else if (variant == "two sequences, gamma 4") {
    fit = duo_fit<sd::RecursiveRejectionSampling>(4, 2, sampling, nullptr, &totals);
  } else if (variant == "one sequence, gamma 3") {
    fit = duo_fit<sd::RecursiveRejectionSampling>(3, 1, sampling, nullptr, &totals);
  } else {
    sd::DraftWorker worker;
    fit = duo_fit<sd::RecursiveRejectionSampling>(6, 0, sampling, &worker, &totals);
  }
  INFO(fit.describe());
  CHECK_FALSE(fit.rejects(st::kAlpha));
  // The law was tested where the lag acts: tails were verified and accepted,
  // and sequences other than the top one were drafted and chosen.
  CHECK(totals.lag.tail_accepted > generations() / 10);
  CHECK(totals.lag.chosen > generations() / 10);
  if (variant == "two sequences, gamma 4") CHECK(totals.lag.sequences_drafted > totals.lag.tips);  // fewer where the warp leaves one token
  if (variant.starts_with("dynamic") && sampling.temperature == 1.0f)  // warped rows are too sharp for k > 1
    CHECK(totals.lag.sequences_drafted > totals.lag.tips);
}

TEST_CASE("The three-token test rejects typical acceptance in DuoDecoding too (power)", "[statistical][engine][duo]") {
  const auto fit = duo_fit<sd::TypicalAcceptance>(4, 0, sd::SamplingParams{1.0f, 0, 1.0f}, nullptr);
  INFO(fit.describe());
  CHECK(fit.rejects(st::kAlpha));
}

// Frequency-ranked drafting (FR-Spec, arXiv 2502.14856): the draft model's
// logits outside a hot set are -inf (q = 0 there), the target untouched.
// `restrict_target` also cuts the target's row: the lossy mistake of letting
// the hot set reach verification, which the law test must reject.
template <class Builder, class Rule>
sd::testing::ChiSquareResult hot_vocabulary_fit(Builder builder, Rule rule, sd::DraftBudget budget,
                                                const sd::SamplingParams& sampling, bool restrict_target) {
  Models m;
  const HashedContextModel reference(kVocab, 11);
  m.draft.set_hot_vocabulary({0, 1, 3, 4, 6});  // the prompt's last token (4) is hot; 2, 5, 7 are never drafted
  if (restrict_target) m.target.set_hot_vocabulary({0, 1, 3, 4, 6});
  Verifier verifier(m.target);
  Drafter drafter(m.draft, 0);
  sd::SpeculativeDecoder decoder(drafter, std::move(builder), verifier, std::move(rule), sd::FixedLength(budget));
  const std::vector<sd::TokenId> prompt = {3, 1, 4};
  return fit_three_tokens(reference, prompt, sampling, [&](std::uint64_t seed) {
    return decoder.generate(prompt, three_tokens(seed, sampling));
  });
}

TEST_CASE("A draft over a hot vocabulary (q = 0 outside it, FR-Spec) keeps the three-token law",
          "[statistical][engine]") {
  const sd::SamplingParams sampling = GENERATE(sd::SamplingParams{1.0f, 0, 1.0f}, sd::SamplingParams{0.7f, 5, 0.95f});
  const std::string method = GENERATE("chain, speculative sampling", "chain, block", "dynamic tree, rrs");
  INFO(method << ", " << st::describe(sampling));
  const sd::DraftBudget chain{3, 3, 3, 0.0f}, tree{3, 6, 6, 0.0f};
  const sd::ChainBuilder sampled{sd::ChainBuilder::Pick::kSample};
  const auto fit = method == "chain, speculative sampling"
                       ? hot_vocabulary_fit(sampled, sd::SpeculativeSampling{}, chain, sampling, false)
                   : method == "chain, block"
                       ? hot_vocabulary_fit(sampled, sd::BlockVerification{}, chain, sampling, false)
                       : hot_vocabulary_fit(sd::DynamicTreeBuilder{2, 3, 6}, sd::RecursiveRejectionSampling{}, tree,
                                            sampling, false);
  INFO(fit.describe());
  CHECK_FALSE(fit.rejects(st::kAlpha));
}

TEST_CASE("The three-token test rejects a hot vocabulary applied to the target too (power)", "[statistical][engine]") {
  const auto fit = hot_vocabulary_fit(sd::ChainBuilder{sd::ChainBuilder::Pick::kSample}, sd::SpeculativeSampling{},
                                      sd::DraftBudget{3, 3, 3, 0.0f}, sd::SamplingParams{1.0f, 0, 1.0f}, true);
  INFO(fit.describe());
  CHECK(fit.rejects(st::kAlpha));
}

TEST_CASE("A cost-aware budget (re-planned every other round) keeps the three-token law", "[statistical][engine]") {
  const sd::SamplingParams sampling = GENERATE(sd::SamplingParams{1.0f, 0, 1.0f}, sd::SamplingParams{0.7f, 5, 0.95f});
  INFO(st::describe(sampling));
  Models m;
  Verifier verifier(m.target);
  Drafter drafter(m.draft, 0);
  sd::CostAwareOptions o;
  o.min_rounds = 3;
  o.replan_every = 2;
  // Lat(t) = 1 + 0.3 t: a CPU-like profile, so plans shrink and regrow as
  // the acceptance estimate moves.
  const sd::VerifyLatency lat({1}, {1, 2, 4, 8}, {1.3, 1.6, 2.2, 3.4}, {0.0});
  sd::SpeculativeDecoder decoder(drafter, sd::DynamicTreeBuilder{3, 3, 8}, verifier, sd::RecursiveRejectionSampling{},
                                 sd::CostAwareTree(lat, sd::DraftBudget{3, 8, 8, 0.0f, 3}, o));
  const std::vector<sd::TokenId> prompt = {3, 1, 4};
  std::set<std::tuple<std::int32_t, std::int32_t, std::int32_t>> budgets;
  const auto fit = fit_three_tokens(m.target, prompt, sampling, [&](std::uint64_t seed) {
    const auto b = decoder.policy().budget();
    budgets.emplace(b.max_depth, b.verify_nodes, b.branch);
    return decoder.generate(prompt, three_tokens(seed, sampling));
  });
  INFO(fit.describe() << "; " << budgets.size() << " budgets used");
  CHECK_FALSE(fit.rejects(st::kAlpha));
  CHECK(budgets.size() > 1);  // the plan did change between rounds
}

TEST_CASE("The three-token test rejects typical acceptance (power)", "[statistical][engine]") {
  const auto fit = draft_model_fit(sd::ChainBuilder{sd::ChainBuilder::Pick::kSample}, sd::TypicalAcceptance{},
                                   sd::DraftBudget{3, 3, 3, 0.0f}, sd::SamplingParams{1.0f, 0, 1.0f});
  INFO(fit.describe());
  CHECK(fit.rejects(st::kAlpha));
}

// The three-token law of a registry method over `target` from a fixed
// prompt, with some drafts accepted and some rejected (the draft is not the
// target).
static void check_registry_method_law(sd::AnyDecoder& method, HashedContextModel& target,
                               const sd::SamplingParams& sampling) {
  const std::vector<sd::TokenId> prompt = {3, 1, 4, 1, 5};
  std::int64_t accepted = 0, tried = 0;
  const auto fit = fit_three_tokens(target, prompt, sampling, [&](std::uint64_t seed) {
    auto out = method.generate(prompt, three_tokens(seed, sampling));
    accepted += out.stats.acceptance.num_accepted;
    for (const auto d : out.stats.acceptance.depth_tried) tried += d;
    return out;
  });
  INFO(fit.describe() << "; " << accepted << " of " << tried << " drafts accepted");
  CHECK(accepted > 0);
  CHECK(accepted < tried);
  CHECK_FALSE(fit.rejects(st::kAlpha));
}

TEST_CASE("MagicDec (the target drafting through a sink + window cache) keeps the three-token law",
          "[statistical][engine][magicdec]") {
  const sd::SamplingParams sampling = GENERATE(sd::SamplingParams{1.0f, 0, 1.0f}, sd::SamplingParams{0.7f, 5, 0.95f});
  const std::string spec = GENERATE("magicdec:k=1:sink=1:window=1", "magicdec:k=1:sink=1:window=1:rule=speculative",
                                    "magicdec:k=1:sink=1:window=1:rule=block");
  INFO(spec << ", " << st::describe(sampling));
  // Order 4: the draft sees its sink, a window of one committed token and the
  // pending tokens (at most two with k = 1), so once the prompt is committed
  // (the prefill, in begin) its context differs from the target's, and with
  // drafts of one token the three tokens span two or three rounds.
  HashedContextModel target(kVocab, 11, 4);
  sd::MethodRegistry<HashedContextModel> registry;
  registry.add(sd::methods::magicdec_method<HashedContextModel>());
  auto method = registry.make(spec, target, nullptr, sampling);
  check_registry_method_law(method, target, sampling);
}

TEST_CASE("SPIRe (a draft remembering the target's activations) keeps the three-token law",
          "[statistical][engine][spire]") {
  const sd::SamplingParams sampling = GENERATE(sd::SamplingParams{1.0f, 0, 1.0f}, sd::SamplingParams{0.7f, 5, 0.95f});
  const std::string spec = GENERATE("spire:k=1", "spire:k=2:rule=speculative", "spire:k=2:rule=block");
  INFO(spec << ", " << st::describe(sampling));
  // The head drafts from the target's hidden rows the verifier hands over
  // (HashedContextModel's: the token before and the token) and the round's
  // staged tokens: what it drafts differs from the target, and depends on
  // every commit.
  HashedContextModel target(kVocab, 11, 4);
  sd::MethodRegistry<HashedContextModel> registry;
  registry.add(sd::methods::spire_method<HashedContextModel, st::FakeSpireHead>(
      [](const sd::MethodContext<HashedContextModel>&) { return st::FakeSpireHead(kVocab, 2); }));
  auto method = registry.make(spec, target, nullptr, sampling);
  check_registry_method_law(method, target, sampling);
}
