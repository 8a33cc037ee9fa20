// What the registered methods (src/torch/methods/*.cpp) assemble decoders
// from: timed models, a run-time length policy, the holders that own a
// decoder together with what it borrows, and the acceptance-rule choice.
#pragma once

#include <filesystem>
#include <span>
#include <memory>
#include <string>
#include <tuple>
#include <utility>
#include <variant>

#include <fmt/format.h>

#include "specdec/accept/block_verification.hpp"
#include "specdec/accept/greedy.hpp"
#include "specdec/accept/recursive_rejection_sampling.hpp"
#include "specdec/accept/speculative_sampling.hpp"
#include "specdec/accept/traversal_verification.hpp"
#include "specdec/accept/typical_acceptance.hpp"
#include "specdec/core/error.hpp"
#include "specdec/draft/model_drafter.hpp"
#include "specdec/engine/any_decoder.hpp"
#include "specdec/engine/continuous_batch.hpp"
#include "specdec/engine/speculative_decoder.hpp"
#include "specdec/engine/timed_model.hpp"
#include "specdec/policy/confidence_stop.hpp"
#include "specdec/policy/cost_aware_tree.hpp"
#include "specdec/policy/fixed_length.hpp"
#include "specdec/policy/follow_verified.hpp"
#include "specdec/policy/heuristic_length.hpp"
#include "specdec/select/verify_latency.hpp"
#include "specdec/torch/draft_head.hpp"
#include "specdec/torch/llama_model.hpp"
#include "specdec/torch/methods.hpp"
#include "specdec/verify/model_verifier.hpp"

