// dynamic: a draft model grows an EAGLE-2 dynamic tree (arXiv 2406.16858).
#include "specdec/tree/dynamic_tree_builder.hpp"

#include "parts.hpp"

namespace specdec::torch_backend::methods {

MethodInfo dynamic_method() {
  return {"dynamic", "draft model, EAGLE-2 dynamic tree (expand the best, rerank)", "2406.16858",
          MethodModels::kDraftModel, false,
          {{"top_k", ParamType::kInt, "4", "children per expanded node, nodes expanded per level", true},
           {"depth", ParamType::kInt, "4", "levels", true},
           {"total", ParamType::kInt, "16", "nodes sent to the target", true},
           tree_policy_param(), hot_param(), rule_param()},
          [](const MethodContext& c) {
            const auto top_k = c.config.int32("top_k"), depth = c.config.int32("depth"),
                       total = c.config.int32("total");
            return draft_model_method(c, DynamicTreeBuilder{top_k, depth, total}, tree_policy(c, depth, total, top_k));
          }};
}

}  // namespace specdec::torch_backend::methods
