// slem: string-level exact match (Timor et al., ICML 2025, arXiv 2502.05202,
// §3.1): a draft model with another vocabulary writes text, the target's
// tokenizer re-spells it, and the target's tokens are verified as one-hot
// guesses (draft/string_match_drafter.hpp).
#pragma once

#include "specdec/draft/string_match_drafter.hpp"
#include "specdec/methods/cross_vocabulary_parts.hpp"
#include "specdec/tree/chain_builder.hpp"

namespace specdec::methods {

template <class M>
MethodInfo<M> slem_method() {
  std::vector<MethodParam> params = {{"k", ParamType::kInt, "4", "target tokens proposed per round", true}};
  for (auto& p : chain_policy_params()) params.push_back(std::move(p));
  params.push_back(
      {"hold", ParamType::kFlag, "0",
       "1: hold back the last target token of the draft text until the next draft token (0: propose it, "
       "as the paper's implementation does)"});
  for (auto& p : other_vocabulary_params()) params.push_back(std::move(p));
  params.push_back(rule_param());
  MethodInfo<M> info{"slem",
                     "a draft with another vocabulary: its text re-tokenized for the target, exact match",
                     "2502.05202",
                     MethodModels::kOtherVocabularyDraft,
                     true,
                     std::move(params),
                     [](const MethodContext<M>& c) {
                       return with_rule<true, false>(c.config, c.sampling, [&]<class Rule>(Rule rule) {
                         using Parts = OtherVocabularyParts<M, StringMatchDrafter, ChainBuilder, Rule>;
                         // One-hot guesses: the chain is the guess, whatever the request samples.
                         return AnyDecoder::make<Parts>(c.config.spec(), c, load_other_vocabulary_draft(c),
                                                        ChainBuilder{ChainBuilder::Pick::kTop1},
                                                        std::move(rule), chain_policy(c),
                                                        c.config.flag("hold"));
                       });
                     }};
  info.one_hot_drafts = true;
  return info;
}

}  // namespace specdec::methods
