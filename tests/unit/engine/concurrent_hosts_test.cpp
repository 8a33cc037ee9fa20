// Two host threads, each stepping its own engine over its own sequences of
// one shared target model and one shared draft model, as a host with two
// schedulers would (docs/integration.md, "Threads"): every request emits
// exactly what it emits run alone on one thread (greedy or sampled: its
// random streams are its own), a greedy one what greedy decoding emits, and
// a request the host aborts mid-generation keeps what it had. The models'
// open and close (a finished request's sequences close inside a step) run
// against the other thread's forwards. The same with DuoDecoding engines,
// each host drafting on its own DraftWorker thread while its target scores:
// four threads on the two models. CI runs both under ThreadSanitizer
// (.ci/run); SPECDEC_STRESS_SECONDS=N repeats each with fresh requests for N
// seconds.
#include <chrono>
#include <cstdint>
#include <cstdlib>
#include <deque>
#include <map>
#include <memory>
#include <string>
#include <thread>
#include <vector>

#include "specdec/accept/recursive_rejection_sampling.hpp"
#include "specdec/carry/lagged_tail.hpp"
#include "specdec/draft/model_drafter.hpp"
#include "specdec/engine/draft_worker.hpp"
#include "specdec/engine/speculative_engine.hpp"
#include "specdec/policy/fixed_length.hpp"
#include "specdec/policy/hardware_budget.hpp"
#include "specdec/select/select_all.hpp"
#include "specdec/tree/chain_builder.hpp"
#include "specdec/tree/multi_sequence_builder.hpp"
#include "specdec/verify/model_verifier.hpp"
#include "support/catch.hpp"
#include "specdec/testing/hashed_context_model.hpp"

namespace sd = specdec;
using sd::TokenId;
using sd::testing::HashedContextModel;

namespace {

constexpr std::int64_t kVocab = 24;
using Drafter = sd::ModelDrafter<HashedContextModel>;
using Verifier = sd::ModelVerifier<HashedContextModel>;

// Chain drafting, and DuoDecoding (arXiv 2503.00784): a lagged tail verified
// while the drafter drafts below it, on the host's DraftWorker when it has one.
struct Chain {
  using Engine = sd::SpeculativeEngine<Drafter, sd::ChainBuilder, Verifier, sd::RecursiveRejectionSampling,
                                       sd::FixedLength>;
  using Policy = sd::FixedLength;
  static Engine engine(Verifier& v) {
    return Engine(sd::ChainBuilder{}, v, sd::RecursiveRejectionSampling{});
  }
  static Policy policy() { return sd::FixedLength::chain(3); }
};
struct Duo {
  using Engine =
      sd::SpeculativeEngine<Drafter, sd::MultiSequenceBuilder, Verifier, sd::RecursiveRejectionSampling,
                            sd::HardwareBudget, sd::SelectAll, sd::LaggedTail>;
  using Policy = sd::HardwareBudget;
  static Engine engine(Verifier& v) {
    return Engine(sd::MultiSequenceBuilder(sd::MultiSequenceOptions{4, 2}), v,
                  sd::RecursiveRejectionSampling{});
  }
  static Policy policy() { return sd::HardwareBudget(3); }
};

struct Job {
  std::int32_t id = 0;  // the request's sequence id in both models
  std::vector<TokenId> prompt;
  sd::GenerationOptions options;
  std::int64_t abort_after = -1;  // steps; -1: runs to its end
};

// Host `host`'s requests of round `round`: ids 1000 host + i, prompts and
// lengths varying, every third sampled, every fifth (a long one) aborted
// after 3 steps.
std::vector<Job> jobs_of(std::int32_t host, std::int32_t round, std::int32_t n) {
  std::vector<Job> jobs;
  for (std::int32_t i = 0; i < n; ++i) {
    Job j;
    j.id = 1000 * host + i;
    j.prompt = sd::testing::request_prompt(j.id + round, kVocab);
    j.options.max_new_tokens = 5 + (i * 7 + round) % 36;
    j.options.request_id = static_cast<std::uint64_t>(j.id);
    if (i % 3 == 1) j.options.sampling = sd::SamplingParams{0.9f, 0, 1.0f};
    j.options.sampling.seed = static_cast<std::uint64_t>(11 + round);
    if (i % 5 == 4) {  // long enough that 3 steps (at most 4 tokens each) cannot finish it
      j.abort_after = 3;
      j.options.max_new_tokens = 24 + (i + round) % 16;
    }
    jobs.push_back(j);
  }
  return jobs;
}

struct Served {
  std::vector<TokenId> tokens;
  bool aborted = false;  // the host aborted it (a short request may finish before its abort_after steps)
  bool operator==(const Served&) const = default;
};

// Serves `jobs` through one engine of `Kind` over `target` and `draft`, up to
// `batch` at once (continuous batching), drafting on `worker` if there is
// one: id -> what it emitted.
template <class Kind>
std::map<std::int32_t, Served> serve(HashedContextModel& target, HashedContextModel& draft,
                                     const std::vector<Job>& jobs, std::size_t batch,
                                     sd::DraftWorker* worker = nullptr) {
  using Engine = typename Kind::Engine;
  Verifier verifier(target);
  Engine engine = Kind::engine(verifier);
  engine.set_draft_worker(worker);
  struct Live {
    Live(const Job& j, HashedContextModel& draft) : job(&j), drafter(draft, j.id) {}
    const Job* job;
    Drafter drafter;
    typename Kind::Policy policy = Kind::policy();
    std::unique_ptr<typename Engine::Request> request;
    std::int64_t steps = 0;
  };
  std::map<std::int32_t, Served> out;
  std::deque<std::unique_ptr<Live>> live;
  std::size_t next = 0;
  while (next < jobs.size() || !live.empty()) {
    while (live.size() < batch && next < jobs.size()) {
      const Job& j = jobs[next++];
      auto l = std::make_unique<Live>(j, draft);
      l->request = std::make_unique<typename Engine::Request>(j.id, l->drafter, l->policy, j.options);
      engine.begin(*l->request, j.prompt);
      live.push_back(std::move(l));
    }
    std::vector<typename Engine::Request*> step;
    for (auto& l : live)
      if (l->request->active()) step.push_back(l->request.get());
    if (!step.empty()) engine.step(step);
    for (auto it = live.begin(); it != live.end();) {
      Live& l = **it;
      ++l.steps;
      const bool abort = l.request->active() && l.steps == l.job->abort_after;
      if (abort) engine.abort(*l.request);
      if (l.request->active()) {
        ++it;
        continue;
      }
      out[l.job->id] = {l.request->result().tokens, abort};
      it = live.erase(it);  // the draft sequence closes with its drafter
    }
  }
  return out;
}

double stress_seconds() {
  const char* s = std::getenv("SPECDEC_STRESS_SECONDS");
  return s == nullptr ? 0.0 : std::atof(s);
}

}  // namespace

