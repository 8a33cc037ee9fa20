// DuoDecoding through the one round engine (arXiv 2503.00784): the lagged
// tail (LaggedTail), dynamic multi-sequence drafting (MultiSequenceBuilder)
// and concurrent drafting on a DraftWorker. Greedy output equals greedy
// autoregressive output for every budget and sequence count, batched with
// requests joining late; drafting on the worker gives the same tokens as
// drafting on the calling thread (at T = 1, same seeds); the lag's counters
// add up.
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <vector>

#include "specdec/accept/greedy.hpp"
#include "specdec/accept/recursive_rejection_sampling.hpp"
#include "specdec/carry/lagged_tail.hpp"
#include "specdec/draft/model_drafter.hpp"
#include "specdec/engine/speculative_engine.hpp"
#include "specdec/engine/timed_model.hpp"
#include "specdec/policy/hardware_budget.hpp"
#include "specdec/tree/multi_sequence_builder.hpp"
#include "specdec/verify/model_verifier.hpp"
#include "support/catch.hpp"
#include "specdec/testing/hashed_context_model.hpp"

namespace sd = specdec;
using sd::testing::HashedContextModel;

namespace {

constexpr std::int64_t kVocab = 20;
using Drafter = sd::ModelDrafter<HashedContextModel>;
using Verifier = sd::ModelVerifier<HashedContextModel>;
template <class Rule>
using DuoEngine = sd::SpeculativeEngine<Drafter, sd::MultiSequenceBuilder, Verifier, Rule, sd::HardwareBudget,
                                        sd::SelectAll, sd::LaggedTail>;

std::vector<sd::TokenId> prompt_of(std::int32_t seq) { return sd::testing::request_prompt(seq, kVocab); }

template <class Engine>
struct Slot {
  Slot(HashedContextModel& draft, std::int32_t seq, std::int32_t gamma, sd::GenerationOptions o)
      : drafter(draft, seq), policy(gamma), request(seq, drafter, policy, o) {}
  Drafter drafter;
  sd::HardwareBudget policy;
  typename Engine::Request request;
};

struct Run {
  std::map<std::int32_t, std::vector<sd::TokenId>> tokens;
  std::map<std::int32_t, sd::Stats> stats;
};

// Requests 0..3 from the start, 4 and 5 joining at the third step; each
// step serves every running request in one target forward.
template <class Rule>
Run run_batch(std::int32_t gamma, sd::MultiSequenceOptions options, const sd::SamplingParams& sampling,
              sd::DraftWorker* worker, float draft_noise = 0.7f) {
  using Engine = DuoEngine<Rule>;
  HashedContextModel target(kVocab, 1), draft(kVocab, 1, 2, 2.0f, draft_noise);
  Verifier verifier(target);
  Engine engine(sd::MultiSequenceBuilder(options), verifier, Rule{});
  engine.set_draft_worker(worker);
  std::vector<std::unique_ptr<Slot<Engine>>> running;
  Run run;
  auto join = [&](std::int32_t seq, std::int64_t n) {
    sd::GenerationOptions o;
    o.max_new_tokens = n;
    o.sampling = sampling;
    o.sampling.seed = 100 + static_cast<std::uint64_t>(seq);
    running.push_back(std::make_unique<Slot<Engine>>(draft, seq, gamma, o));
    engine.begin(running.back()->request, prompt_of(seq));
  };
  for (std::int32_t s = 0; s < 4; ++s) join(s, 12 + 7 * s);
  for (int step = 0; !running.empty(); ++step) {
    if (step == 2) join(4, 20), join(5, 9);
    std::vector<typename Engine::Request*> batch;
    for (auto& slot : running) batch.push_back(&slot->request);
    engine.step(batch);
    std::erase_if(running, [&](const auto& slot) {
      if (!slot->request.done()) return false;
      run.tokens[slot->request.seq()] = slot->request.result().tokens;
      run.stats[slot->request.seq()] = slot->request.result().stats;
      CHECK_FALSE(target.is_open(slot->request.seq()));
      CHECK_FALSE(draft.is_open(slot->request.seq()));
      return true;
    });
  }
  return run;
}

}  // namespace

