// The one round engine driven by a host scheduler: one target forward per
// step for every request in it, requests joining and leaving between steps,
// every sequence's greedy output equal to its own autoregressive output, the
// sequence lifecycle in both models, and the selection phase.
#include <algorithm>
#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <vector>

#include "specdec/accept/greedy.hpp"
#include "specdec/draft/model_drafter.hpp"
#include "specdec/engine/autoregressive_decoder.hpp"
#include "specdec/engine/continuous_batch.hpp"
#include "specdec/engine/speculative_engine.hpp"
#include "specdec/policy/fixed_length.hpp"
#include "specdec/policy/heuristic_length.hpp"
#include "specdec/select/top_nodes_selector.hpp"
#include "specdec/tree/chain_builder.hpp"
#include "specdec/tree/dynamic_tree_builder.hpp"
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

std::vector<sd::TokenId> prompt_of(std::int32_t seq) { return sd::testing::request_prompt(seq, kVocab); }

// The target every test here decodes with (vocabulary kVocab, seed 1).
std::vector<sd::TokenId> greedy_reference(std::span<const sd::TokenId> prompt, std::int64_t n) {
  return sd::testing::greedy_continuation(HashedContextModel(kVocab, 1), prompt, n);
}

// A host scheduler's view of one request: its drafter, its policy and the
// engine's request, kept in place while the request runs.
template <class Engine, class Policy>
struct Slot {
  Slot(HashedContextModel& draft, std::int32_t seq, Policy p, sd::GenerationOptions o, sd::TokenCallback cb)
      : drafter(draft, seq), policy(std::move(p)), request(seq, drafter, policy, o, cb) {}
  Drafter drafter;
  Policy policy;
  typename Engine::Request request;
};

template <class Builder, class Policy, class Selector = sd::SelectAll>
void check_batched(Builder builder, std::function<Policy()> policy, Selector selector = {}) {
  using Engine = sd::SpeculativeEngine<Drafter, Builder, Verifier, sd::GreedyAcceptance, Policy, Selector>;
  HashedContextModel target(kVocab, 1), draft(kVocab, 1, 2, 2.0f, /*noise=*/0.7f);
  Verifier verifier(target);
  Engine engine(std::move(builder), verifier, sd::GreedyAcceptance{}, std::move(selector));
  std::map<std::int32_t, std::int64_t> lengths;
  std::map<std::int32_t, std::vector<sd::TokenId>> streamed, results;
  std::vector<std::unique_ptr<Slot<Engine, Policy>>> running;
  auto join = [&](std::int32_t seq, std::int64_t n) {
    sd::GenerationOptions o;
    o.max_new_tokens = n;
    lengths[seq] = n;
    auto slot = std::make_unique<Slot<Engine, Policy>>(draft, seq, policy(), o,
                                                       [&streamed, seq](sd::TokenId t) { streamed[seq].push_back(t); });
    engine.begin(slot->request, prompt_of(seq));
    CHECK(target.is_open(seq) == (n > 0));  // nothing to generate: done, and closed, at once
    CHECK(draft.is_open(seq) == (n > 0));
    running.push_back(std::move(slot));
  };
  for (std::int32_t s = 0; s < 4; ++s) join(s, 10 + 9 * s);  // different lengths: finish at different times
  std::int64_t steps = 0, rounds = 0;
  for (int r = 0; !running.empty() || r < 3; ++r) {
    if (r == 3) join(4, 25), join(5, 7), join(9, 0);  // join between steps; 9 has nothing to generate
    // Leave: done requests are closed in both models, and the host drops them.
    for (auto it = running.begin(); it != running.end();) {
      auto& req = (*it)->request;
      if (!req.done()) {
        ++it;
        continue;
      }
      CHECK_FALSE(target.is_open(req.seq()));
      CHECK_FALSE(draft.is_open(req.seq()));
      auto result = req.take_result();
      rounds += result.stats.rounds();
      results[req.seq()] = std::move(result.tokens);
      it = running.erase(it);
    }
    if (running.empty()) continue;
    std::vector<typename Engine::Request*> batch;
    for (auto& s : running) batch.push_back(&s->request);
    const auto forwards_before = target.forwards();
    engine.step(batch);
    ++steps;
    CHECK(target.forwards() - forwards_before == 1);  // one target forward for the whole batch
  }
  REQUIRE(results.size() == lengths.size());
  std::int64_t tokens = 0;
  for (const auto& [seq, n] : lengths) tokens += n;
  CHECK(rounds < tokens);       // drafts were accepted
  CHECK(steps < rounds * 2 / 3);  // and requests shared target forwards
  for (const auto& [seq, n] : lengths) {
    INFO("sequence " << seq);
    CHECK(results[seq] == greedy_reference(prompt_of(seq), n));
    CHECK(streamed[seq] == results[seq]);
  }
}

