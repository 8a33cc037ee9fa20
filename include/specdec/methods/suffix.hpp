// suffix: SuffixDecoding (Oliaro et al., arXiv 2411.04975): drafts from
// suffix indexes over the request's prompt and output and over earlier
// requests' outputs, a tree whose size follows the match length; no model.
#pragma once

#include <memory>
#include <utility>

#include <fmt/format.h>

#include "specdec/draft/suffix_drafter.hpp"
#include "specdec/methods/method_parts.hpp"
#include "specdec/tree/suffix_tree_builder.hpp"

namespace specdec::methods {

template <class M, class Rule>
class SuffixParts {
 public:
  using Timed = TimedModel<M>;
  using Verifier = target_verifier_t<Timed>;
  using Engine = SpeculativeEngine<SuffixDrafter, SuffixTreeBuilder, Verifier, Rule, RuntimePolicy>;
  using Slot = RequestSlot<Engine, SuffixDrafter, RuntimePolicy>;

  SuffixParts(const MethodContext<M>& c, Rule rule)
      : target_(c.target),
        verifier_(TargetVerifier<Timed>::make(target_)),
        depth_(c.config.int32("depth")),
        speculation_{c.config.int32("tokens"), c.config.real("factor"),
                     static_cast<float>(c.config.real("min_prob")), c.config.text("shape") != "path"},
        cache_(depth_, c.config.int32("cached")),
        policy_(FixedLength(
            DraftBudget{speculation_.max_tokens, speculation_.max_tokens, speculation_.max_tokens})),
        engine_(SuffixTreeBuilder{}, verifier_, std::move(rule)) {
    if (const auto& shape = c.config.text("shape"); shape != "tree" && shape != "path")
      throw InvalidArgumentError(fmt::format("method suffix: shape must be tree or path, got '{}'", shape));
    speculation_.validate();
    if (depth_ <= speculation_.max_tokens)
      throw InvalidArgumentError(fmt::format("method suffix: depth ({}) must exceed tokens ({}): {}", depth_,
                                             speculation_.max_tokens,
                                             "a match of p tokens leaves depth - p levels for the draft"));
    engine_.set_target_clock(&target_.clock());
  }
  Engine& engine() { return engine_; }
  const SuffixCache& cache() const { return cache_; }
  std::unique_ptr<Slot> slot(std::int32_t seq, const GenerationOptions& options, TokenCallback on_token) {
    return std::make_unique<Slot>(
        std::monostate{},
        [&](std::monostate&) { return SuffixDrafter(target_.vocab_size(), &cache_, depth_, speculation_); },
        policy_, seq, options, std::move(on_token));
  }

 private:
  Timed target_;
  Verifier verifier_;
  std::int32_t depth_;
  SuffixSpeculation speculation_;
  SuffixCache cache_;
  RuntimePolicy policy_;
  Engine engine_;
};

template <class M>
MethodInfo<M> suffix_method() {
  std::vector<MethodParam> params = {
      {"tokens", ParamType::kInt, "16", "speculated tokens per round at most", true},
      {"factor", ParamType::kReal, "1.0", "at most factor x the match length (MAX_SPEC = alpha p)"},
      {"min_prob", ParamType::kReal, "0.1", "no draft whose estimated path probability is lower"},
      {"depth", ParamType::kInt, "32",
       "suffix index depth: the longest pattern and continuation (memory grows with it: docs/methods.md)"},
      {"cached", ParamType::kInt, "256", "earlier responses kept in the global index (-1: all, 0: none)"},
      {"shape", ParamType::kText, "tree", "tree | path (the single most likely continuation)"},
      rule_param()};
  return {"suffix",
          "SuffixDecoding: suffix indexes over this request and earlier outputs, no draft model",
          "2411.04975",
          MethodModels::kTargetOnly,
          false,
          std::move(params),
          [](const MethodContext<M>& c) {
            return with_rule<false, false>(c.config, c.sampling, [&]<class Rule>(Rule rule) {
              return AnyDecoder::make<SuffixParts<M, Rule>>(c.config.spec(), c, std::move(rule));
            });
          }};
}

}  // namespace specdec::methods
