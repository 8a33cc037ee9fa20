// ngram: prompt lookup, drafting the continuation of the longest earlier
// n-gram match (Saxena 2023; Somasundaram et al., arXiv 2304.04487); no model.
#include "specdec/draft/ngram_drafter.hpp"
#include "specdec/tree/chain_builder.hpp"

#include "parts.hpp"

namespace specdec::torch_backend::methods {
namespace {

template <class Rule>
struct WithNgram {
  Timed target;
  ModelVerifier<Timed> verifier;
  NgramDrafter drafter;
  SpeculativeDecoder<NgramDrafter, ChainBuilder, ModelVerifier<Timed>, Rule, RuntimePolicy> decoder;
  RuntimePolicy initial_policy;
  std::int32_t min_n, max_n;
  WithNgram(const MethodContext& c, Rule rule)
      : target(c.target),
        verifier(target),
        drafter(c.target.vocab_size(), c.config.int32("min"), c.config.int32("max")),
        decoder(drafter, ChainBuilder{ChainBuilder::Pick::kTop1}, verifier, std::move(rule), chain_policy(c)),
        initial_policy(chain_policy(c)),
        min_n(c.config.int32("min")),
        max_n(c.config.int32("max")) {
    decoder.set_model_clocks(&target.clock(), nullptr);
  }
  GenerationResult generate(std::span<const TokenId> p, const GenerationOptions& o, const TokenCallback& cb) {
    return decoder.generate(p, o, cb);
  }
  void set_round_view_observer(std::function<void(const RoundView&)> f) {
    decoder.engine().set_round_view_observer(std::move(f));
  }
  BatchRun generate_batch(std::span<const std::vector<TokenId>> p, std::span<const GenerationOptions> o,
                          std::size_t max_batch) {
    return run_batch<NgramDrafter>(decoder.engine(), p, o, max_batch, initial_policy, nullptr, [&](std::int32_t) {
      return std::tuple(target.vocab_size(), min_n, max_n);
    });
  }
};

}  // namespace

MethodInfo ngram_method() {
  std::vector<MethodParam> params = {{"k", ParamType::kInt, "4", "drafted tokens per round", true},
                                     {"min", ParamType::kInt, "1", "shortest n-gram matched", true},
                                     {"max", ParamType::kInt, "3", "longest n-gram matched", true}};
  for (auto& p : chain_policy_params()) params.push_back(std::move(p));
  params.push_back(rule_param());
  // One-hot guesses, not probabilities: rule=speculative does not fit.
  return {"ngram", "prompt lookup: the continuation of an earlier n-gram, no draft model", "2304.04487",
          MethodModels::kTargetOnly, true, std::move(params), [](const MethodContext& c) {
            return with_rule<true, false>(c, [&]<class Rule>(Rule rule) {
              return AnyDecoder::make<WithNgram<Rule>>(c.config.spec(), c, std::move(rule));
            });
          }};
}

}  // namespace specdec::torch_backend::methods