TEST_CASE("DuoDecoding's greedy output equals greedy autoregressive output", "[engine][duo]") {
  const std::int32_t gamma = GENERATE(1, 2, 4, 6, 8);
  const std::int32_t sequences = GENERATE(0, 1, 2, 3);
  const bool concurrent = GENERATE(false, true);
  INFO("gamma " << gamma << ", sequences " << sequences << (concurrent ? ", on a worker" : ", inline"));
  std::unique_ptr<sd::DraftWorker> worker;
  if (concurrent) worker = std::make_unique<sd::DraftWorker>();
  const auto run = run_batch<sd::GreedyAcceptance>(gamma, sd::MultiSequenceOptions{8, sequences, sd::ChainPick::kTop1},
                                                   sd::SamplingParams{0.0f}, worker.get());
  REQUIRE(run.tokens.size() == 6);
  std::int64_t accepted = 0;
  for (const auto& [seq, tokens] : run.tokens) {
    const auto& prompt = prompt_of(seq);
    CHECK(tokens == sd::testing::greedy_continuation(HashedContextModel(kVocab, 1), prompt,
                                                     static_cast<std::int64_t>(tokens.size())));
    const auto& lag = run.stats.at(seq).lag;
    CHECK(lag.rounds == run.stats.at(seq).rounds());
    CHECK(lag.tail_accepted <= lag.tail_nodes);
    CHECK(lag.chosen <= lag.tips);
    CHECK(lag.top1_confusion[0][0] + lag.top1_confusion[0][1] + lag.top1_confusion[1][0] +
              lag.top1_confusion[1][1] ==
          lag.tips);
    accepted += lag.tail_accepted + lag.chosen;
  }
  CHECK(accepted > 0);  // the drafts are used
}

TEST_CASE("A draft equal to the target is always accepted: every tail whole, a sequence chosen every round",
          "[engine][duo]") {
  const auto run = run_batch<sd::GreedyAcceptance>(4, sd::MultiSequenceOptions{8, 1, sd::ChainPick::kTop1}, sd::SamplingParams{0.0f},
                                                   nullptr, /*draft_noise=*/0.0f);
  for (const auto& [seq, stats] : run.stats) {
    INFO("request " << seq);
    CHECK(stats.lag.stale == 0);
    CHECK(stats.lag.tail_accepted == stats.lag.tail_nodes);
    CHECK(stats.lag.tips == stats.rounds());
    CHECK(stats.lag.chosen >= stats.lag.tips - 1);  // the last round's is not carried: the request is done
    CHECK(stats.lag.top1_confusion[1][0] + stats.lag.top1_confusion[1][1] == 0);
    // After the first round every round verifies a tail of gamma - 1 = 3 and
    // emits it with the next sequence's first token.
    CHECK(double(stats.new_tokens) / double(stats.rounds()) >= 3.0);
  }
}

TEST_CASE("Drafting on the worker gives the same tokens as drafting on the calling thread", "[engine][duo]") {
  const sd::SamplingParams sampling = GENERATE(sd::SamplingParams{1.0f}, sd::SamplingParams{0.7f, 5, 0.95f});
  const std::int32_t sequences = GENERATE(0, 2);
  sd::DraftWorker worker;
  const auto inline_run =
      run_batch<sd::RecursiveRejectionSampling>(6, sd::MultiSequenceOptions{8, sequences, sd::ChainPick::kSample}, sampling, nullptr);
  const auto worker_run =
      run_batch<sd::RecursiveRejectionSampling>(6, sd::MultiSequenceOptions{8, sequences, sd::ChainPick::kSample}, sampling, &worker);
  CHECK(inline_run.tokens == worker_run.tokens);
  for (const auto& [seq, stats] : worker_run.stats) {
    CHECK(stats.lag.tail_nodes == inline_run.stats.at(seq).lag.tail_nodes);
    CHECK(stats.lag.chosen == inline_run.stats.at(seq).lag.chosen);
  }
}

TEST_CASE("With timed models the lag's profile is filled in, and the draft worker's model time is its own",
          "[engine][duo]") {
  using Timed = sd::TimedModel<HashedContextModel>;
  using Engine = sd::SpeculativeEngine<sd::ModelDrafter<Timed>, sd::MultiSequenceBuilder, sd::ModelVerifier<Timed>,
                                       sd::RecursiveRejectionSampling, sd::HardwareBudget, sd::SelectAll,
                                       sd::LaggedTail>;
  HashedContextModel target_model(kVocab, 1), draft_model(kVocab, 1, 2, 2.0f, 0.7f);
  Timed target(target_model), draft(draft_model);
  sd::ModelVerifier<Timed> verifier(target);
  sd::ModelDrafter<Timed> drafter(draft, 0);
  sd::HardwareBudget policy(4);
  sd::DraftWorker worker;
  Engine engine(sd::MultiSequenceBuilder{}, verifier, sd::RecursiveRejectionSampling{});
  engine.set_target_clock(&target.clock());
  engine.set_draft_worker(&worker);
  sd::GenerationOptions o;
  o.max_new_tokens = 40;
  o.sampling.temperature = 1.0f;
  Engine::Request r(0, drafter, policy, o);
  r.set_draft_clock(&draft.clock());
  engine.begin(r, prompt_of(3));
  while (r.active()) engine.step(r);
  const auto& st = r.result().stats;
  CHECK(st.target_forwards == st.rounds());
  CHECK(st.draft_forwards >= st.rounds());
  CHECK(st.lag.worker_model_seconds > 0.0);
  CHECK(st.lag.worker_model_seconds <= st.draft_model_seconds);
  CHECK(st.lag.score_seconds > 0.0);
  CHECK(st.lag.draft_seconds >= st.lag.worker_model_seconds);
}

