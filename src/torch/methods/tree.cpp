// tree: a draft model fills a static tree of Medusa-style choices
// (Medusa, arXiv 2401.10774 §2.1.2; SpecInfer, arXiv 2305.09781).
#include "specdec/tree/static_tree_builder.hpp"

#include "parts.hpp"

namespace specdec::torch_backend::methods {

MethodInfo tree_method() {
  return {"tree", "draft model, a static tree of top-k (or sampled) children", "2305.09781, 2401.10774", MethodModels::kDraftModel,
          false,
          {{"shape", ParamType::kText, "", "Medusa choices, e.g. 0;1;0.0 (empty: the default 12-node tree)"},
           draw_param(), tree_policy_param(), hot_param(), rule_param()},
          [](const MethodContext& c) {
            const auto& text = c.config.text("shape");
            auto shape = parse_tree_shape(text.empty() ? default_tree_shape() : text);
            const auto depth = shape.max_depth(), nodes = shape.size();
            return draft_model_method(c, StaticTreeBuilder{std::move(shape), child_draw(c.config)},
                                      tree_policy(c, depth, nodes));
          }};
}

}  // namespace specdec::torch_backend::methods
