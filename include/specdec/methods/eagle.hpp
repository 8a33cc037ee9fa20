// eagle: an EAGLE-style feature head (Li et al., arXiv 2401.15077) drafting
// an EAGLE-2 dynamic tree (arXiv 2406.16858), the baseline Lyanna compares
// to. The backend loads the head.
#pragma once

#include <string>
#include <utility>

#include <fmt/format.h>

#include "specdec/carry/no_carry_over.hpp"
#include "specdec/draft/eagle_head_drafter.hpp"
#include "specdec/methods/feature_head_parts.hpp"
#include "specdec/tree/dynamic_tree_builder.hpp"

namespace specdec::methods {

// The EAGLE-family recipe: a head loaded by the backend, its drafter, an
// EAGLE-2 dynamic tree. `eagle` and `eagle3` (eagle3.hpp) differ in the head.
template <class M, class Head>
MethodInfo<M> eagle_family_method(std::string name, std::string description, std::string papers,
                                  HeadLoader<M, Head> load_head, const MethodHooks<M>& hooks) {
  auto params = with_draft_params<M>(
      {{"top_k", ParamType::kInt, "4", "children per expanded node, nodes expanded per level", true},
       {"depth", ParamType::kInt, "3", "levels", true},
       {"total", ParamType::kInt, "12", "nodes sent to the target", true},
       {"head", ParamType::kText, "", fmt::format("head directory (default: {}/ beside the target)", name)},
       tree_policy_param()},
      hooks);
  params.push_back(rule_param());
  return {std::move(name),
          std::move(description),
          std::move(papers),
          MethodModels::kEagleHead,
          false,
          std::move(params),
          [load_head = std::move(load_head)](const MethodContext<M>& c) {
            const auto top_k = c.config.int32("top_k"), depth = c.config.int32("depth"),
                       total = c.config.int32("total");
            auto head = load_head(c);
            auto policy = tree_policy(c, depth, total, top_k);
            return with_rule<false, true>(c.config, c.sampling, [&]<class Rule>(Rule rule) {
              using Drafter = EagleHeadDrafter<Head>;
              return AnyDecoder::make<FeatureHeadParts<M, Head, Drafter, DynamicTreeBuilder, Rule, NoCarryOver>>(
                  c.config.spec(), c, std::move(head), DynamicTreeBuilder{top_k, depth, total}, std::move(rule),
                  NoCarryOver{}, std::move(policy));
            });
          }};
}

template <class M, class Head>
MethodInfo<M> eagle_method(HeadLoader<M, Head> load_head, const MethodHooks<M>& hooks = {}) {
  return eagle_family_method<M, Head>("eagle", "EAGLE-style feature head, EAGLE-2 dynamic tree",
                                      "2401.15077, 2406.16858", std::move(load_head), hooks);
}

}  // namespace specdec::methods
