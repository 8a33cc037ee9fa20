// magicdec: self-speculation through a sparse KV cache (Chen et al.,
// "MagicDec", arXiv 2408.11049, §4.1; the baseline of SPIRe, arXiv
// 2504.06419, §4): the target drafts a chain of k tokens for itself, as a
// second sequence whose cache keeps an attention sink and a sliding window
// (StreamingLLM, arXiv 2309.17453), and verifies it with its dense cache.
// A draft step reads the weights and sink + window keys and values, not the
// whole context's: at large batch and long context, where reading the KV
// cache dominates a step, drafting is cheap and the drafts are the target's
// own.
#pragma once

#include <utility>
#include <vector>

#include <fmt/format.h>

#include "specdec/methods/method_parts.hpp"
#include "specdec/tree/chain_builder.hpp"

namespace specdec::methods {

// positions=: how the draft's cache rotates keys (CachePolicy::Positions).
inline CachePolicy::Positions cache_positions(const MethodConfig& c) {
  const auto& p = c.text("positions");
  if (p == "cache") return CachePolicy::Positions::kCache;
  if (p == "text") return CachePolicy::Positions::kText;
  throw InvalidArgumentError(fmt::format("method {}: unknown positions '{}' (cache, text)", c.name, p));
}

template <class M>
MethodInfo<M> magicdec_method() {
  std::vector<MethodParam> params = {
      {"k", ParamType::kInt, "4", "drafted tokens per round (the initial length with policy=heuristic)", true},
      {"sink", ParamType::kInt, "1", "tokens of the draft's attention sink (SPIRe's baseline: 1)", true},
      {"window", ParamType::kInt, "64", "committed tokens the draft's window keeps (SPIRe's baseline: 64)", true},
      {"positions", ParamType::kText, "cache",
       "cache (the draft rotates by positions within its cache, as StreamingLLM and MagicDec) | text"}};
  for (auto& p : chain_policy_params()) params.push_back(std::move(p));
  params.push_back(rule_param());
  return {"magicdec", "the target drafts a chain of k for itself through a sink + window KV cache",
          "2408.11049, 2309.17453", MethodModels::kSelfDraft, true, std::move(params),
          [](const MethodContext<M>& c) {
            const auto sink = c.config.int32("sink"), window = c.config.int32("window");
            if (sink < 0 || window < 1)
              throw InvalidArgumentError(fmt::format("method {}: sink={} must be >= 0 and window={} >= 1",
                                                     c.config.name, sink, window));
            const SelfDraft self{true, CachePolicy::sink_window(sink, window, cache_positions(c.config))};
            return draft_model_method(c, ChainBuilder{}, chain_policy(c), self);
          }};
}

}  // namespace specdec::methods
