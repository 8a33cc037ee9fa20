// tli: token-level intersection (Timor et al., ICML 2025, arXiv 2502.05202,
// §3.3): a draft model with another vocabulary drafts from the tokens both
// vocabularies share, its rows restricted and renormalized there
// (draft/intersection_drafter.hpp); a chain, or an EAGLE-2 dynamic tree.
#pragma once

#include "specdec/draft/intersection_drafter.hpp"
#include "specdec/methods/cross_vocabulary_parts.hpp"
#include "specdec/tree/chain_builder.hpp"
#include "specdec/tree/dynamic_tree_builder.hpp"

namespace specdec::methods {

template <class M>
MethodInfo<M> tli_method() {
  std::vector<MethodParam> params = {
      {"shape", ParamType::kText, "chain", "chain (k tokens) | dynamic (EAGLE-2 tree of top_k, depth, total)"},
      {"k", ParamType::kInt, "4", "chain: drafted tokens per round", true},
      {"top_k", ParamType::kInt, "4", "dynamic: children per expanded node, nodes expanded per level"},
      {"depth", ParamType::kInt, "4", "dynamic: levels"},
      {"total", ParamType::kInt, "16", "dynamic: nodes sent to the target"}};
  for (auto& p : chain_policy_params()) params.push_back(std::move(p));
  for (auto& p : other_vocabulary_params()) params.push_back(std::move(p));
  params.push_back(rule_param());
  return {"tli", "a draft with another vocabulary, drafting from the tokens both share", "2502.05202",
          MethodModels::kOtherVocabularyDraft, false, std::move(params), [](const MethodContext<M>& c) {
            const auto& shape = c.config.text("shape");
            if (shape == "chain")
              return with_rule<true, true>(c.config, c.sampling, [&]<class Rule>(Rule rule) {
                using Parts = OtherVocabularyParts<M, IntersectionDrafter, ChainBuilder, Rule>;
                return AnyDecoder::make<Parts>(c.config.spec(), c, load_other_vocabulary_draft(c), ChainBuilder{},
                                               std::move(rule), chain_policy(c));
              });
            if (shape == "dynamic") {
              const auto top_k = c.config.int32("top_k"), depth = c.config.int32("depth"),
                         total = c.config.int32("total");
              if (c.config.text("policy") != "fixed")
                throw InvalidArgumentError("method tli: shape=dynamic takes policy=fixed only");
              return with_rule<false, true>(c.config, c.sampling, [&]<class Rule>(Rule rule) {
                using Parts = OtherVocabularyParts<M, IntersectionDrafter, DynamicTreeBuilder, Rule>;
                return AnyDecoder::make<Parts>(c.config.spec(), c, load_other_vocabulary_draft(c),
                                               DynamicTreeBuilder{top_k, depth, total}, std::move(rule),
                                               RuntimePolicy(FixedLength(DraftBudget{depth, total, total, 0.0f, top_k})));
              });
            }
            throw InvalidArgumentError(fmt::format("method tli: unknown shape '{}' (chain, dynamic)", shape));
          }};
}

}  // namespace specdec::methods