// A fixed budget that records (drafted, verified) of every outcome.
struct RecordingPolicy {
  sd::DraftBudget fixed;
  std::vector<std::pair<std::int32_t, std::int32_t>> seen;
  sd::DraftBudget budget() { return fixed; }
  void observe(const sd::RoundOutcome& o) { seen.emplace_back(o.num_drafted, o.num_verified); }
};

// Drafts all max_nodes of its shape and leaves the verify budget to the
// selector (the builders in include/specdec/tree/ keep verify_nodes themselves).
struct DraftAllBuilder {
  sd::StaticTreeBuilder inner;
  template <class D>
  void build(D& drafter, sd::DraftBudget budget, sd::TokenId root, sd::RandomStream& rng, sd::DraftTree& tree,
             sd::ProbMatrix& rows) {
    budget.verify_nodes = budget.max_nodes;
    inner.build(drafter, budget, root, rng, tree, rows);
  }
};

}  // namespace

TEST_CASE("Batched chain speculation equals per-sequence greedy decoding", "[unit][engine]") {
  check_batched<sd::ChainBuilder, sd::FixedLength>(sd::ChainBuilder{}, [] { return sd::FixedLength::chain(3); });
  check_batched<sd::ChainBuilder, sd::HeuristicLength>(sd::ChainBuilder{}, [] { return sd::HeuristicLength(2); });
}

TEST_CASE("Batched dynamic-tree speculation equals per-sequence greedy decoding", "[unit][engine]") {
  check_batched<sd::DynamicTreeBuilder, sd::FixedLength>(
      sd::DynamicTreeBuilder{3, 3, 8}, [] { return sd::FixedLength(sd::DraftBudget{3, 8, 8, 0.0f}); });
}

TEST_CASE("A selection phase that prunes every tree keeps greedy output exact", "[unit][engine]") {
  // 12 drafted nodes per request, 5 verified.
  check_batched<sd::StaticTreeBuilder, sd::FixedLength, sd::TopNodesSelector>(
      sd::StaticTreeBuilder(sd::StaticTreeShape::from_choices(
          {{0}, {1}, {2}, {0, 0}, {0, 1}, {0, 2}, {1, 0}, {1, 1}, {2, 0}, {0, 0, 0}, {0, 0, 1}, {0, 1, 0}})),
      [] { return sd::FixedLength(sd::DraftBudget{3, 12, 5, 0.0f}); });
}

TEST_CASE("The selector decides what the target sees, and the outcome says how much was drafted", "[unit][engine]") {
  using Engine = sd::SpeculativeEngine<Drafter, DraftAllBuilder, Verifier, sd::GreedyAcceptance, RecordingPolicy,
                                       sd::TopNodesSelector>;
  HashedContextModel target(kVocab, 1), draft(kVocab, 1, 2, 2.0f, 0.7f);
  Verifier verifier(target);
  Engine engine(
      DraftAllBuilder{sd::StaticTreeBuilder(sd::StaticTreeShape::from_choices({{0}, {1}, {2}, {0, 0}, {0, 1}, {1, 0}}))},
      verifier, sd::GreedyAcceptance{});
  Drafter drafter(draft, 0);
  RecordingPolicy policy{sd::DraftBudget{2, 6, 4, 0.0f}, {}};
  sd::GenerationOptions o;
  o.max_new_tokens = 12;
  Engine::Request request(0, drafter, policy, o);
  engine.begin(request, prompt_of(0));
  const auto forwards = target.forwards();
  engine.step(request);
  CHECK(target.forwards() == forwards + 1);
  CHECK(request.last_tree().size() == 4);
  REQUIRE(policy.seen.size() == 1);
  CHECK(policy.seen[0] == std::pair<std::int32_t, std::int32_t>{6, 4});
  engine.abort(request);
  CHECK(request.done());
  CHECK(request.result().stop_reason == sd::StopReason::kCancelled);
  CHECK_FALSE(target.is_open(0));
  CHECK_FALSE(draft.is_open(0));
  CHECK_THROWS_AS(engine.step(request), sd::InvalidArgumentError);  // a done request takes no step
}

