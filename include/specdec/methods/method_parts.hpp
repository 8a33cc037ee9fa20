// What the registry's recipes (methods/<name>.hpp) assemble methods from: a
// length policy chosen at run time and its parameters, the children a static
// tree draws, a request's slot (its own drafter and policy and the engine's
// Request over them), and the parts of a draft-model method.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <utility>
#include <variant>
#include <vector>

#include <fmt/format.h>

#include "specdec/core/error.hpp"
#include "specdec/draft/model_drafter.hpp"
#include "specdec/engine/any_decoder.hpp"
#include "specdec/engine/speculative_engine.hpp"
#include "specdec/engine/timed_model.hpp"
#include "specdec/methods/method_registry.hpp"
#include "specdec/policy/confidence_stop.hpp"
#include "specdec/policy/cost_aware_tree.hpp"
#include "specdec/policy/fixed_length.hpp"
#include "specdec/policy/follow_verified.hpp"
#include "specdec/policy/heuristic_length.hpp"
#include "specdec/select/verify_latency.hpp"
#include "specdec/tree/child_selection.hpp"
#include "specdec/verify/target_verifier.hpp"

namespace specdec::methods {

// A length policy chosen at run time.
class RuntimePolicy {
 public:
  template <class P>
  explicit RuntimePolicy(P p) : p_(std::move(p)) {}
  DraftBudget budget() {
    return std::visit([](auto& p) { return p.budget(); }, p_);
  }
  void observe(const RoundOutcome& o) {
    std::visit([&](auto& p) { p.observe(o); }, p_);
  }

 private:
  std::variant<FixedLength, HeuristicLength, ConfidenceStop, FollowVerified, CostAwareTree> p_;
};

// policy=cost: the budget from the target's forward cost, measured now on this
// machine, and the acceptance the rounds show (policy/cost_aware_tree.hpp).
// `initial` drafts the first rounds and bounds every plan. The profile is of
// one sequence; batched requests plan with it as if alone.
template <class M>
RuntimePolicy cost_policy(const MethodContext<M>& c, DraftBudget initial, bool chains_only) {
  std::vector<std::int32_t> tokens{1, 2, 3, 4, 5, 6, 8, 10, 12, 16, 20, 24, 32};
  if (initial.verify_nodes + 1 > tokens.back()) tokens.push_back(initial.verify_nodes + 1);
  CostAwareOptions o;
  o.chains_only = chains_only;
  return RuntimePolicy(CostAwareTree(measure_target_latency(c.target, std::move(tokens)), initial, o));
}

// policy= of the chain methods: fixed k, the heuristic, the confidence stop,
// or the cost-aware length (k the longest).
inline std::vector<MethodParam> chain_policy_params() {
  return {{"policy", ParamType::kText, "fixed",
           "fixed | heuristic (+2 after full acceptance, -1 otherwise) | confidence | cost (the length that maximises "
           "tokens/s for the measured forward cost, k the longest)"},
          {"threshold", ParamType::kReal, "0.4", "confidence policy: stop drafting below this draft probability"}};
}
template <class M>
RuntimePolicy chain_policy(const MethodContext<M>& mc) {
  const auto& c = mc.config;
  const auto k = c.int32("k");
  const auto& policy = c.text("policy");
  if (policy == "fixed") return RuntimePolicy(FixedLength::chain(k));
  if (policy == "heuristic") return RuntimePolicy(HeuristicLength(k));
  if (policy == "confidence") return RuntimePolicy(ConfidenceStop(DraftBudget{k, k, k, 0.0f}, c.real("threshold")));
  if (policy == "cost") return cost_policy(mc, FixedLength::chain(k).budget(), true);
  throw InvalidArgumentError(fmt::format("method {}: unknown policy '{}' (fixed, heuristic, confidence, cost)", c.name,
                                         policy));
}

// A tree method's budget: fixed (the builder's own parameters decide the
// tree) or cost (policy/cost_aware_tree.hpp, the parameters the largest).
inline MethodParam tree_policy_param() {
  return {"policy", ParamType::kText, "fixed",
          "fixed | cost (depth, branch and nodes that maximise tokens/s for the measured forward cost; the method's "
          "own the largest)"};
}
template <class M>
RuntimePolicy tree_policy(const MethodContext<M>& c, DraftBudget budget) {
  const auto& policy = c.config.text("policy");
  if (policy == "fixed") return RuntimePolicy(FixedLength(budget));
  if (policy == "cost") return cost_policy(c, budget, false);
  throw InvalidArgumentError(fmt::format("method {}: unknown policy '{}' (fixed, cost)", c.config.name, policy));
}
template <class M>
RuntimePolicy tree_policy(const MethodContext<M>& c, std::int32_t depth, std::int32_t nodes, std::int32_t branch = 0) {
  return tree_policy(c, DraftBudget{depth, nodes, nodes, 0.0f, branch});
}

// draw= of the static-tree methods: how each node's children are drafted.
inline MethodParam draw_param() {
  return {
      "draw", ParamType::kText, "auto",
      "children per node: auto (topk for a greedy request, sample for a sampled one) | topk (the draft's "
      "best, deterministic) | sample (drawn without replacement, Sequoia arXiv 2402.12374 §3.2) | iid (drawn "
      "independently, with replacement: SpecInfer arXiv 2305.09781 §4.3)"};
}
inline ChildDraw child_draw(const MethodConfig& c) {
  const auto& draw = c.text("draw");
  if (draw == "auto") return ChildDraw::by_request();
  if (draw == "topk") return ChildDraw::same(ChildMode::kDeterministic);
  if (draw == "sample") return ChildDraw::same(ChildMode::kSampledWithoutReplacement);
  if (draw == "iid") return ChildDraw::same(ChildMode::kSampledWithReplacement);
  throw InvalidArgumentError(
      fmt::format("method {}: unknown draw '{}' (auto, topk, sample, iid)", c.name, draw));
}

// One request of a method: what its drafter borrows (Owned: a feature head's
// fork), its drafter and policy, and the engine's Request over them. It stays
// in place until the request is done (AnyDecoder keeps it behind a pointer).
template <class Engine, class Drafter, class Policy, class Owned = std::monostate>
struct RequestSlot {
  // `make_drafter(owned)` returns the request's drafter.
  template <class MakeDrafter>
  RequestSlot(Owned o, MakeDrafter&& make_drafter, Policy p, std::int32_t seq, const GenerationOptions& options,
              TokenCallback on_token)
      : owned(std::move(o)),
        drafter(make_drafter(owned)),
        policy(std::move(p)),
        request(seq, drafter, policy, options, std::move(on_token)) {}
  Owned owned;
  Drafter drafter;
  Policy policy;
  typename Engine::Request request;
};

// A request of a method whose drafter is a shared draft model: sequence
// `draft_seq` of it (the request's own `seq` unless the draft is the target),
// under `cache`, its draft-model time on the request's clock.
template <class Slot, class Timed, class Policy>
std::unique_ptr<Slot> draft_model_slot(Timed& draft, const Policy& policy, std::int32_t seq,
                                       const GenerationOptions& options, TokenCallback on_token,
                                       std::int32_t draft_seq, const CachePolicy& cache = {}) {
  auto s = std::make_unique<Slot>(
      std::monostate{}, [&](std::monostate&) { return ModelDrafter<Timed>(draft, draft_seq, cache); }, policy, seq,
      options, std::move(on_token));
  s->request.set_draft_clock(&draft.clock());
  return s;
}

// The parameters a backend adds to the methods that draft with a draft model
// (MethodHooks::draft_params: the torch backend's hot=).
template <class M>
std::vector<MethodParam> with_draft_params(std::vector<MethodParam> params, const MethodHooks<M>& hooks) {
  for (const auto& p : hooks.draft_params) params.push_back(p);
  return params;
}

// Self-speculation (MagicDec, arXiv 2408.11049, §4.1): the target drafts for
// itself through a sparse cache. Request `seq` drafts as the target's
// sequence self_draft_seq(seq), so a host that self-speculates numbers its
// requests from 0.
struct SelfDraft {
  bool on = false;
  CachePolicy cache{};
};
inline constexpr std::int32_t self_draft_seq(std::int32_t seq) { return -1 - seq; }

// The parts of a method whose draft model drafts every request's tree with
// `Builder` (chain, tree, dynamic, sequoia; magicdec with the target as its
// draft): each request drafts as its own sequence of the shared draft model,
// and starts from a copy of the policy.
template <class M, class Builder, class Rule>
class DraftModelParts {
 public:
  using Timed = TimedModel<M>;
  using Drafter = ModelDrafter<Timed>;
  using Verifier = target_verifier_t<Timed>;
  using Engine = SpeculativeEngine<Drafter, Builder, Verifier, Rule, RuntimePolicy>;
  using Slot = RequestSlot<Engine, Drafter, RuntimePolicy>;

