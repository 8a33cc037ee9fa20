// Speculative Verification through the one round engine (arXiv 2509.24328):
// the GoodputSelector with a companion model over batches of ragged requests
// joining late. Greedy output equals greedy autoregressive output whatever
// the selector verifies; the companion follows every request's commits;
// batched chain drafting (one drafter forward per level for the batch) gives
// each request the tree it would draft alone; bad pairings are refused.
#include <cstdint>
#include <map>
#include <memory>
#include <vector>

#include "specdec/accept/greedy.hpp"
#include "specdec/accept/recursive_rejection_sampling.hpp"
#include "specdec/draft/model_drafter.hpp"
#include "specdec/engine/continuous_batch.hpp"
#include "specdec/engine/speculative_engine.hpp"
#include "specdec/policy/fixed_length.hpp"
#include "specdec/select/goodput_selector.hpp"
#include "specdec/select/sv_profiling.hpp"
#include "specdec/tree/chain_builder.hpp"
#include "specdec/tree/static_tree_builder.hpp"
#include "specdec/verify/model_verifier.hpp"
#include "support/catch.hpp"
#include "specdec/testing/hashed_context_model.hpp"

namespace sd = specdec;
using sd::testing::HashedContextModel;

namespace {

constexpr std::int64_t kVocab = 20;
using Drafter = sd::ModelDrafter<HashedContextModel>;
using Verifier = sd::ModelVerifier<HashedContextModel>;
using Selector = sd::GoodputSelector<Verifier>;

// Lat(b, n) = 1 + 0.25 n: each verified token costs a quarter of a forward,
// so the selector verifies some drafts and drops others.
sd::VerifyLatency steep_latency() {
  const std::vector<std::int32_t> batches{1, 2, 4, 8}, tokens{1, 2, 4, 8};
  std::vector<double> seconds;
  for (const auto b : batches)
    for (const auto m : tokens) seconds.push_back(1.0 + 0.25 * b * m);
  return sd::VerifyLatency(batches, tokens, seconds, std::vector<double>(batches.size(), 0.0));
}

// p = 0.05 where A < 0.5, 0.95 above (S splits the cells but not the value).
sd::AcceptanceTable joint_table() { return sd::AcceptanceTable({0.5f}, {0.5f}, {0.05f, 0.95f, 0.05f, 0.95f}, {1, 1, 1, 1}); }
sd::AcceptanceTable similarity_table() { return sd::AcceptanceTable({0.7f}, {}, {0.2f, 0.9f}, {1, 1}); }

struct Slot {
  Slot(HashedContextModel& draft, std::int32_t seq, sd::FixedLength p) : drafter(draft, seq), policy(p) {}
  Drafter drafter;
  sd::FixedLength policy;
};

template <class Rule>
struct Run {
  std::map<std::int32_t, std::vector<sd::TokenId>> tokens;
  std::map<std::int32_t, sd::Stats> stats;
  std::int64_t truncated = 0;  // rounds that verified less than was drafted
};

// Requests 0..5 through SV, at most `max_batch` at once (continuous batching).
template <class Rule>
Run<Rule> run_sv(const sd::SamplingParams& sampling, std::size_t max_batch, std::int32_t k,
                 sd::ChainBuilder::Pick pick = sd::ChainBuilder::Pick::kTop1) {
  using Engine = sd::SpeculativeEngine<Drafter, sd::ChainBuilder, Verifier, Rule, sd::FixedLength, Selector>;
  HashedContextModel target(kVocab, 1), draft(kVocab, 1, 2, 2.0f, 0.8f), companion_model(kVocab, 1, 2, 2.0f, 0.4f, 9);
  Verifier verifier(target), companion(companion_model);
  Engine engine(sd::ChainBuilder{pick}, verifier, Rule{},
                Selector(companion, joint_table(), similarity_table(), steep_latency()));
  Run<Rule> run;
  engine.set_round_view_observer([&](const typename Engine::RoundView& v) {
    // The companion committed what the target did.
    CHECK(companion.committed_length(v.seq) == verifier.committed_length(v.seq));
    const auto& round = engine.selector().last_round(v.seq);
    CHECK(round.indicators.size() == round.estimates.size());
    CHECK(v.tree->size() == round.verified);
    if (round.verified < static_cast<std::int32_t>(round.indicators.size())) ++run.truncated;
  });
  struct RequestSlot {
    RequestSlot(HashedContextModel& d, std::int32_t seq, std::int32_t k, const sd::GenerationOptions& o)
        : slot(d, seq, sd::FixedLength::chain(k)), request(seq, slot.drafter, slot.policy, o) {}
    Slot slot;
    typename Engine::Request request;
  };
  std::vector<std::vector<sd::TokenId>> prompts;
  for (std::int32_t s = 0; s < 6; ++s) prompts.push_back(sd::testing::request_prompt(s, kVocab));
  const auto batch = sd::run_continuous_batch(engine, prompts, max_batch, [&](std::size_t i) {
    sd::GenerationOptions o;
    o.max_new_tokens = 10 + 5 * static_cast<std::int64_t>(i);
    o.sampling = sampling;
    o.sampling.seed = 50 + i;
    return std::make_unique<RequestSlot>(draft, static_cast<std::int32_t>(i), k, o);
  });
  for (std::size_t i = 0; i < batch.results.size(); ++i) {
    run.tokens[static_cast<std::int32_t>(i)] = batch.results[i].tokens;
    run.stats[static_cast<std::int32_t>(i)] = batch.results[i].stats;
    CHECK_FALSE(companion_model.is_open(static_cast<std::int32_t>(i)));  // closed with its request
  }
  CHECK(batch.peak_batch == static_cast<std::int64_t>(std::min<std::size_t>(max_batch, 6)));
  return run;
}

}  // namespace

