// Fixed draft budget: every round drafts and verifies the same amount (the
// "fixed k" of Leviathan et al. / Chen et al., ALGORITHMS.md §4.1, and HF's
// "constant" num_assistant_tokens schedule, §7.1). Affects speed only, never
// the output distribution.
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
