// dynamic: a draft model grows an EAGLE-2 dynamic tree (arXiv 2406.16858).
#pragma once

#include "specdec/methods/method_parts.hpp"
#include "specdec/tree/dynamic_tree_builder.hpp"

namespace specdec::methods {

template <class M>
MethodInfo<M> dynamic_method(const MethodHooks<M>& hooks = {}) {
  auto params = with_draft_params<M>(
      {{"top_k", ParamType::kInt, "4", "children per expanded node, nodes expanded per level", true},
       {"depth", ParamType::kInt, "4", "levels", true},
       {"total", ParamType::kInt, "16", "nodes sent to the target", true},
       tree_policy_param()},
      hooks);
  params.push_back(rule_param());
  return {"dynamic", "draft model, EAGLE-2 dynamic tree (expand the best, rerank)", "2406.16858",
          MethodModels::kDraftModel, false, std::move(params), [](const MethodContext<M>& c) {
            const auto top_k = c.config.int32("top_k"), depth = c.config.int32("depth"),
                       total = c.config.int32("total");
            return draft_model_method(c, DynamicTreeBuilder{top_k, depth, total}, tree_policy(c, depth, total, top_k));
          }};
}

}  // namespace specdec::methods
