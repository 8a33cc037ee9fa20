// sequoia: a draft model fills the tree Sequoia's dynamic program finds for a
// measured positional acceptance vector (arXiv 2402.12374 §3.1).
#include "specdec/tree/sequoia.hpp"
#include "specdec/tree/static_tree_builder.hpp"

#include "parts.hpp"

namespace specdec::torch_backend::methods {

MethodInfo sequoia_method() {
  return {"sequoia", "draft model, Sequoia's optimal static tree for measured acceptance", "2402.12374",
          MethodModels::kDraftModel, false,
          {{"p", ParamType::kReals, "", "positional acceptance p_1,p_2,... (`specdec sequoia` measures it)", true},
           {"total", ParamType::kInt, "16", "nodes of the tree", true},
           {"depth", ParamType::kInt, "4", "deepest level", true},
           draw_param(), tree_policy_param(), hot_param(), rule_param()},
          [](const MethodContext& c) {
            const auto p = c.config.reals("p");
            if (p.empty())
              throw InvalidArgumentError("method sequoia needs p=<positional acceptance vector> (specdec sequoia measures it)");
            auto shape = sequoia_shape(p, c.config.int32("total"), c.config.int32("depth"));
            const auto depth = shape.max_depth(), nodes = shape.size();
            return draft_model_method(c, StaticTreeBuilder{std::move(shape), child_draw(c.config)},
                                      tree_policy(c, depth, nodes));
          }};
}

}  // namespace specdec::torch_backend::methods
