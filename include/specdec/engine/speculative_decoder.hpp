// The speculative decoder: one sequence through the one round engine
// (engine/speculative_engine.hpp), generate() a loop over its step.
//
// The components are borrowed (drafter, verifier: they hold models and
// caches) or owned (builder, rule, policy, selector: small value types); the
// policy keeps what it learned from one generate() to the next.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <utility>

#include "specdec/engine/speculative_engine.hpp"

namespace specdec {

template <Drafter D, class B, Verifier V, AcceptanceRule R, LengthPolicy P, class S = SelectAll,
          class C = NoCarryOver>
class SpeculativeDecoder {
 public:
  using Engine = SpeculativeEngine<D, B, V, R, P, S, C>;

  SpeculativeDecoder(D& drafter, B builder, V& verifier, R rule, P policy, std::int32_t seq = 0, S selector = {},
                     C carry = {})
      : drafter_(&drafter),
        engine_(std::move(builder), verifier, std::move(rule), std::move(selector), std::move(carry)),
        policy_(std::move(policy)),
        seq_(seq) {}

  // Optional clocks of TimedModel-wrapped target and draft models: with them
  // Stats splits model time from library overhead.
  void set_model_clocks(const ModelClock* target, const ModelClock* draft) {
    engine_.set_target_clock(target);
    draft_clock_ = draft;
  }
  void set_round_observer(std::function<void(const DraftTree&, const VerifyResult&)> observer) {
    engine_.set_round_observer(std::move(observer));
  }

  Engine& engine() { return engine_; }
  B& builder() { return engine_.builder(); }
  R& rule() { return engine_.rule(); }
  P& policy() { return policy_; }

  GenerationResult generate(std::span<const TokenId> prompt, const GenerationOptions& options,
                            const TokenCallback& on_token = {}) {
    typename Engine::Request request(seq_, *drafter_, policy_, options, on_token);
    request.set_draft_clock(draft_clock_);
    engine_.begin(request, prompt);
    while (!request.done()) engine_.step(request);
    return request.take_result();
  }

 private:
  D* drafter_;
  Engine engine_;
  P policy_;
  std::int32_t seq_;
  const ModelClock* draft_clock_ = nullptr;
};

}  // namespace specdec