TEST_CASE("Speculative Verification's greedy output equals greedy autoregressive output", "[engine][sv]") {
  const std::size_t max_batch = GENERATE(1, 3, 6);
  const std::int32_t k = GENERATE(1, 3, 5);
  INFO("batch " << max_batch << ", k " << k);
  const auto run = run_sv<sd::GreedyAcceptance>(sd::SamplingParams{0.0f}, max_batch, k);
  REQUIRE(run.tokens.size() == 6);
  std::int64_t verified = 0, drafted = 0;
  for (const auto& [seq, tokens] : run.tokens) {
    CHECK(tokens == sd::testing::greedy_continuation(HashedContextModel(kVocab, 1), sd::testing::request_prompt(seq, kVocab),
                                                     static_cast<std::int64_t>(tokens.size())));
    const auto& st = run.stats.at(seq);
    CHECK(st.verified.drafted_nodes <= st.rounds() * k);  // k a round, fewer near the end
    verified += st.verified.verified_nodes;
    drafted += st.verified.drafted_nodes;
    CHECK(st.acceptance.lossless);
  }
  CHECK(verified < drafted);  // the selector dropped drafts
  CHECK(verified > 0);        // and verified some
  CHECK(run.truncated > 0);
}

TEST_CASE("Batched chain drafting gives each request the tree and rows it drafts alone", "[engine][sv]") {
  const auto pick = GENERATE(sd::ChainBuilder::Pick::kTop1, sd::ChainBuilder::Pick::kSample);
  HashedContextModel draft_a(kVocab, 1, 2, 2.0f, 0.8f), draft_b(kVocab, 1, 2, 2.0f, 0.8f);
  std::vector<std::unique_ptr<Drafter>> alone, batched;
  std::vector<std::vector<sd::TokenId>> prompts;
  for (std::int32_t i = 0; i < 4; ++i) {
    prompts.push_back(sd::testing::request_prompt(i, kVocab));
    alone.push_back(std::make_unique<Drafter>(draft_a, i));
    batched.push_back(std::make_unique<Drafter>(draft_b, i));
    alone.back()->begin(prompts.back());
    batched.back()->begin(prompts.back());
  }
  sd::ChainBuilder builder{pick};
  const std::vector<std::int32_t> lengths{3, 1, 0, 5};  // ragged budgets, one empty
  for (int round = 0; round < 3; ++round) {
    std::vector<sd::DraftTree> trees_a(4), trees_b(4);
    std::vector<sd::ProbMatrix> rows_a(4), rows_b(4);
    std::vector<sd::RandomStream> rng_a, rng_b;
    std::vector<sd::BuildItem<Drafter>> items;
    for (std::size_t i = 0; i < 4; ++i) {
      rng_a.emplace_back(7 + i + 10 * static_cast<std::size_t>(round), 1);
      rng_b.emplace_back(7 + i + 10 * static_cast<std::size_t>(round), 1);
    }
    for (std::size_t i = 0; i < 4; ++i) {
      const auto l = lengths[i];
      const sd::DraftBudget budget{l, l, l, 0.0f};
      const auto root = prompts[i].back();
      builder.build(*alone[i], budget, root, rng_a[i], trees_a[i], rows_a[i]);
      items.push_back({batched[i].get(), budget, root, &rng_b[i], &trees_b[i], &rows_b[i]});
    }
    const auto forwards0 = draft_b.forwards();
    builder.build_batch(std::span<const sd::BuildItem<Drafter>>(items));
    CHECK(draft_b.forwards() - forwards0 == 5);  // one forward per level of the longest chain
    for (std::size_t i = 0; i < 4; ++i) {
      INFO("request " << i << ", round " << round);
      REQUIRE(trees_b[i].size() == trees_a[i].size());
      for (std::int32_t n = 0; n < trees_a[i].size(); ++n) {
        CHECK(trees_b[i].token(n) == trees_a[i].token(n));
        CHECK(trees_b[i].node(n).draft_prob == trees_a[i].node(n).draft_prob);
      }
      REQUIRE(rows_b[i].num_rows() == rows_a[i].num_rows());
      for (std::int64_t r = 0; r < rows_a[i].num_rows(); ++r)
        for (std::int64_t v = 0; v < kVocab; ++v) CHECK(rows_b[i].row(r)[v] == rows_a[i].row(r)[v]);
      // Commit a prefix and the next token, so the next round starts elsewhere.
      std::vector<sd::TokenId> commit;
      for (std::int32_t n = 0; n < std::min(2, trees_a[i].size()); ++n) commit.push_back(trees_a[i].token(n));
      commit.push_back(static_cast<sd::TokenId>((round + i) % kVocab));
      alone[i]->commit(commit);
      batched[i]->commit(commit);
      prompts[i].insert(prompts[i].end(), commit.begin(), commit.end());
    }
  }
  std::vector<Drafter*> two{batched[0].get()};
  Drafter other(draft_a, 9);
  two.push_back(&other);
  other.begin(prompts[0]);
  sd::DraftTree t0(prompts[0].back()), t1(prompts[0].back());
  sd::ProbMatrix r0, r1;
  const std::int32_t root[] = {sd::DraftTree::kRoot};
  const sd::DraftRequest requests[] = {{&t0, root}, {&t1, root}};
  sd::ProbMatrix* rows[] = {&r0, &r1};
  CHECK_THROWS_AS(Drafter::propose_batch(two, requests, rows), sd::InvalidArgumentError);  // two models
}

