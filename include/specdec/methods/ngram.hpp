// ngram: prompt lookup, drafting the continuation of the longest earlier
// n-gram match (Saxena 2023; Somasundaram et al., arXiv 2304.04487); no model.
#pragma once

#include <memory>
#include <utility>

#include "specdec/draft/ngram_drafter.hpp"
#include "specdec/methods/method_parts.hpp"
#include "specdec/tree/chain_builder.hpp"

namespace specdec::methods {

template <class M, class Rule>
class NgramParts {
 public:
  using Timed = TimedModel<M>;
  using Verifier = target_verifier_t<Timed>;
  using Engine = SpeculativeEngine<NgramDrafter, ChainBuilder, Verifier, Rule, RuntimePolicy>;
  using Slot = RequestSlot<Engine, NgramDrafter, RuntimePolicy>;

  NgramParts(const MethodContext<M>& c, Rule rule)
      : target_(c.target),
        verifier_(TargetVerifier<Timed>::make(target_)),
        policy_(chain_policy(c)),
        // one-hot guesses: the chain is the guess, whatever the request samples
        engine_(ChainBuilder{ChainBuilder::Pick::kTop1}, verifier_, std::move(rule)),
        min_n_(c.config.int32("min")),
        max_n_(c.config.int32("max")) {
    engine_.set_target_clock(&target_.clock());
  }
  Engine& engine() { return engine_; }
  std::unique_ptr<Slot> slot(std::int32_t seq, const GenerationOptions& options, TokenCallback on_token) {
    return std::make_unique<Slot>(
        std::monostate{}, [&](std::monostate&) { return NgramDrafter(target_.vocab_size(), min_n_, max_n_); }, policy_,
        seq, options, std::move(on_token));
  }

 private:
  Timed target_;
  Verifier verifier_;
  RuntimePolicy policy_;
  Engine engine_;
  std::int32_t min_n_, max_n_;
};

template <class M>
MethodInfo<M> ngram_method() {
  std::vector<MethodParam> params = {{"k", ParamType::kInt, "4", "drafted tokens per round", true},
                                     {"min", ParamType::kInt, "1", "shortest n-gram matched", true},
                                     {"max", ParamType::kInt, "3", "longest n-gram matched", true}};
  for (auto& p : chain_policy_params()) params.push_back(std::move(p));
  params.push_back(rule_param());
  // One-hot guesses, not probabilities: rule=speculative does not fit.
  return {"ngram", "prompt lookup: the continuation of an earlier n-gram, no draft model", "2304.04487",
          MethodModels::kTargetOnly, true, std::move(params), [](const MethodContext<M>& c) {
            return with_rule<true, false>(c.config, c.sampling, [&]<class Rule>(Rule rule) {
              return AnyDecoder::make<NgramParts<M, Rule>>(c.config.spec(), c, std::move(rule));
            });
          }};
}

}  // namespace specdec::methods
