// Fixed draft budget: every round drafts and verifies the same amount (the
// fixed γ of Leviathan et al., arXiv 2211.17192, Algorithm 1, and the fixed K
// of Chen et al., arXiv 2302.01318, Algorithm 2; HF's "constant"
// num_assistant_tokens schedule). Affects speed only, never the output
// distribution.
#pragma once

#include <cstdint>

#include "specdec/core/round.hpp"
#include "specdec/policy/budget_checks.hpp"

namespace specdec {

class FixedLength {
 public:
  // Throws InvalidArgumentError unless max_depth >= 1, max_nodes >= 1,
  // 1 <= verify_nodes <= max_nodes and stop_below in [0, 1].
  explicit FixedLength(const DraftBudget& budget) : budget_(budget) {
    detail::check_budget("FixedLength", budget_);
  }

  // A chain of k drafts, all verified.
  static FixedLength chain(std::int32_t k) { return FixedLength(DraftBudget{k, k, k, 0.0f}); }

  DraftBudget budget() const { return budget_; }
  void observe(const RoundOutcome& /*outcome*/) {}

 private:
  DraftBudget budget_;
};

}  // namespace specdec