TEST_CASE("The goodput selector refuses trees, and sampled drafts without a similarity-only table", "[engine][sv]") {
  HashedContextModel target(kVocab, 1), companion_model(kVocab, 1, 2, 2.0f, 0.4f, 9);
  Verifier companion(companion_model);
  const std::vector<sd::TokenId> prompt{1, 2, 3};
  companion.begin(0, prompt);
  sd::ProbMatrix rows(2, kVocab);
  for (std::int64_t v = 0; v < kVocab; ++v) rows.row(0)[v] = rows.row(1)[v] = 1.0f / kVocab;
  sd::DraftTree tree(3), selected;
  tree.add_node(-1, 4, 0.05f);
  tree.add_node(-1, 5, 0.05f);
  tree.set_children_source(-1, 0, sd::ChildMode::kDeterministic);
  sd::Selection s{0, &tree, {}, &selected, false, rows.view()};
  Selector only_joint(companion, joint_table(), {}, steep_latency());
  CHECK_THROWS_AS(only_joint.select(std::span(&s, 1)), sd::InvalidTreeError);

  sd::DraftTree chain(3);
  chain.add_node(-1, 4, 0.05f);
  chain.add_node(0, 6, 0.05f);
  chain.set_children_source(-1, 0, sd::ChildMode::kSampledWithReplacement);
  chain.set_children_source(0, 1, sd::ChildMode::kSampledWithReplacement);
  s.drafted = &chain;
  CHECK_THROWS_AS(only_joint.select(std::span(&s, 1)), sd::InvalidArgumentError);
  // Allowed with the biased option, and then reported lossy.
  sd::GoodputOptions biased;
  biased.biased_sampled_acceptance = true;
  Selector lossy(companion, joint_table(), {}, steep_latency(), biased);
  lossy.select(std::span(&s, 1));
  CHECK_FALSE(lossy.lossless());
  // A steering only the tokens after a sampled token: both tables, lossless;
  // not with the biased option.
  sd::GoodputOptions after;
  after.acceptance_after = true;
  CHECK_THROWS_AS(Selector(companion, joint_table(), {}, steep_latency(), after), sd::InvalidArgumentError);
  CHECK_THROWS_AS(Selector(companion, {}, similarity_table(), steep_latency(), after),
                  sd::InvalidArgumentError);
  sd::GoodputOptions both = after;
  both.biased_sampled_acceptance = true;
  CHECK_THROWS_AS(Selector(companion, joint_table(), similarity_table(), steep_latency(), both),
                  sd::InvalidArgumentError);
  Selector steered(companion, joint_table(), similarity_table(), steep_latency(), after);
  steered.select(std::span(&s, 1));
  CHECK(steered.lossless());
  CHECK(steered.last_round(0).indicators.size() == 2);
  // verify_all keeps every draft and records the indicators.
  sd::GoodputOptions all;
  all.verify_all = true;
  Selector every(companion, {}, {}, {}, all);
  sd::Selection s2{0, &chain, {}, &selected, false, rows.view()};
  every.select(std::span(&s2, 1));
  CHECK_FALSE(s2.use_selected);
  CHECK(every.last_round(0).indicators.size() == 2);
  CHECK(every.lossless());
  CHECK_THROWS_AS(Selector(companion, joint_table(), joint_table(), steep_latency()), sd::InvalidArgumentError);
  CHECK_THROWS_AS(Selector(companion, joint_table(), {}, {}), sd::InvalidArgumentError);
}

