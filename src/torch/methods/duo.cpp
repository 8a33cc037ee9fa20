// duo: DuoDecoding (Lv et al., arXiv 2503.00784): the draft model drafts on a
// thread and cores of its own while the target verifies the previous round's
// tail (LaggedTail), with the hardware-aware budget gamma (HardwareBudget,
// measured at start-up unless given) and dynamic multi-sequence drafting
// (MultiSequenceBuilder).
//
// The paper puts the target on a GPU and the draft on the CPU. Here both run
// on this CPU: the target on target_threads cores (the calling thread and its
// OpenMP team), the draft on the next draft_threads cores (a DraftWorker with
// an OpenMP team of its own), each pinned there.
#include <algorithm>
#include <cstdio>
#include <memory>
#include <vector>

#include <ATen/Parallel.h>

#include "specdec/carry/lagged_tail.hpp"
#include "specdec/engine/draft_worker.hpp"
#include "specdec/policy/hardware_budget.hpp"
#include "specdec/torch/threads.hpp"
#include "specdec/tree/multi_sequence_builder.hpp"

#include "parts.hpp"

namespace specdec::torch_backend::methods {
namespace {

struct Split {
  int target_threads = 1, draft_threads = 1;
  std::vector<int> target_cpus, draft_cpus;  // empty: not pinned
};

Split split_of(const MethodConfig& c) {
  Split s;
  s.target_threads = c.int32("target_threads");
  s.draft_threads = c.int32("draft_threads");
  if (s.target_threads < 1 || s.draft_threads < 1)
    throw InvalidArgumentError(fmt::format("method duo: target_threads ({}) and draft_threads ({}) must be >= 1",
                                           s.target_threads, s.draft_threads));
  const auto cpus = allowed_cpus();
  const auto need = static_cast<std::size_t>(s.target_threads + (c.flag("concurrent") ? s.draft_threads : 0));
  // Oversubscribed (more busy threads than cores), the two sides would
  // preempt each other's OpenMP threads mid-GEMM.
  if (!cpus.empty() && cpus.size() < need)
    throw InvalidArgumentError(fmt::format(
        "method duo: target_threads{} = {} cores, but this process may use {} ({}); lower them{}",
        c.flag("concurrent") ? " + draft_threads" : "", need, cpus.size(), fmt::join(cpus, ","),
        c.flag("concurrent") ? " or pass concurrent=0" : ""));
  if (!c.flag("pin")) return s;
  s.target_cpus.assign(cpus.begin(), cpus.begin() + s.target_threads);
  s.draft_cpus.assign(cpus.begin() + s.target_threads, cpus.begin() + static_cast<std::ptrdiff_t>(need));
  return s;
}

// The target side runs on a thread of its own too (a DraftWorker used as the
// target's thread), pinned to the target's cores, so neither side ever
// changes the caller's threading: each thread sets its forward thread count
// (threads.hpp) and calls at::set_num_threads once, first thing. OpenMP's thread count is per thread, but ATen resets a
// thread's count to the process-wide one on its first parallel region unless
// at::set_num_threads set it there. (With omp_set_num_threads instead, both
// threads ran teams of two, and every method run after duo in the process
// was 1.5-2x slower; switching the caller's count around each generation
// slowed the next prefill 3x.) The token callback runs on the target's
// thread while the caller waits.
template <class Rule>
struct WithDuo {
  using Engine = SpeculativeEngine<ModelDrafter<Timed>, MultiSequenceBuilder, ModelVerifier<Timed>, Rule,
                                   HardwareBudget, SelectAll, LaggedTail>;
  Split split;
  std::unique_ptr<DraftWorker> target_thread;
  std::unique_ptr<DraftWorker> worker;  // null: drafts on the target's thread (concurrent=0)
  Timed target, draft;
  ModelVerifier<Timed> verifier;
  ModelDrafter<Timed> drafter;
  HardwareBudget policy;
  Engine engine;

  WithDuo(const MethodContext& c, Split s, Rule rule)
      : split(std::move(s)),
        target_thread(thread_on(split.target_cpus, split.target_threads)),
        worker(c.config.flag("concurrent") ? thread_on(split.draft_cpus, split.draft_threads) : nullptr),
        target(c.target),
        draft(*c.draft),
        verifier(target),
        drafter(draft, 0),
        policy(budget_of(c)),
        // continuations drawn for a sampled request, top-1 for a greedy one
        engine(MultiSequenceBuilder(MultiSequenceOptions{c.config.int32("max_seqs"), c.config.int32("seqs")}),
               verifier, std::move(rule)) {
    engine.set_target_clock(&target.clock());
    engine.set_draft_worker(worker.get());
  }