TEST_CASE("The engine rejects bad requests with typed errors", "[unit][engine]") {
  using Engine = sd::SpeculativeEngine<Drafter, sd::ChainBuilder, Verifier, sd::GreedyAcceptance, sd::FixedLength>;
  HashedContextModel target(kVocab, 1), draft(kVocab, 1);
  Verifier verifier(target);
  Engine engine(sd::ChainBuilder{}, verifier, sd::GreedyAcceptance{});
  Drafter drafter(draft, 0);
  sd::FixedLength policy = sd::FixedLength::chain(2);
  sd::GenerationOptions o;
  o.max_new_tokens = 5;
  Engine::Request r(0, drafter, policy, o);
  CHECK_THROWS_AS(engine.begin(r, std::vector<sd::TokenId>{}), sd::InvalidArgumentError);  // empty prompt
  CHECK_THROWS_AS(engine.step(r), sd::InvalidArgumentError);                                // not begun
  const std::vector<sd::TokenId> prompt = {1, 2};
  engine.begin(r, prompt);
  CHECK_THROWS_AS(engine.begin(r, prompt), sd::InvalidArgumentError);  // begun twice
  o.max_new_tokens = -2;
  CHECK_THROWS_AS(Engine::Request(1, drafter, policy, o), sd::InvalidArgumentError);
}

TEST_CASE("A batched request that fills the context ends there, and the others go on", "[unit][engine]") {
  using Engine = sd::SpeculativeEngine<Drafter, sd::DynamicTreeBuilder, Verifier, sd::GreedyAcceptance,
                                       sd::FixedLength>;
  constexpr std::int64_t kContext = 30;
  HashedContextModel target(kVocab, 1), draft(kVocab, 1, 2, 2.0f, /*noise=*/0.7f);
  target.set_max_context(kContext);
  Verifier verifier(target);
  Engine engine(sd::DynamicTreeBuilder{3, 3, 8}, verifier, sd::GreedyAcceptance{});
  const std::map<std::int32_t, std::int64_t> max_new = {{0, 1000}, {1, 10}, {2, 1000}};
  std::deque<Drafter> drafters;
  std::deque<sd::FixedLength> policies;
  std::deque<Engine::Request> requests;
  for (const auto& [seq, n] : max_new) {
    sd::GenerationOptions o;
    o.max_new_tokens = n;
    drafters.emplace_back(draft, seq);
    policies.emplace_back(sd::DraftBudget{3, 8, 8, 0.0f});
    requests.emplace_back(seq, drafters.back(), policies.back(), o);
    engine.begin(requests.back(), prompt_of(seq));
  }
  for (;;) {
    std::vector<Engine::Request*> batch;
    for (auto& r : requests)
      if (r.active()) batch.push_back(&r);
    if (batch.empty()) break;
    engine.step(batch);
  }
  for (const auto& r : requests) {
    INFO("sequence " << r.seq());
    const auto room = kContext - static_cast<std::int64_t>(prompt_of(r.seq()).size());
    const auto n = std::min(max_new.at(r.seq()), room);
    CHECK(r.result().tokens == greedy_reference(prompt_of(r.seq()), n));
    CHECK(r.result().stop_reason == (n == room ? sd::StopReason::kContextLimit : sd::StopReason::kMaxNewTokens));
  }
}

