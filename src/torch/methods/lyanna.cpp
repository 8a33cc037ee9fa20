// lyanna: Lyanna (Chen et al., arXiv 2602.21224): hidden-state chain head,
// token-info sampling, re-sampling and verification fusion, composed in the
// one round engine (engine/lyanna_decoder.hpp).
#include "specdec/engine/lyanna_decoder.hpp"

#include "parts.hpp"

namespace specdec::torch_backend::methods {
namespace {

// Carry is LyannaResampling, or NoCarryOver without re-sampling.
template <class Rule, class Carry>
struct WithLyanna {
  Timed target;
  DraftHead head;
  ModelVerifier<Timed> verifier;
  LyannaDrafter<DraftHead> drafter;
  SpeculativeDecoder<LyannaDrafter<DraftHead>, TokenInfoTreeBuilder, ModelVerifier<Timed>, Rule, RuntimePolicy,
                     SelectAll, Carry>
      decoder;
  WithLyanna(const MethodContext& c, DraftHead h, const LyannaOptions& o, Rule rule, Carry carry, RuntimePolicy policy)
      : target(c.target),
        head(std::move(h)),
        verifier(target),
        drafter(head),
        decoder(drafter, o.builder(), verifier, std::move(rule), policy, 0, SelectAll{}, std::move(carry)),
        initial_policy(policy) {
    decoder.set_model_clocks(&target.clock(), nullptr);
  }
  GenerationResult generate(std::span<const TokenId> p, const GenerationOptions& o, const TokenCallback& cb) {
    return generate_with_head(decoder, head, drafter, p, o, cb);
  }
  void set_round_view_observer(std::function<void(const RoundView&)> f) {
    decoder.engine().set_round_view_observer(std::move(f));
  }
  BatchRun generate_batch(std::span<const std::vector<TokenId>> p, std::span<const GenerationOptions> o,
                          std::size_t max_batch) {
    return run_head_batch<LyannaDrafter<DraftHead>>(decoder.engine(), head, p, o, max_batch, initial_policy);
  }
  RuntimePolicy initial_policy;
};

}  // namespace

MethodInfo lyanna_method() {
  return {"lyanna", "Lyanna: hidden-state chain head, token-info sampling, re-sampling, verification fusion",
          "2602.21224", MethodModels::kLyannaHead, false,
          {{"k", ParamType::kInt, "4", "branches: children per expanded node, nodes kept per level", true},
           {"depth", ParamType::kInt, "3", "N, chain steps per round", true},
           {"budget", ParamType::kInt, "12", "B, nodes of the fresh tree", true},
           {"resample", ParamType::kFlag, "1", "re-sample after a rejection (Algorithm 2): 0 or 1", true},
           {"fusion", ParamType::kFlag, "1", "verify a re-sampled tree with the next round's (§6.2): 0 or 1", true},
           {"r", ParamType::kInt, "0", "re-sample only if more than r rows remain", true},
           {"rbudget", ParamType::kInt, "4", "B', nodes of a re-sampled tree", true},
           {"head", ParamType::kText, "", "head directory (default: lyanna/ beside the target)"},
           tree_policy_param(), hot_param(), rule_param()},
          [](const MethodContext& c) {
            LyannaOptions o;
            o.depth = c.config.int32("depth");
            o.branch = c.config.int32("k");
            o.verify_budget = c.config.int32("budget");
            o.resample = c.config.flag("resample");
            o.fusion = c.config.flag("fusion");
            o.resample_threshold = c.config.int32("r");
            o.resample_budget = c.config.int32("rbudget");
            o.validate();
            auto head = load_head(c, HeadKind::kLyanna);
            auto policy = tree_policy(c, o.policy().budget());
            return with_rule<false, true>(c, [&]<class Rule>(Rule rule) {
              if (!o.resample)
                return AnyDecoder::make<WithLyanna<Rule, NoCarryOver>>(c.config.spec(), c, std::move(head), o,
                                                                       std::move(rule), NoCarryOver{}, std::move(policy));
              return AnyDecoder::make<WithLyanna<Rule, LyannaResampling>>(c.config.spec(), c, std::move(head), o,
                                                                          std::move(rule), o.resampling(),
                                                                          std::move(policy));
            });
          }};
}

}  // namespace specdec::torch_backend::methods
