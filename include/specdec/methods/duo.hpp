// duo: DuoDecoding (Lv et al., arXiv 2503.00784): the draft model drafts on a
// thread and cores of its own while the target verifies the previous round's
// tail (LaggedTail), with the hardware-aware budget gamma (HardwareBudget,
// measured at start-up unless given) and dynamic multi-sequence drafting
// (MultiSequenceBuilder).
//
// The paper puts the target on a GPU and the draft on the CPU (§3.1). With
// host_draft=DIR the draft is a host model of DIR (MethodHooks::host_draft_duo:
// cpu::LlamaModel beside a CUDA or libtorch target), else a model of the
// target's kind. On one CPU both run on cores of their own: the target on
// target_threads cores (a thread of its own and the backend's team), the
// draft on the next draft_threads cores (a DraftWorker), each pinned there.
// The backend's MethodHooks::thread_setup runs first on each of the two
// threads.
#pragma once

#include <cstdio>
#include <memory>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "specdec/carry/lagged_tail.hpp"
#include "specdec/engine/draft_worker.hpp"
#include "specdec/methods/method_parts.hpp"
#include "specdec/policy/hardware_budget.hpp"
#include "specdec/tree/multi_sequence_builder.hpp"

namespace specdec::methods {

// Where DuoDecoding's two sides run.
struct DuoSplit {
  int target_threads = 1, draft_threads = 1;
  std::vector<int> target_cpus, draft_cpus;  // empty: not pinned

  static DuoSplit of(const MethodConfig& c) {
    DuoSplit s;
    s.target_threads = c.int32("target_threads");
    s.draft_threads = c.int32("draft_threads");
    if (s.target_threads < 1 || s.draft_threads < 1)
      throw InvalidArgumentError(fmt::format("method duo: target_threads ({}) and draft_threads ({}) must be >= 1",
                                             s.target_threads, s.draft_threads));
    const bool concurrent = c.flag("concurrent");
    const auto cpus = allowed_cpus();
    const auto need = static_cast<std::size_t>(s.target_threads + (concurrent ? s.draft_threads : 0));
    // Oversubscribed (more busy threads than cores), the two sides would
    // preempt each other's threads mid-GEMM.
    if (!cpus.empty() && cpus.size() < need)
      throw InvalidArgumentError(fmt::format(
          "method duo: target_threads{} = {} cores, but this process may use {} ({}); lower them{}",
          concurrent ? " + draft_threads" : "", need, cpus.size(), fmt::join(cpus, ","),
          concurrent ? " or pass concurrent=0" : ""));
    if (!c.flag("pin")) return s;
    s.target_cpus.assign(cpus.begin(), cpus.begin() + s.target_threads);
    s.draft_cpus.assign(cpus.begin() + s.target_threads, cpus.begin() + static_cast<std::ptrdiff_t>(need));
    return s;
  }
};

// The target side runs on a thread of its own too (a DraftWorker used as the
// target's thread), pinned to the target's cores, so that neither side
// changes the caller's threading: each thread's thread count is set once,
// first thing, by the backend's thread_setup. Every call into the engine
// (begin, step, a whole generation) runs on the target's thread while the
// caller waits, and so does the token callback.
// The target is an M, the draft a D: a model of the target's kind, or a host
// model beside a device target. `owned` keeps a draft the method loaded.
template <class M, class D, class Rule>
class DuoParts {
 public:
  using Target = TimedModel<M>;
  using Draft = TimedModel<D>;
  using Drafter = ModelDrafter<Draft>;
  using Engine = SpeculativeEngine<Drafter, MultiSequenceBuilder, ModelVerifier<Target>, Rule, HardwareBudget,
                                   SelectAll, LaggedTail>;
  using Slot = RequestSlot<Engine, Drafter, HardwareBudget>;

  DuoParts(const MethodContext<M>& c, D& draft, std::shared_ptr<D> owned, DuoSplit s, Rule rule)
      : owned_(std::move(owned)),
        split_(std::move(s)),
        target_thread_(thread_on(c, split_.target_cpus, split_.target_threads)),
        worker_(c.config.flag("concurrent") ? thread_on(c, split_.draft_cpus, split_.draft_threads)
                                            : nullptr),
        target_(c.target),
        draft_(draft),
        verifier_(target_),
        policy_(budget_of(c, draft)),
        // continuations drawn for a sampled request, top-1 for a greedy one
        engine_(
            MultiSequenceBuilder(MultiSequenceOptions{c.config.int32("max_seqs"), c.config.int32("seqs")}),
            verifier_, std::move(rule)) {
    engine_.set_target_clock(&target_.clock());
    engine_.set_draft_worker(worker_.get());
  }

