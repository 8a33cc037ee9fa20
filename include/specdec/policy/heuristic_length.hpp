// HF transformers' "heuristic" num_assistant_tokens schedule
// (AssistedCandidateGenerator in candidate_generator.py; docs/methods.md): a
// chain budget k that grows by 2 after a round whose drafts were all accepted
// and shrinks by 1 (not below 1) otherwise. Affects speed only, never the
// output distribution.
//
// Departures from HF, both explicit:
//   * k is capped at max_k (HF lets it grow without bound; a cap keeps one
//     lucky streak from making the next miss cost a long draft);
//   * a round that drafted nothing (an n-gram drafter without a match, or a
//     builder stopped by the confidence threshold before its first token)
//     leaves k unchanged: it says nothing about how far drafts would have
//     matched. (HF's comparison num_matches == num_candidates would count it
//     as "all accepted" and grow k.)
// reset() returns to the initial k: call it per sequence for HF's
// "heuristic_transient"; do not for "heuristic", which carries k over.
#pragma once

#include <algorithm>
#include <cstdint>

#include <fmt/format.h>

#include "specdec/core/error.hpp"
#include "specdec/core/round.hpp"

namespace specdec {

class HeuristicLength {
 public:
  static constexpr std::int32_t kGrow = 2;    // HF: += 2 when every draft was accepted
  static constexpr std::int32_t kShrink = 1;  // HF: -= 1 otherwise, floor 1

  // Older HF releases' default num_assistant_tokens = 5. Throws
  // InvalidArgumentError unless 1 <= initial_k <= max_k.
  explicit HeuristicLength(std::int32_t initial_k = 5, std::int32_t max_k = 32)
      : initial_(initial_k), max_(max_k), k_(initial_k) {
    if (initial_k < 1 || initial_k > max_k)
      throw InvalidArgumentError(fmt::format(
          "HeuristicLength: need 1 <= initial_k <= max_k, got initial_k = {}, max_k = {}", initial_k, max_k));
  }

  // A chain of k drafts, all verified.
  DraftBudget budget() const { return DraftBudget{k_, k_, k_, 0.0f}; }

  // Throws InvalidArgumentError unless 0 <= num_accepted <= num_drafted.
  void observe(const RoundOutcome& outcome) {
    if (outcome.num_drafted < 0 || outcome.num_accepted < 0 || outcome.num_accepted > outcome.num_drafted)
      throw InvalidArgumentError(fmt::format(
          "HeuristicLength: an outcome needs 0 <= num_accepted <= num_drafted, got {} accepted of {} drafted",
          outcome.num_accepted, outcome.num_drafted));
    if (outcome.num_drafted == 0) return;  // nothing was tried: no evidence either way
    if (outcome.num_accepted == outcome.num_drafted)
      k_ = std::min(max_, k_ + kGrow);
    else
      k_ = std::max(1, k_ - kShrink);
  }

  std::int32_t k() const { return k_; }
  std::int32_t initial_k() const { return initial_; }
  std::int32_t max_k() const { return max_; }
  void reset() { k_ = initial_; }

 private:
  std::int32_t initial_;
  std::int32_t max_;
  std::int32_t k_;
};

}  // namespace specdec