// Two hosts' engines of `Kind` over one shared target and draft, each host
// with a draft worker when `workers`: every request as served alone.
template <class Kind>
void check_two_hosts(bool workers) {
  HashedContextModel target(kVocab, 3), draft(kVocab, 3, 2, 2.0f, /*noise=*/0.6f);
  const auto start = std::chrono::steady_clock::now();
  std::int32_t round = 0;
  do {
    INFO("round " << round);
    const auto a = jobs_of(1, round, 24), b = jobs_of(2, round, 24);
    // Alone: one thread, one request at a time, fresh models.
    std::map<std::int32_t, Served> alone;
    {
      HashedContextModel t(kVocab, 3), d(kVocab, 3, 2, 2.0f, 0.6f);
      for (const auto* jobs : {&a, &b})
        for (const auto& [id, served] : serve<Kind>(t, d, *jobs, 1)) alone[id] = served;
    }
    // Together: two threads, four requests at once each, the shared models.
    std::map<std::int32_t, Served> out_a, out_b;
    std::unique_ptr<sd::DraftWorker> worker_a, worker_b;
    if (workers)
      worker_a = std::make_unique<sd::DraftWorker>(), worker_b = std::make_unique<sd::DraftWorker>();
    std::thread host_a([&] { out_a = serve<Kind>(target, draft, a, 4, worker_a.get()); });
    std::thread host_b([&] { out_b = serve<Kind>(target, draft, b, 4, worker_b.get()); });
    host_a.join();
    host_b.join();
    for (const auto* jobs : {&a, &b})
      for (const auto& j : *jobs) {
        INFO("request " << j.id << (j.options.sampling.is_greedy() ? " (greedy)" : " (sampled)")
                        << (j.abort_after >= 0 ? ", aborted after 3 steps" : ""));
        const auto& got = (j.id < 2000 ? out_a : out_b).at(j.id);
        CHECK(got == alone.at(j.id));
        CHECK(static_cast<std::int64_t>(got.tokens.size()) <= j.options.max_new_tokens);
        if (got.aborted) CHECK(static_cast<std::int64_t>(got.tokens.size()) < j.options.max_new_tokens);
        if (j.options.sampling.is_greedy())
          CHECK(got.tokens == sd::testing::greedy_continuation(target, j.prompt,
                                                               static_cast<std::int64_t>(got.tokens.size())));
      }
    std::int32_t aborted = 0;
    for (const auto* out : {&out_a, &out_b})
      for (const auto& [id, served] : *out) aborted += served.aborted;
    CHECK(aborted > 0);  // the abort path ran
    for (const auto* jobs : {&a, &b})
      for (const auto& j : *jobs) CHECK_FALSE(target.is_open(j.id));  // every sequence closed
    ++round;
  } while (std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() <
           stress_seconds());
}

TEST_CASE("Two host threads step their own engines over one shared target and draft",
          "[unit][engine][concurrency]") {
  check_two_hosts<Chain>(false);
}

TEST_CASE(
    "Two host threads step DuoDecoding engines, each drafting on its own DraftWorker, over shared models",
    "[unit][engine][concurrency][duo]") {
  check_two_hosts<Duo>(true);
}