namespace specdec::torch_backend::methods {

using Timed = TimedModel<LlamaModel>;

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
inline RuntimePolicy cost_policy(const MethodContext& c, DraftBudget initial, bool chains_only) {
  std::vector<std::int32_t> tokens{1, 2, 3, 4, 5, 6, 8, 10, 12, 16, 20, 24, 32};
  if (initial.verify_nodes + 1 > tokens.back()) tokens.push_back(initial.verify_nodes + 1);
  CostAwareOptions o;
  o.chains_only = chains_only;
  return RuntimePolicy(CostAwareTree(measure_target_latency(c.target, std::move(tokens)), initial, o));
}

// policy= of the chain methods: fixed k, the heuristic, the confidence stop,
// or the cost-aware length (k the longest).
inline RuntimePolicy chain_policy(const MethodContext& mc) {
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
inline std::vector<MethodParam> chain_policy_params() {
  return {{"policy", ParamType::kText, "fixed",
           "fixed | heuristic (+2 after full acceptance, -1 otherwise) | confidence | cost (the length that maximises "
           "tokens/s for the measured forward cost, k the longest)"},
          {"threshold", ParamType::kReal, "0.4", "confidence policy: stop drafting below this draft probability"}};
}

// A tree method's budget: fixed (the builder's own parameters decide the
// tree) or cost (policy/cost_aware_tree.hpp, the parameters the largest).
inline MethodParam tree_policy_param() {
  return {"policy", ParamType::kText, "fixed",
          "fixed | cost (depth, branch and nodes that maximise tokens/s for the measured forward cost; the method's "
          "own the largest)"};
}
inline RuntimePolicy tree_policy(const MethodContext& c, DraftBudget budget) {
  const auto& policy = c.config.text("policy");
  if (policy == "fixed") return RuntimePolicy(FixedLength(budget));
  if (policy == "cost") return cost_policy(c, budget, false);
  throw InvalidArgumentError(fmt::format("method {}: unknown policy '{}' (fixed, cost)", c.config.name, policy));
}
inline RuntimePolicy tree_policy(const MethodContext& c, std::int32_t depth, std::int32_t nodes,
                                 std::int32_t branch = 0) {
  return tree_policy(c, DraftBudget{depth, nodes, nodes, 0.0f, branch});
}

// rule=, which every speculative method takes.
MethodParam rule_param();

// hot=H of the methods that draft from a model or a feature head: the
// drafter's LM head over the H most frequent tokens (hot_lm_head.hpp,
// FR-Spec), ranked by <heads_dir>/token_frequencies.json. 0 = the whole
// vocabulary. Returns nullptr for 0.
MethodParam hot_param();
std::shared_ptr<const HotLmHead> hot_lm_head_for(const MethodContext& c, const at::Tensor& lm_head, DType dtype);

// Installs a draft model's hot LM head for a scope (the draft model is
// shared by the methods of a run; each installs its own while it decodes).
class HotLmHeadScope {
 public:
  HotLmHeadScope(LlamaModel& model, std::shared_ptr<const HotLmHead> head)
      : model_(model), previous_(model.hot_lm_head()) {
    model_.set_hot_lm_head(std::move(head));
  }
  ~HotLmHeadScope() { model_.set_hot_lm_head(previous_); }
  HotLmHeadScope(const HotLmHeadScope&) = delete;
  HotLmHeadScope& operator=(const HotLmHeadScope&) = delete;

 private:
  LlamaModel& model_;
  std::shared_ptr<const HotLmHead> previous_;
};

// draw= of the static-tree methods: how each node's children are drafted.
MethodParam draw_param();
ChildMode child_draw(const MethodConfig& c);

// The registered methods, one file each (src/torch/methods/<name>.cpp).
MethodInfo autoregressive_method();
MethodInfo chain_method();
MethodInfo tree_method();
MethodInfo dynamic_method();
MethodInfo sequoia_method();
MethodInfo ngram_method();
MethodInfo lyanna_method();
MethodInfo eagle_method();
MethodInfo duo_method();
MethodInfo sv_method();

// The acceptance rule of rule= (see methods.hpp), checked against the
// sampling and the method: whether it builds chains only (rule=block fits),
// and whether its drafter gives probabilities too (rule=speculative fits).
enum class RuleKind : std::uint8_t { kGreedy, kRecursiveRejection, kSpeculative, kBlock, kTraversal, kTypical };
struct RuleFit {
  bool chains = false;
  bool probs = false;
};
RuleKind rule_kind(const MethodConfig& c, const SamplingParams& sampling, RuleFit fit);

// Calls f(rule) with the chosen rule object. The chain-only rules are only
// instantiated where they fit (a chain builder; for SpeculativeSampling also a
// probability drafter), so nothing else compiles against them.
template <bool kChains, bool kProbs, class F>
AnyDecoder with_rule(const MethodContext& c, F&& f) {
  switch (rule_kind(c.config, c.sampling, RuleFit{kChains, kProbs})) {
    case RuleKind::kGreedy: return f(GreedyAcceptance{});
    case RuleKind::kRecursiveRejection: return f(RecursiveRejectionSampling{});
    case RuleKind::kTraversal: return f(TraversalVerification{});
    case RuleKind::kTypical: return f(TypicalAcceptance{});
    case RuleKind::kBlock:
      if constexpr (kChains) return f(BlockVerification{});
      break;
    case RuleKind::kSpeculative:
      if constexpr (kChains && kProbs) return f(SpeculativeSampling{});
      break;
  }
  throw InvalidArgumentError(fmt::format("method {}: rule={} does not fit it", c.config.name, c.config.text("rule")));
}

// One request of a batched run (engine/continuous_batch.hpp): its own
// drafter and policy, and the engine's Request over them.
template <class Engine, class Drafter, class Policy>
struct BatchSlot {
  template <class... DrafterArgs>
  BatchSlot(Policy p, std::int32_t seq, const GenerationOptions& o, DrafterArgs&&... args)
      : drafter(std::forward<DrafterArgs>(args)...), policy(std::move(p)), request(seq, drafter, policy, o) {}
  Drafter drafter;
  Policy policy;
  typename Engine::Request request;
};

// Runs the requests through `engine` in continuous batches; request i is
// sequence i of the models, its drafter made from drafter_args(i).
template <class Drafter, class Engine, class Policy, class DrafterArgs>
BatchRun run_batch(Engine& engine, std::span<const std::vector<TokenId>> prompts,
                   std::span<const GenerationOptions> options, std::size_t max_batch, const Policy& policy,
                   const ModelClock* draft_clock, DrafterArgs drafter_args) {
  using Slot = BatchSlot<Engine, Drafter, Policy>;
  return run_continuous_batch(engine, prompts, max_batch, [&](std::size_t i) {
    const auto seq = static_cast<std::int32_t>(i);
    auto slot = std::apply(
        [&](auto&&... args) { return std::make_unique<Slot>(policy, seq, options[i], std::forward<decltype(args)>(args)...); },
        drafter_args(seq));
    slot->request.set_draft_clock(draft_clock);
    return slot;
  });
}

// A batched request of a feature-head method: its own fork of the head (a
// cache of its own over the shared weights) and a drafter over it.
template <class Engine, class Drafter, class Policy>
struct HeadBatchSlot {
  template <class... DrafterArgs>
  HeadBatchSlot(const DraftHead& lead, Policy p, std::int32_t seq, const GenerationOptions& o, DrafterArgs&&... args)
      : head(lead.fork()),
        drafter(head, std::forward<DrafterArgs>(args)...),
        policy(std::move(p)),
        request(seq, drafter, policy, o) {}
  DraftHead head;
  Drafter drafter;
  Policy policy;
  typename Engine::Request request;
};

template <class Drafter, class Engine, class Policy, class... DrafterArgs>
BatchRun run_head_batch(Engine& engine, const DraftHead& head, std::span<const std::vector<TokenId>> prompts,
                        std::span<const GenerationOptions> options, std::size_t max_batch, const Policy& policy,
                        const DrafterArgs&... args) {
  using Slot = HeadBatchSlot<Engine, Drafter, Policy>;
  return run_continuous_batch(engine, prompts, max_batch, [&](std::size_t i) {
    return std::make_unique<Slot>(head, policy, static_cast<std::int32_t>(i), options[i], args...);
  });
}

// The decoder of a draft-model method with what it borrows.
template <class Builder, class Rule>
struct WithDraftModel {
  Timed target, draft;
  ModelVerifier<Timed> verifier;
  ModelDrafter<Timed> drafter;
  RuntimePolicy initial_policy;  // each batched request starts from it
  SpeculativeDecoder<ModelDrafter<Timed>, Builder, ModelVerifier<Timed>, Rule, RuntimePolicy> decoder;
  std::shared_ptr<const HotLmHead> hot;  // hot=H; installed on the shared draft model while this method decodes
  WithDraftModel(const MethodContext& c, Builder builder, Rule rule, RuntimePolicy policy)
      : target(c.target),
        draft(*c.draft),
        verifier(target),
        drafter(draft, 0),
        initial_policy(policy),
        decoder(drafter, std::move(builder), verifier, std::move(rule), std::move(policy)),
        hot(hot_lm_head_for(c, c.draft->lm_head(), c.draft->inference_dtype())) {
    decoder.set_model_clocks(&target.clock(), &draft.clock());
  }
  GenerationResult generate(std::span<const TokenId> p, const GenerationOptions& o, const TokenCallback& cb) {
    const HotLmHeadScope scope(draft.inner(), hot);
    return decoder.generate(p, o, cb);
  }
  void set_round_view_observer(std::function<void(const RoundView&)> f) {
    decoder.engine().set_round_view_observer(std::move(f));
  }
  BatchRun generate_batch(std::span<const std::vector<TokenId>> p, std::span<const GenerationOptions> o,
                          std::size_t max_batch) {
    const HotLmHeadScope scope(draft.inner(), hot);
    return run_batch<ModelDrafter<Timed>>(decoder.engine(), p, o, max_batch, initial_policy, &draft.clock(),
                                          [&](std::int32_t seq) { return std::tuple(std::ref(draft), seq); });
  }
};

template <class Builder>
AnyDecoder draft_model_method(const MethodContext& c, Builder builder, RuntimePolicy policy) {
  if (c.draft == nullptr) throw InvalidArgumentError(fmt::format("method {} needs a draft model (--draft)", c.config.name));
  constexpr bool kChain = requires { requires Builder::kBuildsChainsOnly; };
  return with_rule<kChain, true>(c, [&]<class Rule>(Rule rule) {
    return AnyDecoder::make<WithDraftModel<Builder, Rule>>(c.config.spec(), c, std::move(builder), std::move(rule),
                                                           std::move(policy));
  });
}

// Generates with a feature-head method and records the head's share: its
// layer and LM head time (the draft model time of such a method) and the
// commits' layer time.
template <class Decoder, class Drafter>
GenerationResult generate_with_head(Decoder& decoder, DraftHead& head, const Drafter& drafter,
                                    std::span<const TokenId> p, const GenerationOptions& o, const TokenCallback& cb) {
  head.reset_timers();
  const double commit0 = drafter.commit_seconds();
  auto r = decoder.generate(p, o, cb);
  r.stats.draft_layer_seconds = head.layer_seconds();
  r.stats.draft_head_seconds = head.head_seconds();
  r.stats.draft_model_seconds = head.layer_seconds() + head.head_seconds();
  r.stats.draft_commit_seconds = drafter.commit_seconds() - commit0;
  return r;
}

// head= or <heads_dir>/<method name>, checked to hold a head of `kind`.
DraftHead load_head(const MethodContext& c, HeadKind kind);

}  // namespace specdec::torch_backend::methods
