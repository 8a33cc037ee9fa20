// sequoia: a draft model fills the tree Sequoia's dynamic program finds for a
// measured positional acceptance vector (arXiv 2402.12374 §3.1).
#pragma once

#include "specdec/methods/method_parts.hpp"
#include "specdec/tree/sequoia.hpp"
#include "specdec/tree/static_tree_builder.hpp"

namespace specdec::methods {

template <class M>
MethodInfo<M> sequoia_method(const MethodHooks<M>& hooks = {}) {
  auto params = with_draft_params<M>(
      {{"p", ParamType::kReals, "", "positional acceptance p_1,p_2,... (`specdec sequoia` measures it)", true},
       {"total", ParamType::kInt, "16", "nodes of the tree", true},
       {"depth", ParamType::kInt, "4", "deepest level", true},
       draw_param(), tree_policy_param()},
      hooks);
  params.push_back(rule_param());
  return {"sequoia", "draft model, Sequoia's optimal static tree for measured acceptance", "2402.12374",
          MethodModels::kDraftModel, false, std::move(params), [](const MethodContext<M>& c) {
            const auto p = c.config.reals("p");
            if (p.empty())
              throw InvalidArgumentError(
                  "method sequoia needs p=<positional acceptance vector> (specdec sequoia measures it)");
            auto shape = sequoia_shape(p, c.config.int32("total"), c.config.int32("depth"));
            const auto depth = shape.max_depth(), nodes = shape.size();
            return draft_model_method(c, StaticTreeBuilder{std::move(shape), child_draw(c.config)},
                                      tree_policy(c, depth, nodes));
          }};
}

}  // namespace specdec::methods
