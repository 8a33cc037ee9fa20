// Drafts about as much as the select phase verifies: after a round whose
// target verified g drafted tokens, the next round drafts g + 1 (at least 1,
// at most max_length). With Speculative Verification (select/
// goodput_selector.hpp) the drafts the goodput allocation keeps dropping are
// then not drafted at all, which matters where drafting is not free (a CPU
// drafts and verifies on the same cores); the + 1 lets the allocation ask
// for one more next time. With a selector that verifies everything it is a
// fixed length of max_length. Depends on past rounds only: lossless.
#pragma once

#include <algorithm>
#include <cstdint>

#include <fmt/format.h>

#include "specdec/core/error.hpp"
#include "specdec/core/round.hpp"

namespace specdec {

class FollowVerified {
 public:
  explicit FollowVerified(std::int32_t max_length) : max_(max_length), next_(max_length) {
    if (max_length < 1)
      throw InvalidArgumentError(fmt::format("FollowVerified: max_length {} (need >= 1)", max_length));
  }

  DraftBudget budget() const { return DraftBudget{next_, next_, next_, 0.0f}; }
  void observe(const RoundOutcome& outcome) { next_ = std::clamp(outcome.num_verified + 1, 1, max_); }

 private:
  std::int32_t max_;
  std::int32_t next_;
};

}  // namespace specdec