  Engine& engine() { return engine_; }
  std::unique_ptr<Slot> slot(std::int32_t seq, const GenerationOptions& options, TokenCallback on_token) {
    return draft_model_slot<Slot>(draft_, policy_, seq, options, std::move(on_token), seq);
  }
  template <class F>
  void run(F&& f) {
    target_thread_->submit(std::forward<F>(f));
    target_thread_->wait();
  }

 private:
  static std::unique_ptr<DraftWorker> thread_on(const MethodContext<M>& c, const std::vector<int>& cpus, int threads) {
    std::function<void()> setup;
    if (c.hooks.thread_setup) setup = [f = c.hooks.thread_setup, threads] { f(threads); };
    return std::make_unique<DraftWorker>(DraftWorker::Options{cpus, std::move(setup)});
  }

  // gamma= or the cost coefficient measured now, on the split it will run on.
  std::int32_t budget_of(const MethodContext<M>& c, D& draft) {
    if (const auto gamma = c.config.int32("gamma"); gamma > 0) return gamma;
    CostCoefficient cost;
    target_thread_->submit([&] { cost = measure_cost_coefficient(c.target, draft, worker_.get()); });
    target_thread_->wait();
    fmt::print(stderr,
               "duo: cost coefficient c = target forward {:.3f} ms ({} tokens, {} thread{}) / draft forward {:.3f} ms "
               "({} thread{}{}) = {:.2f} -> gamma {}\n",
               1e3 * cost.target_seconds, cost.target_tokens, split_.target_threads,
               split_.target_threads == 1 ? "" : "s", 1e3 * cost.draft_seconds, split_.draft_threads,
               split_.draft_threads == 1 ? "" : "s", cost.concurrent ? ", timed concurrently" : "", cost.c(),
               cost.gamma());
    return cost.gamma();
  }

  std::shared_ptr<D> owned_;
  DuoSplit split_;
  std::unique_ptr<DraftWorker> target_thread_;
  std::unique_ptr<DraftWorker> worker_;  // null: drafts on the target's thread (concurrent=0)
  Target target_;
  Draft draft_;
  ModelVerifier<Target> verifier_;
  HardwareBudget policy_;  // each request starts from a copy
  Engine engine_;
};

// DuoDecoding over c.target and `draft`, a model of any kind (a backend's
// host_draft_duo hook passes a host model it loaded, and `owned` with it).
template <class M, class D>
AnyDecoder duo_decoder(const MethodContext<M>& c, D& draft, std::shared_ptr<D> owned = nullptr) {
  if (draft.vocab_size() != c.target.vocab_size())
    throw ShapeError(
        fmt::format("method duo: the draft model's vocabulary ({}) differs from the target's ({})",
                    draft.vocab_size(), c.target.vocab_size()));
  auto split = DuoSplit::of(c.config);
  return with_rule<false, true>(c.config, c.sampling, [&]<class Rule>(Rule rule) {
    return AnyDecoder::make<DuoParts<M, D, Rule>>(c.config.spec(), c, draft, std::move(owned),
                                                  std::move(split), std::move(rule));
  });
}

template <class M>
MethodInfo<M> duo_method() {
  return {
      "duo",
      "DuoDecoding: the draft model drafts on its own cores while the target verifies the last tail",
      "2503.00784",
      MethodModels::kDraftModel,
      false,
      {{"gamma", ParamType::kInt, "0",
        "draft budget per round; 0: the cost coefficient (target forward / draft forward), measured at "
        "start-up",
        true},
       {"seqs", ParamType::kInt, "0", "sequences per round; 0: dynamic (theta = q1(c1) * max q2)", true},
       {"max_seqs", ParamType::kInt, "8", "the most sequences dynamic drafting may choose"},
       {"target_threads", ParamType::kInt, "1", "cores (threads) of the target"},
       {"draft_threads", ParamType::kInt, "1", "cores (threads) of the draft worker"},
       {"pin", ParamType::kFlag, "1", "pin target and draft to cores of their own: 0 or 1"},
       {"concurrent", ParamType::kFlag, "1",
        "draft on the worker while the target runs (0: one after the other)"},
       {"host_draft", ParamType::kText, "",
        "a draft checkpoint to run on the host cores beside the target (the paper's GPU target + CPU draft); "
        "empty: the draft model, on the target's device"},
       rule_param()},
      [](const MethodContext<M>& c) {
        const auto& host = c.config.text("host_draft");
        if (host.empty()) return duo_decoder(c, *c.draft);
        if (!c.hooks.host_draft_duo)
          throw UnsupportedError("method duo: this backend has no host model for host_draft=");
        return c.hooks.host_draft_duo(c, host);
      }};
}

}  // namespace specdec::methods