TEST_CASE("A draft worker reports what its job threw, and the engine waits for it before rethrowing",
          "[engine][duo]") {
  sd::DraftWorker worker;
  worker.submit([] { throw sd::ShapeError("from the job"); });
  CHECK_THROWS_AS(worker.wait(), sd::ShapeError);
  worker.submit([] {});
  CHECK_NOTHROW(worker.wait());
  worker.submit([] {});
  CHECK_THROWS_AS(worker.submit([] {}), sd::InvalidArgumentError);  // one job at a time, waited for (even if done)
  worker.wait();
  CHECK_THROWS_AS(sd::DraftWorker(sd::DraftWorker::Options{{1 << 20}, {}}), sd::InvalidArgumentError);
  CHECK_THROWS_AS(sd::DraftWorker(sd::DraftWorker::Options{{}, [] { throw sd::UnsupportedError("no"); }}),
                  sd::UnsupportedError);
}

TEST_CASE("The hardware-aware budget snaps the cost coefficient and measures both models", "[engine][duo]") {
  CHECK(sd::snap_budget(0.3) == 1);
  CHECK(sd::snap_budget(4.2) == 4);
  CHECK(sd::snap_budget(5.0) == 6);  // 6 has divisors 1, 2, 3, 6; 5 has two
  CHECK(sd::snap_budget(7.4) == 8);
  CHECK(sd::snap_budget(12.3) == 12);
  CHECK_THROWS_AS(sd::snap_budget(0.0), sd::InvalidArgumentError);
  CHECK_THROWS_AS(sd::HardwareBudget(0), sd::InvalidArgumentError);
  HashedContextModel target(kVocab, 1), draft(kVocab, 1, 2, 2.0f, 0.7f);
  sd::DraftWorker worker;
  sd::CostMeasureOptions o;
  o.context = 16;
  o.forwards = 5;
  const auto cost = sd::measure_cost_coefficient(target, draft, &worker, o);
  CHECK(cost.concurrent);
  CHECK(cost.target_seconds > 0.0);
  CHECK(cost.draft_seconds > 0.0);
  CHECK(cost.gamma() >= 1);
  CHECK(sd::HardwareBudget(cost).budget().max_nodes == cost.gamma());
  // the scratch sequences are closed again
  CHECK_FALSE(target.is_open(o.target_seq));
  CHECK_FALSE(draft.is_open(o.draft_seq));
}

TEST_CASE("ModelDrafter: the root and a carried tail in one forward give the rows of one forward each",
          "[engine][duo]") {
  HashedContextModel draft_a(kVocab, 3, 2, 2.0f, 0.5f), draft_b(kVocab, 3, 2, 2.0f, 0.5f);
  Drafter one_forward(draft_a, 0), level_by_level(draft_b, 0);
  const auto prompt = prompt_of(4);
  one_forward.begin(prompt);
  level_by_level.begin(prompt);
  one_forward.prefill();  // caches all but the root: the first forward feeds the root and the tail only
  sd::DraftTree tree(prompt.back());
  tree.add_node(sd::DraftTree::kRoot, 5, 0.5f);
  tree.add_node(0, 7, 0.5f);
  tree.add_node(1, 2, 0.5f);
  sd::ProbMatrix a, b;
  const std::int32_t all[] = {sd::DraftTree::kRoot, 0, 1, 2};
  one_forward.propose(sd::DraftRequest{&tree, all}, a);
  for (const std::int32_t slot : all) level_by_level.propose(sd::DraftRequest{&tree, std::span(&slot, 1)}, b);
  REQUIRE(a.num_rows() == 4);
  REQUIRE(b.num_rows() == 4);
  for (std::int64_t r = 0; r < 4; ++r)
    for (std::int64_t v = 0; v < kVocab; ++v) CHECK(a.row(r)[v] == Approx(b.row(r)[v]).margin(1e-6));
  CHECK(draft_a.forwards() == 2);  // the prefill, then one for the root and the tail
  // Both keep the same committed text: the next round's root rows agree.
  const sd::TokenId accepted[] = {5, 7, 4};
  one_forward.commit(accepted);
  level_by_level.commit(accepted);
  sd::DraftTree next(4);
  const std::int32_t root[] = {sd::DraftTree::kRoot};
  sd::ProbMatrix c, d;
  one_forward.propose(sd::DraftRequest{&next, root}, c);
  level_by_level.propose(sd::DraftRequest{&next, root}, d);
  for (std::int64_t v = 0; v < kVocab; ++v) CHECK(c.row(0)[v] == Approx(d.row(0)[v]).margin(1e-6));
  CHECK_THROWS_AS(one_forward.propose(sd::DraftRequest{&next, root}, c), sd::InvalidArgumentError);  // root twice
}
