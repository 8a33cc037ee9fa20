// The host engine's methods: chain, dynamic tree, n-gram, Lyanna and
// DuoDecoding speculative decoding through specdec's one round engine over
// HostLlama, several requests at once. Greedy (lossless at temperature 0: the output equals the
// target's greedy decoding).
#pragma once

#include <cstdint>
#include <deque>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "host_llama.hpp"
#include "host_lyanna_head.hpp"
#include "scheduler.hpp"
#include "specdec/specdec.hpp"

namespace host_engine {

struct Outputs {
  std::map<std::int32_t, specdec::GenerationResult> results;  // by request id (submission order)
  std::int64_t steps = 0;
  std::size_t peak_batch = 0;
};

// `method`: chain | dynamic | ngram | lyanna (with `head`, the Lyanna head) | duo.
inline Outputs generate(HostLlama& target, HostLlama& draft, const HostLyannaHead* head, const std::string& method,
                        const std::vector<std::vector<specdec::TokenId>>& prompts, std::int64_t max_new_tokens,
                        std::size_t max_batch) {
  namespace sd = specdec;
  sd::ModelVerifier<HostLlama> verifier(target);
  sd::GenerationOptions options;
  options.max_new_tokens = max_new_tokens;
  options.sampling.temperature = 0.0f;  // greedy requests: drafts ranked at temperature 1, top-1 chains
  const auto run = [&](auto& scheduler) {
    for (const auto& p : prompts) scheduler.submit(p, options);
    Outputs out;
    out.results = scheduler.run();
    out.steps = scheduler.steps();
    out.peak_batch = scheduler.peak_batch();
    return out;
  };
  using ModelDrafter = sd::ModelDrafter<HostLlama>;
  const auto model_drafter = [&](std::int32_t seq) {
    return std::make_unique<ModelDrafter>(draft, seq);
  };
  if (method == "chain") {
    using Engine = sd::SpeculativeEngine<ModelDrafter, sd::ChainBuilder, sd::ModelVerifier<HostLlama>,
                                         sd::GreedyAcceptance, sd::FixedLength>;
    Engine engine(sd::ChainBuilder{}, verifier, sd::GreedyAcceptance{});
    Scheduler<Engine, ModelDrafter, sd::FixedLength> scheduler(engine, model_drafter, sd::FixedLength::chain(4),
                                                               max_batch);
    return run(scheduler);
  }
  if (method == "dynamic") {
    using Engine = sd::SpeculativeEngine<ModelDrafter, sd::DynamicTreeBuilder, sd::ModelVerifier<HostLlama>,
                                         sd::GreedyAcceptance, sd::FixedLength>;
    Engine engine(sd::DynamicTreeBuilder{2, 4, 8}, verifier, sd::GreedyAcceptance{});
    Scheduler<Engine, ModelDrafter, sd::FixedLength> scheduler(
        engine, model_drafter, sd::FixedLength(sd::DraftBudget{4, 8, 8, 0.0f}), max_batch);
    return run(scheduler);
  }
  if (method == "ngram") {
    using Engine = sd::SpeculativeEngine<sd::NgramDrafter, sd::ChainBuilder, sd::ModelVerifier<HostLlama>,
                                         sd::GreedyAcceptance, sd::FixedLength>;
    Engine engine(sd::ChainBuilder{}, verifier, sd::GreedyAcceptance{});
    Scheduler<Engine, sd::NgramDrafter, sd::FixedLength> scheduler(
        engine, [&](std::int32_t) { return std::make_unique<sd::NgramDrafter>(target.vocab_size(), 1, 3); },
        sd::FixedLength::chain(4), max_batch);
    return run(scheduler);
  }
  if (method == "lyanna") {
    if (head == nullptr) throw sd::InvalidArgumentError("host_engine: lyanna needs a Lyanna head");
    using Drafter = sd::LyannaDrafter<HostLyannaHead>;
    using Engine = sd::SpeculativeEngine<Drafter, sd::TokenInfoTreeBuilder, sd::ModelVerifier<HostLlama>,
                                         sd::GreedyAcceptance, sd::FixedLength, sd::SelectAll, sd::LyannaResampling>;
    sd::LyannaOptions o;  // the paper's setting: N 3, k 4, B 12, re-sampling with fusion
    Engine engine(o.builder(), verifier, sd::GreedyAcceptance{},
                  sd::SelectAll{}, o.resampling());
    std::deque<HostLyannaHead> heads;  // one per request: the weights are shared, the caches are not
    Scheduler<Engine, Drafter, sd::FixedLength> scheduler(
        engine,
        [&](std::int32_t) {
          heads.push_back(head->fork());
          return std::make_unique<Drafter>(heads.back());
        },
        o.policy(), max_batch);
    return run(scheduler);
  }
  if (method == "duo") {
    // DuoDecoding: every request's draft model drafts on the worker thread
    // while this thread runs the target's forward (with a GPU target, the
    // forward would go to the GPU from here and the drafts stay on the CPU).
    using Engine = sd::SpeculativeEngine<ModelDrafter, sd::MultiSequenceBuilder, sd::ModelVerifier<HostLlama>,
                                         sd::GreedyAcceptance, sd::HardwareBudget, sd::SelectAll, sd::LaggedTail>;
    Engine engine(sd::MultiSequenceBuilder(sd::MultiSequenceOptions{8, 0}), verifier,
                  sd::GreedyAcceptance{});
    sd::DraftWorker worker;
    engine.set_draft_worker(&worker);
    const auto cost = sd::measure_cost_coefficient(target, draft, &worker);  // gamma = target / draft forward
    Scheduler<Engine, ModelDrafter, sd::HardwareBudget> scheduler(engine, model_drafter, sd::HardwareBudget(cost),
                                                                  max_batch);
    return run(scheduler);
  }
  throw sd::InvalidArgumentError("host_engine: unknown method '" + method + "' (chain, dynamic, ngram, lyanna, duo)");
}

}  // namespace host_engine
