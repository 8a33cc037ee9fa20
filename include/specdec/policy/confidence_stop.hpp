// Confidence early stop (HF transformers' assistant_confidence_threshold and
// ConfidenceCriteria; docs/methods.md): a fixed budget whose stop_below is
// the threshold, so the tree builder stops drafting below a token whose draft
// probability is under it. Lossless: the decision reads draft probabilities
// only, never the target's.
//
// HF's defaults: a constant 20-token chain, threshold 0.4. HF's adaptive
// threshold (a ROC fit over per-token draft probabilities and accept flags)
// is not built yet; RoundOutcome now carries what it needs (the verified
// tree's draft probabilities and the accepted path).
//
// Only meaningful with a drafter whose rows are distributions
// (kProvidesProbs); one-hot n-gram rows have probability 1.
#pragma once

#include <cstdint>

#include <fmt/format.h>

#include "specdec/core/error.hpp"
#include "specdec/core/round.hpp"
#include "specdec/policy/budget_checks.hpp"

namespace specdec {

class ConfidenceStop {
 public:
  static constexpr float kDefaultThreshold = 0.4f;         // HF assistant_confidence_threshold
  static constexpr std::int32_t kDefaultChainLength = 20;  // HF num_assistant_tokens

  ConfidenceStop()
      : ConfidenceStop(DraftBudget{kDefaultChainLength, kDefaultChainLength, kDefaultChainLength, 0.0f}) {}

  // base: the fixed budget; its stop_below must be 0 (the threshold is given
  // here, not twice). Throws InvalidArgumentError on a bad budget, a set
  // base.stop_below, or a threshold outside [0, 1].
  explicit ConfidenceStop(DraftBudget base, float threshold = kDefaultThreshold) : budget_(base) {
    if (base.stop_below != 0.0f)
      throw InvalidArgumentError(fmt::format(
          "ConfidenceStop: the base budget already sets stop_below = {}; pass the threshold ({}) alone",
          base.stop_below, threshold));
    if (!(threshold >= 0.0f && threshold <= 1.0f))  // also rejects NaN
      throw InvalidArgumentError(
          fmt::format("ConfidenceStop: threshold must be in [0, 1], got {}", threshold));
    budget_.stop_below = threshold;
    detail::check_budget("ConfidenceStop", budget_);
  }

  DraftBudget budget() const { return budget_; }
  void observe(const RoundOutcome& /*outcome*/) {}
  float threshold() const { return budget_.stop_below; }

 private:
  DraftBudget budget_;
};

}  // namespace specdec
