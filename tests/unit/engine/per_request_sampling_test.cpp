// Sampling belongs to the request (GenerationOptions::sampling): one step
// serves greedy and sampled requests, the verifier warps each request's rows
// with its own parameters, the drafter follows its request, and a rule that
// is right for greedy decoding only refuses a sampled request.
#include <cstdint>
#include <deque>
#include <map>
#include <vector>

#include "specdec/accept/greedy.hpp"
#include "specdec/accept/recursive_rejection_sampling.hpp"
#include "specdec/core/warp.hpp"
#include "specdec/draft/model_drafter.hpp"
#include "specdec/engine/speculative_engine.hpp"
#include "specdec/policy/fixed_length.hpp"
#include "specdec/tree/chain_builder.hpp"
#include "specdec/verify/model_verifier.hpp"
#include "support/catch.hpp"
#include "specdec/testing/hashed_context_model.hpp"

namespace sd = specdec;
using sd::testing::HashedContextModel;

namespace {

constexpr std::int64_t kVocab = 20;
using Drafter = sd::ModelDrafter<HashedContextModel>;
using Verifier = sd::ModelVerifier<HashedContextModel>;
using Engine = sd::SpeculativeEngine<Drafter, sd::ChainBuilder, Verifier, sd::RecursiveRejectionSampling,
                                     sd::FixedLength>;

// Request i's options: greedy for even i, two different sampled settings for
// odd i; each its own seed and id.
sd::GenerationOptions options_of(std::int32_t i) {
  sd::GenerationOptions o;
  o.max_new_tokens = 12 + 3 * i;
  o.request_id = static_cast<std::uint64_t>(40 + i);
  if (i % 2 == 1) o.sampling = i % 4 == 1 ? sd::SamplingParams{0.8f, 8, 1.0f} : sd::SamplingParams{1.0f, 0, 0.9f};
  o.sampling.seed = static_cast<std::uint64_t>(7 + i);
  return o;
}

struct Outputs {
  std::map<std::int32_t, std::vector<sd::TokenId>> tokens;
  std::map<std::int32_t, std::vector<sd::ChildMode>> root_modes;  // how each round's first draft was picked
};

// Runs `ids` through one engine, all in each step.
Outputs run(const std::vector<std::int32_t>& ids) {
  HashedContextModel target(kVocab, 1), draft(kVocab, 1, 2, 2.0f, /*noise=*/0.7f);
  Verifier verifier(target);
  Engine engine(sd::ChainBuilder{}, verifier, sd::RecursiveRejectionSampling{});
  Outputs out;
  engine.set_round_view_observer([&](const sd::RoundView& v) {
    if (v.tree->size() > 0) out.root_modes[v.seq].push_back(v.tree->children_mode(sd::DraftTree::kRoot));
  });
  std::deque<Drafter> drafters;
  std::deque<sd::FixedLength> policies;
  std::deque<Engine::Request> requests;
  for (const auto i : ids) {
    drafters.emplace_back(draft, i);
    policies.push_back(sd::FixedLength::chain(3));
    requests.emplace_back(i, drafters.back(), policies.back(), options_of(i));
    engine.begin(requests.back(), sd::testing::request_prompt(i, kVocab));
  }
  for (;;) {
    std::vector<Engine::Request*> batch;
    for (auto& r : requests)
      if (r.active()) batch.push_back(&r);
    if (batch.empty()) break;
    engine.step(batch);
  }
  for (auto& r : requests) out.tokens[r.seq()] = r.result().tokens;
  return out;
}

}  // namespace

TEST_CASE("One step serves greedy and sampled requests, each emitting what it emits alone", "[unit][engine]") {
  const std::vector<std::int32_t> ids{0, 1, 2, 3, 4, 5};
  const auto together = run(ids);
  for (const auto i : ids) {
    INFO("request " << i << (i % 2 == 0 ? " (greedy)" : " (sampled)"));
    const auto alone = run({i});
    CHECK(together.tokens.at(i) == alone.tokens.at(i));
    if (i % 2 == 0)
      CHECK(alone.tokens.at(i) == sd::testing::greedy_continuation(HashedContextModel(kVocab, 1),
                                                                   sd::testing::request_prompt(i, kVocab),
                                                                   static_cast<std::int64_t>(alone.tokens.at(i).size())));
    // The chain follows the request: top-1 drafts for a greedy one, drawn
    // drafts for a sampled one (ChainPick::kByRequest).
    const auto expected = i % 2 == 0 ? sd::ChildMode::kDeterministic : sd::ChildMode::kSampledWithReplacement;
    REQUIRE_FALSE(together.root_modes.at(i).empty());
    for (const auto mode : together.root_modes.at(i)) CHECK(mode == expected);
  }
  // A sampled request did not decode greedily (its law is the target's at its
  // temperature, tested in tests/statistical).
  CHECK(run({1}).tokens.at(1) != sd::testing::greedy_continuation(HashedContextModel(kVocab, 1),
                                                                   sd::testing::request_prompt(1, kVocab), 15));
}

