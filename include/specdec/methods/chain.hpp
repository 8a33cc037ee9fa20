// chain: a draft model proposes a chain of k tokens (Leviathan et al., arXiv
// 2211.17192; Chen et al., arXiv 2302.01318): top-1 for a greedy request,
// drawn for a sampled one.
#pragma once

#include "specdec/methods/method_parts.hpp"
#include "specdec/tree/chain_builder.hpp"

namespace specdec::methods {

template <class M>
MethodInfo<M> chain_method(const MethodHooks<M>& hooks = {}) {
  std::vector<MethodParam> params = {
      {"k", ParamType::kInt, "4", "drafted tokens per round (the initial length with policy=heuristic)", true}};
  for (auto& p : chain_policy_params()) params.push_back(std::move(p));
  params = with_draft_params(std::move(params), hooks);
  params.push_back(rule_param());
  return {"chain", "draft model, a chain of k drafted tokens", "2211.17192, 2302.01318", MethodModels::kDraftModel,
          true, std::move(params),
          [](const MethodContext<M>& c) { return draft_model_method(c, ChainBuilder{}, chain_policy(c)); }};
}

}  // namespace specdec::methods