  DraftModelParts(const MethodContext<M>& c, Builder builder, Rule rule, RuntimePolicy policy, SelfDraft self = {})
      : target_(c.target),
        draft_(self.on ? c.target : *c.draft),
        verifier_(TargetVerifier<Timed>::make(target_)),
        policy_(std::move(policy)),
        engine_(std::move(builder), verifier_, std::move(rule)),
        around_(!self.on && c.hooks.around_draft ? c.hooks.around_draft(c) : Around{}),
        self_(self) {
    engine_.set_target_clock(&target_.clock());
  }

  Engine& engine() { return engine_; }
  std::unique_ptr<Slot> slot(std::int32_t seq, const GenerationOptions& options, TokenCallback on_token) {
    if (!self_.on) return draft_model_slot<Slot>(draft_, policy_, seq, options, std::move(on_token), seq);
    if (seq < 0)
      throw InvalidArgumentError(fmt::format(
          "request {}: a self-speculating method drafts as the target's sequence -1 - seq, so requests are numbered "
          "from 0",
          seq));
    return draft_model_slot<Slot>(draft_, policy_, seq, options, std::move(on_token), self_draft_seq(seq),
                                  self_.cache);
  }
  template <class F>
  void run(F&& f) {
    if (around_)
      around_(f);
    else
      f();
  }

 private:
  using Around = std::function<void(const std::function<void()>&)>;
  Timed target_, draft_;
  Verifier verifier_;
  RuntimePolicy policy_;
  Engine engine_;
  Around around_;
  SelfDraft self_;
};

// A draft-model method drafting with `builder`, under the rule= of `c`.
template <class M, class Builder>
AnyDecoder draft_model_method(const MethodContext<M>& c, Builder builder, RuntimePolicy policy, SelfDraft self = {}) {
  constexpr bool kChain = requires { requires Builder::kBuildsChainsOnly; };
  return with_rule<kChain, true>(c.config, c.sampling, [&]<class Rule>(Rule rule) {
    return AnyDecoder::make<DraftModelParts<M, Builder, Rule>>(c.config.spec(), c, std::move(builder), std::move(rule),
                                                               std::move(policy), self);
  });
}

}  // namespace specdec::methods