  GenerationResult generate(std::span<const TokenId> p, const GenerationOptions& o, const TokenCallback& cb) {
    GenerationResult out;
    target_thread->submit([&] {
      typename Engine::Request request(0, drafter, policy, o, cb);
      request.set_draft_clock(&draft.clock());
      engine.begin(request, p);
      while (!request.done()) engine.step(request);
      out = request.take_result();
    });
    target_thread->wait();
    return out;
  }

  // Called on the target's thread, after each round.
  void set_round_view_observer(std::function<void(const RoundView&)> f) {
    engine.set_round_view_observer(std::move(f));
  }

  // Every request's tail is verified in one target forward on the target's
  // thread while the worker drafts below each tail in turn.
  BatchRun generate_batch(std::span<const std::vector<TokenId>> p, std::span<const GenerationOptions> o,
                          std::size_t max_batch) {
    BatchRun out;
    target_thread->submit([&] {
      out = run_batch<ModelDrafter<Timed>>(engine, p, o, max_batch, policy, &draft.clock(), [&](std::int32_t seq) {
        return std::tuple(std::ref(draft), seq);
      });
    });
    target_thread->wait();
    return out;
  }

 private:
  static std::unique_ptr<DraftWorker> thread_on(const std::vector<int>& cpus, int threads) {
    return std::make_unique<DraftWorker>(DraftWorker::Options{cpus, [threads] {
      at::set_num_threads(threads);
      set_forward_threads(threads);
    }});
  }

  // gamma= or the cost coefficient measured now, on the split it will run on.
  std::int32_t budget_of(const MethodContext& c) {
    if (const auto gamma = c.config.int32("gamma"); gamma > 0) return gamma;
    CostCoefficient cost;
    target_thread->submit([&] { cost = measure_cost_coefficient(c.target, *c.draft, worker.get()); });
    target_thread->wait();
    fmt::print(stderr,
               "duo: cost coefficient c = target forward {:.3f} ms ({} tokens, {} thread{}) / draft forward {:.3f} ms "
               "({} thread{}{}) = {:.2f} -> gamma {}\n",
               1e3 * cost.target_seconds, cost.target_tokens, split.target_threads,
               split.target_threads == 1 ? "" : "s", 1e3 * cost.draft_seconds, split.draft_threads,
               split.draft_threads == 1 ? "" : "s", cost.concurrent ? ", timed concurrently" : "", cost.c(),
               cost.gamma());
    return cost.gamma();
  }
};

}  // namespace

MethodInfo duo_method() {
  return {"duo", "DuoDecoding: the draft model drafts on its own cores while the target verifies the last tail",
          "2503.00784", MethodModels::kDraftModel, false,
          {{"gamma", ParamType::kInt, "0",
            "draft budget per round; 0: the cost coefficient (target forward / draft forward), measured at start-up",
            true},
           {"seqs", ParamType::kInt, "0", "sequences per round; 0: dynamic (theta = q1(c1) * max q2)", true},
           {"max_seqs", ParamType::kInt, "8", "the most sequences dynamic drafting may choose"},
           {"target_threads", ParamType::kInt, "1", "cores (OpenMP threads) of the target"},
           {"draft_threads", ParamType::kInt, "1", "cores (OpenMP threads) of the draft worker"},
           {"pin", ParamType::kFlag, "1", "pin target and draft to cores of their own: 0 or 1"},
           {"concurrent", ParamType::kFlag, "1", "draft on the worker while the target runs (0: one after the other)"},
           rule_param()},
          [](const MethodContext& c) {
            if (c.draft == nullptr) throw InvalidArgumentError("method duo needs a draft model (--draft)");
            auto split = split_of(c.config);
            return with_rule<false, true>(c, [&]<class Rule>(Rule rule) {
              return AnyDecoder::make<WithDuo<Rule>>(c.config.spec(), c, std::move(split), std::move(rule));
            });
          }};
}

}  // namespace specdec::torch_backend::methods
