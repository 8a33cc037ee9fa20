// tli: token-level intersection (Timor et al., ICML 2025, arXiv 2502.05202,
// §3.3): a draft model with another vocabulary drafts a chain of k tokens
// from the tokens both vocabularies share, its rows restricted and
// renormalized there (draft/intersection_drafter.hpp). IntersectionDrafter
// drafts trees too, under any builder (tests/statistical: dynamic trees);
// the registry offers the chain, the shape that paid on this CPU.
#pragma once

#include "specdec/draft/intersection_drafter.hpp"
#include "specdec/methods/cross_vocabulary_parts.hpp"
#include "specdec/tree/chain_builder.hpp"

namespace specdec::methods {

template <class M>
MethodInfo<M> tli_method() {
  std::vector<MethodParam> params = {{"k", ParamType::kInt, "4", "drafted tokens per round", true}};
  for (auto& p : chain_policy_params()) params.push_back(std::move(p));
  for (auto& p : other_vocabulary_params()) params.push_back(std::move(p));
  params.push_back(rule_param());
  return {"tli",
          "a draft with another vocabulary, drafting a chain from the tokens both share",
          "2502.05202",
          MethodModels::kOtherVocabularyDraft,
          true,
          std::move(params),
          [](const MethodContext<M>& c) {
            return with_rule<true, true>(c.config, c.sampling, [&]<class Rule>(Rule rule) {
              using Parts = OtherVocabularyParts<M, IntersectionDrafter, ChainBuilder, Rule>;
              return AnyDecoder::make<Parts>(c.config.spec(), c, load_other_vocabulary_draft(c),
                                             ChainBuilder{}, std::move(rule), chain_policy(c));
            });
          }};
}

}  // namespace specdec::methods
