// autoregressive: the baseline every method is measured against; the one
// round engine with nothing drafted (engine/autoregressive_decoder.hpp).
#pragma once

#include <memory>
#include <utility>

#include "specdec/engine/autoregressive_decoder.hpp"
#include "specdec/methods/method_parts.hpp"

namespace specdec::methods {

template <class M>
class AutoregressiveParts {
 public:
  using Timed = TimedModel<M>;
  using Verifier = target_verifier_t<Timed>;
  using Engine = SpeculativeEngine<NothingDrafted, ChainBuilder, Verifier, RecursiveRejectionSampling, NoDraftBudget>;
  using Slot = RequestSlot<Engine, NothingDrafted, NoDraftBudget>;

  explicit AutoregressiveParts(const MethodContext<M>& c)
      : target_(c.target),
        verifier_(TargetVerifier<Timed>::make(target_)),
        engine_(ChainBuilder{}, verifier_, RecursiveRejectionSampling{}) {
    engine_.set_target_clock(&target_.clock());
  }
  Engine& engine() { return engine_; }
  std::unique_ptr<Slot> slot(std::int32_t seq, const GenerationOptions& options, TokenCallback on_token) {
    return std::make_unique<Slot>(
        std::monostate{}, [&](std::monostate&) { return NothingDrafted{target_.vocab_size()}; }, NoDraftBudget{}, seq,
        options, std::move(on_token));
  }

 private:
  Timed target_;
  Verifier verifier_;
  Engine engine_;
};

template <class M>
MethodInfo<M> autoregressive_method() {
  return {"autoregressive", "the target alone, one token per forward (the baseline)", "", MethodModels::kTargetOnly,
          false, {}, [](const MethodContext<M>& c) { return AnyDecoder::make<AutoregressiveParts<M>>("autoregressive", c); }};
}

}  // namespace specdec::methods
