// The parts of a method that drafts with a feature head (Lyanna, EAGLE): the
// head the backend loaded (MethodHooks has no type for it, so each such
// recipe takes the backend's loader), forked for every request (a cache of
// its own over the shared weights), and the target's hidden states handed to
// it by the verifier.
#pragma once

#include <functional>
#include <memory>
#include <utility>

#include "specdec/draft/feature_head.hpp"
#include "specdec/methods/method_parts.hpp"
#include "specdec/select/select_all.hpp"

namespace specdec::methods {

// Loads the head a method's config names (head=, or its default under the
// context's dir), ready to draft for the context's target.
template <class M, class Head>
using HeadLoader = std::function<Head(const MethodContext<M>&)>;

template <class M, class Head, class Drafter, class Builder, class Rule, class Carry>
class FeatureHeadParts {
 public:
  using Timed = TimedModel<M>;
  using Engine = SpeculativeEngine<Drafter, Builder, ModelVerifier<Timed>, Rule, RuntimePolicy, SelectAll, Carry>;
  using Slot = RequestSlot<Engine, Drafter, RuntimePolicy, Head>;

  FeatureHeadParts(const MethodContext<M>& c, Head head, Builder builder, Rule rule, Carry carry, RuntimePolicy policy)
      : target_(c.target),
        head_(std::move(head)),
        verifier_(target_),
        policy_(std::move(policy)),
        engine_(std::move(builder), verifier_, std::move(rule), SelectAll{}, std::move(carry)) {
    engine_.set_target_clock(&target_.clock());
    const auto [first, count] = feature_layers_of(head_);  // EAGLE-3 reads several target layers
    verifier_.set_feature_layers(first, count);
  }

  Engine& engine() { return engine_; }
  std::unique_ptr<Slot> slot(std::int32_t seq, const GenerationOptions& options, TokenCallback on_token) {
    return std::make_unique<Slot>(
        head_.fork(), [](Head& h) { return Drafter(h); }, policy_, seq, options, std::move(on_token));
  }
  // The head's share of the request: its layer and LM head time (the draft
  // model time of such a method) and the commits' layer time.
  void finish(Slot& s, GenerationResult& r) {
    if constexpr (requires { s.owned.layer_seconds() + s.owned.head_seconds(); }) {
      r.stats.draft_layer_seconds = s.owned.layer_seconds();
      r.stats.draft_head_seconds = s.owned.head_seconds();
      r.stats.draft_model_seconds = s.owned.layer_seconds() + s.owned.head_seconds();
    }
    if constexpr (requires { s.drafter.commit_seconds(); }) r.stats.draft_commit_seconds = s.drafter.commit_seconds();
  }

 private:
  Timed target_;
  Head head_;  // the loaded head; requests draft with forks of it
  ModelVerifier<Timed> verifier_;
  RuntimePolicy policy_;  // each request starts from a copy
  Engine engine_;
};

}  // namespace specdec::methods