TEST_CASE("A greedy-only rule refuses a sampled request at begin, and opens nothing", "[unit][engine]") {
  using GreedyEngine =
      sd::SpeculativeEngine<Drafter, sd::ChainBuilder, Verifier, sd::GreedyAcceptance, sd::FixedLength>;
  HashedContextModel target(kVocab, 1), draft(kVocab, 1, 2, 2.0f, 0.7f);
  Verifier verifier(target);
  GreedyEngine engine(sd::ChainBuilder{}, verifier, sd::GreedyAcceptance{});
  Drafter drafter(draft, 3);
  sd::FixedLength policy = sd::FixedLength::chain(3);
  auto o = options_of(1);
  GreedyEngine::Request sampled(3, drafter, policy, o);
  CHECK_THROWS_WITH(engine.begin(sampled, sd::testing::request_prompt(3, kVocab)),
                    Catch::Matchers::Contains("temperature 0.8") &&
                        Catch::Matchers::Contains("verifies greedy decoding only"));
  CHECK_FALSE(target.is_open(3));
  CHECK_FALSE(draft.is_open(3));
  o.sampling.temperature = 0.0f;
  GreedyEngine::Request greedy(3, drafter, policy, o);
  engine.begin(greedy, sd::testing::request_prompt(3, kVocab));
  while (greedy.active()) engine.step(greedy);
  CHECK(greedy.result().tokens.size() == static_cast<std::size_t>(o.max_new_tokens));
}

TEST_CASE("ModelVerifier warps each item of one forward with the item's own sampling", "[unit][engine]") {
  HashedContextModel target(kVocab, 1);
  Verifier verifier(target);
  const sd::SamplingParams greedy{0.0f}, hot{1.3f, 0, 0.8f}, cold{0.5f, 6, 1.0f};
  const std::vector<sd::SamplingParams> samplings{greedy, hot, cold};
  std::vector<sd::DraftTree> trees;
  std::vector<std::vector<sd::TokenId>> prompts;
  for (std::int32_t s = 0; s < 3; ++s) {
    prompts.push_back(sd::testing::request_prompt(s, kVocab));
    verifier.begin(s, prompts.back());
    trees.emplace_back(prompts.back().back());
    trees.back().add_node(sd::DraftTree::kRoot, static_cast<sd::TokenId>(3 + s), 1.0f);
  }
  std::vector<sd::ScoreItem> items;
  for (std::int32_t s = 0; s < 3; ++s) items.push_back({s, &trees[static_cast<std::size_t>(s)], samplings[static_cast<std::size_t>(s)]});
  std::vector<sd::ProbRows> rows(3);
  verifier.score(items, rows);
  sd::Warper warp;
  std::vector<float> expected(kVocab);
  for (std::int32_t s = 0; s < 3; ++s) {
    INFO("item " << s);
    auto context = prompts[static_cast<std::size_t>(s)];
    for (std::int64_t r = 0; r < 2; ++r) {
      if (r == 1) context.push_back(trees[static_cast<std::size_t>(s)].token(0));
      warp(target.logits_after(context), samplings[static_cast<std::size_t>(s)], expected);
      const auto got = rows[static_cast<std::size_t>(s)].row(r);
      for (std::int64_t v = 0; v < kVocab; ++v) CHECK(got[static_cast<std::size_t>(v)] == expected[static_cast<std::size_t>(v)]);
    }
  }
  // A bad item is named, not clamped.
  items[1].sampling.top_p = 0.0f;
  CHECK_THROWS_AS(verifier.score(items, rows), sd::InvalidArgumentError);
}

TEST_CASE("ModelDrafter warps for its request: the request's law, or temperature 1 for a greedy one",
          "[unit][engine]") {
  HashedContextModel draft(kVocab, 1, 2, 2.0f, 0.7f);
  const auto prompt = sd::testing::request_prompt(2, kVocab);
  sd::Warper warp;
  for (const auto& sampling : {sd::SamplingParams{0.0f}, sd::SamplingParams{0.7f, 5, 0.95f}}) {
    Drafter drafter(draft, 0);
    drafter.begin(prompt, sampling);
    CHECK(drafter.sampling().temperature == sampling.temperature);
    sd::DraftTree tree(prompt.back());
    sd::ProbMatrix rows;
    const std::int32_t root[] = {sd::DraftTree::kRoot};
    drafter.propose(sd::DraftRequest{&tree, root}, rows);
    std::vector<float> expected(kVocab);
    warp(draft.logits_after(prompt), sampling.is_greedy() ? sd::SamplingParams{1.0f} : sampling, expected);
    REQUIRE(rows.num_rows() == 1);
    for (std::int64_t v = 0; v < kVocab; ++v) CHECK(rows.row(0)[static_cast<std::size_t>(v)] == expected[static_cast<std::size_t>(v)]);
    drafter.end();
  }
}
