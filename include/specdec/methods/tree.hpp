// tree: a draft model fills a static tree of Medusa-style choices
// (Medusa, arXiv 2401.10774 §2.1.2; SpecInfer, arXiv 2305.09781).
#pragma once

#include <string>

#include "specdec/methods/method_parts.hpp"
#include "specdec/tree/static_tree_builder.hpp"

namespace specdec::methods {

// The default static tree (12 nodes, depth 4): wide at depth 1, where a small
// draft is least sure, narrowing with depth (the shape Sequoia's DP gives for
// acceptance vectors like ours).
inline std::string default_tree_shape() { return "0;1;2;3;0.0;0.1;1.0;0.0.0;0.0.1;0.1.0;0.0.0.0;0.0.0.0.0"; }

template <class M>
MethodInfo<M> tree_method(const MethodHooks<M>& hooks = {}) {
  auto params = with_draft_params<M>(
      {{"shape", ParamType::kText, "", "Medusa choices, e.g. 0;1;0.0 (empty: the default 12-node tree)"}, draw_param(),
       tree_policy_param()},
      hooks);
  params.push_back(rule_param());
  return {"tree", "draft model, a static tree of top-k (or sampled) children", "2305.09781, 2401.10774",
          MethodModels::kDraftModel, false, std::move(params), [](const MethodContext<M>& c) {
            const auto& text = c.config.text("shape");
            auto shape = parse_tree_shape(text.empty() ? default_tree_shape() : text);
            const auto depth = shape.max_depth(), nodes = shape.size();
            return draft_model_method(c, StaticTreeBuilder{std::move(shape), child_draw(c.config)},
                                      tree_policy(c, depth, nodes));
          }};
}

}  // namespace specdec::methods
