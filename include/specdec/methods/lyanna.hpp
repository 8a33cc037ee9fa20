// lyanna: Lyanna (Chen et al., arXiv 2602.21224): hidden-state chain head,
// token-info sampling, re-sampling and verification fusion, composed in the
// one round engine (engine/lyanna_decoder.hpp). The backend loads the head.
#pragma once

#include "specdec/draft/lyanna_drafter.hpp"
#include "specdec/engine/lyanna_decoder.hpp"
#include "specdec/methods/feature_head_parts.hpp"

namespace specdec::methods {

template <class M, class Head>
MethodInfo<M> lyanna_method(HeadLoader<M, Head> load_head, const MethodHooks<M>& hooks = {}) {
  auto params = with_draft_params<M>(
      {{"k", ParamType::kInt, "4", "branches: children per expanded node, nodes kept per level", true},
       {"depth", ParamType::kInt, "3", "N, chain steps per round", true},
       {"budget", ParamType::kInt, "12", "B, nodes of the fresh tree", true},
       {"resample", ParamType::kFlag, "1", "re-sample after a rejection (Algorithm 2): 0 or 1", true},
       {"fusion", ParamType::kFlag, "1", "verify a re-sampled tree with the next round's (§6.2): 0 or 1", true},
       {"r", ParamType::kInt, "0", "re-sample only if more than r rows remain", true},
       {"rbudget", ParamType::kInt, "4", "B', nodes of a re-sampled tree", true},
       {"head", ParamType::kText, "", "head directory (default: lyanna/ beside the target)"},
       tree_policy_param()},
      hooks);
  params.push_back(rule_param());
  return {"lyanna", "Lyanna: hidden-state chain head, token-info sampling, re-sampling, verification fusion",
          "2602.21224", MethodModels::kLyannaHead, false, std::move(params),
          [load_head = std::move(load_head)](const MethodContext<M>& c) {
            LyannaOptions o;
            o.depth = c.config.int32("depth");
            o.branch = c.config.int32("k");
            o.verify_budget = c.config.int32("budget");
            o.resample = c.config.flag("resample");
            o.fusion = c.config.flag("fusion");
            o.resample_threshold = c.config.int32("r");
            o.resample_budget = c.config.int32("rbudget");
            o.validate();
            auto head = load_head(c);
            auto policy = tree_policy(c, o.policy().budget());
            return with_rule<false, true>(c.config, c.sampling, [&]<class Rule>(Rule rule) {
              using Drafter = LyannaDrafter<Head>;
              if (!o.resample)
                return AnyDecoder::make<FeatureHeadParts<M, Head, Drafter, TokenInfoTreeBuilder, Rule, NoCarryOver>>(
                    c.config.spec(), c, std::move(head), o.builder(), std::move(rule), NoCarryOver{}, std::move(policy));
              return AnyDecoder::make<FeatureHeadParts<M, Head, Drafter, TokenInfoTreeBuilder, Rule, LyannaResampling>>(
                  c.config.spec(), c, std::move(head), o.builder(), std::move(rule), o.resampling(), std::move(policy));
            });
          }};
}

}  // namespace specdec::methods
