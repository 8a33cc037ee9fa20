// rule=, which every speculative method of the registry takes: the acceptance
// rule chosen by name, checked against the method and the sampling, and
// handed to the method's recipe as an object.
//   auto          greedy at temperature 0, recursive rejection sampling otherwise
//   greedy        the target's argmax (temperature 0 only)
//   rrs           recursive rejection sampling (SpecInfer), lossless at any temperature
//   speculative   speculative sampling (Leviathan et al.), lossless; chains a model drafts
//   block         block verification (Sun et al.), lossless; chains
//   traversal     traversal verification, lossless; chains and trees
//   typical       Medusa's typical acceptance: LOSSY, labelled so in every output
#pragma once

#include <cstdint>
#include <string>

#include <fmt/format.h>

#include "specdec/accept/runtime_rule.hpp"
#include "specdec/core/error.hpp"
#include "specdec/core/sampling_params.hpp"
#include "specdec/engine/any_decoder.hpp"
#include "specdec/methods/method_config.hpp"

namespace specdec::methods {

inline MethodParam rule_param() {
  return {"rule", ParamType::kText, "auto",
          "auto (greedy at temperature 0, else rrs) | greedy | rrs (recursive rejection sampling) | speculative "
          "(chains with a draft model) | block (block verification, chains) | traversal (traversal verification) "
          "| typical (Medusa, LOSSY)"};
}

enum class RuleKind : std::uint8_t { kGreedy, kRecursiveRejection, kSpeculative, kBlock, kTraversal, kTypical };

// What a method's drafts are: chains only (rule=block fits), and with the
// drafter's probabilities (rule=speculative fits).
struct RuleFit {
  bool chains = false;
  bool probs = false;
};

// The rule of `c`'s rule= at `sampling`; InvalidArgumentError naming what
// fits instead when it does not fit the method or the sampling.
inline RuleKind rule_kind(const MethodConfig& c, const SamplingParams& sampling, RuleFit fit) {
  const auto& rule = c.text("rule");
  if (rule == "auto") return sampling.is_greedy() ? RuleKind::kGreedy : RuleKind::kRecursiveRejection;
  if (rule == "greedy") {
    if (!sampling.is_greedy())
      throw InvalidArgumentError(fmt::format(
          "method {}: rule=greedy needs temperature 0 (at temperature {} it would not keep the target's "
          "distribution; use rule=rrs)",
          c.name, sampling.temperature));
    return RuleKind::kGreedy;
  }
  if (rule == "rrs") return RuleKind::kRecursiveRejection;
  if (rule == "typical") return RuleKind::kTypical;
  if (rule == "traversal") return RuleKind::kTraversal;
  if (rule == "block") {
    if (!fit.chains)
      throw InvalidArgumentError(fmt::format(
          "method {}: rule=block verifies chains, and this method drafts trees; use rule=traversal (block "
          "verification generalised to trees)",
          c.name));
    return RuleKind::kBlock;
  }
  if (rule == "speculative") {
    if (!fit.chains || !fit.probs)
      throw InvalidArgumentError(fmt::format(
          "method {}: rule=speculative verifies chains drafted from probabilities (a draft model's chain); use "
          "rule=rrs",
          c.name));
    return RuleKind::kSpeculative;
  }
  throw InvalidArgumentError(fmt::format(
      "method {}: unknown rule '{}' (auto, greedy, rrs, speculative, block, traversal, typical)", c.name, rule));
}

// The rule as people read it, with "LOSSY" where it does not keep the
// target's distribution.
inline const char* describe(RuleKind kind) {
  switch (kind) {
    case RuleKind::kGreedy: return "greedy acceptance, lossless";
    case RuleKind::kRecursiveRejection: return "recursive rejection sampling, lossless";
    case RuleKind::kSpeculative: return "speculative sampling, lossless";
    case RuleKind::kBlock: return "block verification, lossless";
    case RuleKind::kTraversal: return "traversal verification, lossless";
    case RuleKind::kTypical: return "typical acceptance, LOSSY (not the target's distribution)";
  }
  return "?";
}

// Calls f(rule) with the chosen rule, one type for every choice
// (accept/runtime_rule.hpp): a method composes its engine once. The
// chain-only rules are among the choices only where they fit (kChains; for
// SpeculativeSampling kProbs too).
template <bool kChains, bool kProbs, class F>
AnyDecoder with_rule(const MethodConfig& c, const SamplingParams& sampling, F&& f) {
  using Rule = RuntimeRule<kChains, kProbs>;
  switch (rule_kind(c, sampling, RuleFit{kChains, kProbs})) {
    case RuleKind::kGreedy: return f(Rule(GreedyAcceptance{}));
    case RuleKind::kRecursiveRejection: return f(Rule(RecursiveRejectionSampling{}));
    case RuleKind::kTraversal: return f(Rule(TraversalVerification{}));
    case RuleKind::kTypical: return f(Rule(TypicalAcceptance{}));
    case RuleKind::kBlock:
      if constexpr (kChains) return f(Rule(BlockVerification{}));
      break;
    case RuleKind::kSpeculative:
      if constexpr (kChains && kProbs) return f(Rule(SpeculativeSampling{}));
      break;
  }
  throw InvalidArgumentError(fmt::format("method {}: rule={} does not fit it", c.name, c.text("rule")));
}

}  // namespace specdec::methods