TEST_CASE("Requests that share a seed but not a request id draft independently", "[engine][sv]") {
  // SV's batch allocation compares requests' drafts; with one stream for two
  // requests their sampled tokens would move together.
  using Engine = sd::SpeculativeEngine<Drafter, sd::ChainBuilder, Verifier, sd::RecursiveRejectionSampling,
                                       sd::FixedLength>;
  sd::GenerationOptions o;
  CHECK(o.draft_stream() == 1);  // request 0: the streams single requests always drew from
  CHECK(o.rule_stream() == 2);
  HashedContextModel target(kVocab, 1), draft(kVocab, 1, 2, 1.0f, 0.8f);
  const sd::SamplingParams s{1.0f};
  Verifier verifier(target);
  Engine engine(sd::ChainBuilder{sd::ChainBuilder::Pick::kSample}, verifier, sd::RecursiveRejectionSampling{});
  sd::FixedLength policy = sd::FixedLength::chain(6);
  const std::vector<sd::TokenId> prompt{3, 4, 5};
  // The first round's drafts of request `id` (seed 7) in sequence `seq`.
  const auto drafts = [&](std::int32_t seq, std::uint64_t id, std::int32_t other_seq, std::uint64_t other_id) {
    Drafter d0(draft, seq), d1(draft, other_seq);
    o.max_new_tokens = 30;
    o.sampling = s;
    o.sampling.seed = 7;  // the same for both
    o.request_id = id;
    sd::GenerationOptions other = o;
    other.request_id = other_id;
    Engine::Request r0(seq, d0, policy, o), r1(other_seq, d1, policy, other);
    engine.begin(r0, prompt);
    engine.begin(r1, prompt);
    Engine::Request* both[] = {&r0, &r1};
    engine.step(std::span<Engine::Request* const>(both));
    std::vector<sd::TokenId> a, b;
    for (std::int32_t i = 0; i < r0.last_tree().size(); ++i) a.push_back(r0.last_tree().token(i));
    for (std::int32_t i = 0; i < r1.last_tree().size(); ++i) b.push_back(r1.last_tree().token(i));
    engine.abort(r0);
    engine.abort(r1);
    return std::pair(a, b);
  };
  const auto [a, b] = drafts(0, 0, 1, 1);
  CHECK(a != b);  // same prompt, same seed, different drafts
  // The streams follow the request, not its sequence: the same two requests
  // in swapped sequences draft the same tokens.
  const auto [b2, a2] = drafts(0, 1, 1, 0);
  CHECK(a2 == a);
  CHECK(b2 == b);
  sd::GenerationOptions too_big;
  too_big.request_id = sd::GenerationOptions::kRequestIdLimit;
  CHECK_THROWS_AS(too_big.validate(), sd::InvalidArgumentError);
}

TEST_CASE("The profiling run over any Model records (S, A, X) for every drafted token", "[engine][sv]") {
  HashedContextModel target(kVocab, 1), draft(kVocab, 1, 2, 2.0f, 0.8f), companion(kVocab, 1, 2, 2.0f, 0.4f, 9);
  std::vector<std::vector<sd::TokenId>> prompts;
  for (std::int32_t s = 0; s < 5; ++s) prompts.push_back(sd::testing::request_prompt(s, kVocab));
  for (const bool sampled : {false, true}) {
    INFO((sampled ? "sampled drafts at T = 1" : "top-1 drafts, greedy"));
    sd::SvProfilingOptions o;
    o.length = 3;
    o.sampled_drafts = sampled;
    o.max_new_tokens = 12;
    o.batch = 2;
    if (sampled) o.sampling = sd::SamplingParams{1.0f};
    const auto samples = sd::profile_sv(target, draft, companion, prompts, o);
    REQUIRE(samples.size() >= prompts.size() * 3);  // at least one full chain each
    std::size_t ones = 0;
    for (const auto& x : samples) {
      CHECK(x.x >= 0.0f);
      CHECK(x.x <= 1.0f);
      if (!sampled) CHECK((x.x == 0.0f || x.x == 1.0f));  // greedy: the target's row is one-hot
      ones += x.x == 1.0f;
    }
    CHECK(ones > 0);  // some drafts agree with the target
    for (std::int32_t s = 0; s < 5; ++s) CHECK_FALSE(companion.is_open(s));
  }
  sd::SvProfilingOptions bad;
  bad.sampled_drafts = true;  // at temperature 0
  CHECK_THROWS_AS(sd::profile_sv(target, draft, companion, prompts, bad), sd::InvalidArgumentError);
}