namespace {

// Greedy chain drafting of eight prompts over the hashed-context models, for
// the continuous-batching tests.
struct ChainBatch {
  using Engine =
      sd::SpeculativeEngine<Drafter, sd::ChainBuilder, Verifier, sd::GreedyAcceptance, sd::FixedLength>;
  using EngineSlot = Slot<Engine, sd::FixedLength>;
  HashedContextModel target{kVocab, 1}, draft{kVocab, 1, 2, 2.0f, 0.7f};
  Verifier verifier{target};
  Engine engine{sd::ChainBuilder{}, verifier, sd::GreedyAcceptance{}};
  std::vector<std::vector<sd::TokenId>> prompts = [] {
    std::vector<std::vector<sd::TokenId>> p;
    for (std::int32_t s = 0; s < 8; ++s) p.push_back(prompt_of(s));
    return p;
  }();
};

}  // namespace

TEST_CASE("run_continuous_batch calls its fence once per admission, after that admission's prefills",
          "[unit][engine]") {
  // An asynchronous backend waits for its prefills there (cuda::LlamaModel).
  ChainBatch b;
  auto& draft = b.draft;
  std::vector<std::size_t> begun;  // requests begun before each fence
  std::vector<std::size_t> group;  // fences before each request was made
  const auto run = sd::run_continuous_batch(
      b.engine, b.prompts, 3,
      [&](std::size_t i) {
        group.push_back(begun.size());
        sd::GenerationOptions o;
        o.max_new_tokens = 12 + static_cast<std::int64_t>(i % 3);
        return std::make_unique<ChainBatch::EngineSlot>(draft, static_cast<std::int32_t>(i),
                                                        sd::FixedLength::chain(4), o, sd::TokenCallback{});
      },
      [&] { begun.push_back(group.size()); });
  REQUIRE(run.results.size() == 8);
  REQUIRE(group.size() == 8);
  CHECK(group.front() == 0);
  CHECK(begun.front() == 3);  // the first admission fills the batch
  // One fence per admission, right after its last begin.
  REQUIRE(begun.size() == group.back() + 1);
  for (std::size_t g = 0; g < begun.size(); ++g)
    CHECK(begun[g] == static_cast<std::size_t>(
                          std::count_if(group.begin(), group.end(), [&](std::size_t x) { return x <= g; })));
}

TEST_CASE("A batched request is charged its share of each step's host time, not the whole step",
          "[unit][engine]") {
  // Overhead is what is not a model call. A request's wall time in a batch
  // holds every other request's drafting and acceptance, so wall time less
  // model time charged each request the whole step.
  ChainBatch b;
  auto& [target, draft, verifier, engine, prompts] = b;
  using EngineSlot = ChainBatch::EngineSlot;
  const auto run = sd::run_continuous_batch(engine, prompts, 8, [&](std::size_t i) {
    sd::GenerationOptions o;
    o.max_new_tokens = 40;
    return std::make_unique<EngineSlot>(draft, static_cast<std::int32_t>(i), sd::FixedLength::chain(4), o,
                                        sd::TokenCallback{});
  });
  double charged = 0.0, walls = 0.0;
  for (const auto& r : run.results) {
    CHECK(r.stats.shared_steps > 0);
    CHECK(r.stats.overhead_seconds() > 0.0);
    CHECK(r.stats.overhead_seconds() == r.stats.step_host_seconds);
    charged += r.stats.overhead_seconds();
    walls += r.stats.decode_seconds();
  }
  CHECK(charged <= run.seconds);     // the shares add up to at most the run
  CHECK(walls > 4.0 * run.seconds);  // what charging the whole step would have claimed
  // Alone, a request is charged its rounds' wall time less model time, as before.
  EngineSlot alone(draft, 0, sd::FixedLength::chain(4), sd::GenerationOptions{}, {});
  engine.begin(alone.request, prompts[0]);
  while (!alone.request.done()) engine.step(alone.request);
  const auto& st = alone.request.result().stats;
  CHECK(st.shared_steps == 0);
  CHECK(st.overhead_seconds() == st.decode_seconds() - st.target_model_seconds - st.draft_model_seconds);
  CHECK(st.step_host_seconds > 0.0);  // recorded alone too, but not what it is charged
}
