// chain: a draft model proposes a chain of k tokens (Leviathan et al., arXiv
// 2211.17192; Chen et al., arXiv 2302.01318).
#include "specdec/tree/chain_builder.hpp"

#include "parts.hpp"

namespace specdec::torch_backend::methods {

MethodInfo chain_method() {
  std::vector<MethodParam> params = {{"k", ParamType::kInt, "4", "drafted tokens per round (the initial length with policy=heuristic)", true}};
  for (auto& p : chain_policy_params()) params.push_back(std::move(p));
  params.push_back(hot_param());
  params.push_back(rule_param());
  return {"chain", "draft model, a chain of k drafted tokens", "2211.17192, 2302.01318", MethodModels::kDraftModel,
          true, std::move(params), [](const MethodContext& c) {
            return draft_model_method(c, ChainBuilder{}, chain_policy(c));  // top-1 or drawn, as each request samples
          }};
}

}  // namespace specdec::torch_backend::methods
