// eagle: an EAGLE-style feature head (Li et al., arXiv 2401.15077) drafting
// an EAGLE-2 dynamic tree (arXiv 2406.16858), the baseline Lyanna compares to.
#include "specdec/draft/eagle_head_drafter.hpp"
#include "specdec/tree/dynamic_tree_builder.hpp"

#include "parts.hpp"

namespace specdec::torch_backend::methods {
namespace {

template <class Rule>
struct WithEagleHead {
  Timed target;
  DraftHead head;
  ModelVerifier<Timed> verifier;
  EagleHeadDrafter<DraftHead> drafter;
  SpeculativeDecoder<EagleHeadDrafter<DraftHead>, DynamicTreeBuilder, ModelVerifier<Timed>, Rule, RuntimePolicy> decoder;
  WithEagleHead(const MethodContext& c, DraftHead h, Rule rule, RuntimePolicy policy)
      : target(c.target),
        head(std::move(h)),
        verifier(target),
        drafter(head),
        decoder(drafter,
                DynamicTreeBuilder{c.config.int32("top_k"), c.config.int32("depth"), c.config.int32("total")},
                verifier, std::move(rule), policy),
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
    return run_head_batch<EagleHeadDrafter<DraftHead>>(decoder.engine(), head, p, o, max_batch, initial_policy);
  }
  RuntimePolicy initial_policy;
};

}  // namespace

MethodInfo eagle_method() {
  return {"eagle", "EAGLE-style feature head, EAGLE-2 dynamic tree", "2401.15077, 2406.16858",
          MethodModels::kEagleHead, false,
          {{"top_k", ParamType::kInt, "4", "children per expanded node, nodes expanded per level", true},
           {"depth", ParamType::kInt, "3", "levels", true},
           {"total", ParamType::kInt, "12", "nodes sent to the target", true},
           {"head", ParamType::kText, "", "head directory (default: eagle/ beside the target)"},
           tree_policy_param(), hot_param(), rule_param()},
          [](const MethodContext& c) {
            auto head = load_head(c, HeadKind::kEagle);
            auto policy = tree_policy(c, c.config.int32("depth"), c.config.int32("total"), c.config.int32("top_k"));
            return with_rule<false, true>(c, [&]<class Rule>(Rule rule) {
              return AnyDecoder::make<WithEagleHead<Rule>>(c.config.spec(), c, std::move(head), std::move(rule),
                                                           std::move(policy));
            });
          }};
}

}  // namespace specdec::torch_backend::methods
