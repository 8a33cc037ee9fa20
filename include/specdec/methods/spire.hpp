// spire: SPIRe's draft model (Neelam et al., arXiv 2504.06419, §3) drafting a
// chain of k: a few pruned target layers with feedback memory over a sink +
// window cache, whose memory of every verified token is the target's own
// activations (draft/spire_drafter.hpp). The requests of a batch draft in
// one forward of the shared draft. The backend loads the draft.
#pragma once

#include <memory>
#include <utility>
#include <variant>

#include "specdec/draft/spire_drafter.hpp"
#include "specdec/methods/feature_head_parts.hpp"
#include "specdec/tree/chain_builder.hpp"

namespace specdec::methods {

template <class M, SpireHead Head, class Rule>
class SpireParts {
 public:
  using Timed = TimedModel<M>;
  using Drafter = SpireDrafter<Head>;
  using Engine = SpeculativeEngine<Drafter, ChainBuilder, ModelVerifier<Timed>, Rule, RuntimePolicy>;
  using Slot = RequestSlot<Engine, Drafter, RuntimePolicy>;

  SpireParts(const MethodContext<M>& c, Head head, Rule rule, RuntimePolicy policy)
      : target_(c.target),
        head_(std::move(head)),
        verifier_(target_),
        policy_(std::move(policy)),
        engine_(ChainBuilder{}, verifier_, std::move(rule)) {
    // The draft remembers the target's inputs to the layers it was pruned from.
    verifier_.set_feature_layers(head_.memory_layer(), head_.memory_layers());
    engine_.set_target_clock(&target_.clock());
  }

  Engine& engine() { return engine_; }
  std::unique_ptr<Slot> slot(std::int32_t seq, const GenerationOptions& options, TokenCallback on_token) {
    auto s = std::make_unique<Slot>(
        std::monostate{}, [&](std::monostate&) { return Drafter(head_, seq); }, policy_, seq, options,
        std::move(on_token));
    s->drafter.set_clock(&clock_);
    s->request.set_draft_clock(&clock_);
    return s;
  }

 private:
  Timed target_;
  Head head_;  // every request's cache, one set of weights
  ModelClock clock_;  // the head's time, on every request's draft-model clock
  ModelVerifier<Timed> verifier_;
  RuntimePolicy policy_;  // each request starts from a copy
  Engine engine_;
};

template <class M, class Head>
MethodInfo<M> spire_method(HeadLoader<M, Head> load_head) {
  std::vector<MethodParam> params = {
      {"k", ParamType::kInt, "4", "drafted tokens per round (the initial length with policy=heuristic)", true},
      {"head", ParamType::kText, "", "SPIRe draft directory (default: spire/ beside the target)"}};
  for (auto& p : chain_policy_params()) params.push_back(std::move(p));
  params.push_back(rule_param());
  return {"spire", "SPIRe draft: pruned target layers, feedback memory over a sink + window cache, target memories",
          "2504.06419", MethodModels::kSpireDraft, true, std::move(params),
          [load_head = std::move(load_head)](const MethodContext<M>& c) {
            auto head = load_head(c);
            auto policy = chain_policy(c);
            return with_rule<true, true>(c.config, c.sampling, [&]<class Rule>(Rule rule) {
              return AnyDecoder::make<SpireParts<M, Head, Rule>>(c.config.spec(), c, std::move(head), std::move(rule),
                                                                 std::move(policy));
            });
          }};
}

}  // namespace specdec::methods
