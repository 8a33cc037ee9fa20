// Filling the RoundOutcome a LengthPolicy observes, the same way in every
// decoder: counts, the verified tree and accepted path, and the round's model
// time read off TimedModel clocks (core/round.hpp).
#pragma once

#include <concepts>
#include <cstdint>

#include "specdec/core/draft_tree.hpp"
#include "specdec/core/round.hpp"
#include "specdec/core/verify_result.hpp"
#include "specdec/engine/timed_model.hpp"

namespace specdec::detail {

// Nodes the drafter proposed: a builder that keeps a pool larger than the tree
// it sends (DynamicTreeBuilder) says so through pool(); otherwise the tree.
template <class B>
std::int32_t drafted_nodes(const B& builder, const DraftTree& tree) {
  if constexpr (requires { { builder.pool() } -> std::convertible_to<const DraftTree&>; })
    return builder.pool().size();
  else
    return tree.size();
}

// The clocks' readings at the start of a round (zero for untimed models).
struct ClockMark {
  ModelClock target, draft;
  static ClockMark now(const ModelClock* target, const ModelClock* draft) {
    return {target ? *target : ModelClock{}, draft ? *draft : ModelClock{}};
  }
};

// `drafted`: drafted_nodes() read right after the build.
inline RoundOutcome round_outcome(std::int32_t drafted, const DraftTree& tree, const VerifyResult& result,
                                  double draft_seconds, double verify_seconds, const ClockMark& start,
                                  const ModelClock* target, const ModelClock* draft) {
  RoundOutcome o;
  o.num_drafted = drafted;
  o.num_verified = tree.size();
  o.num_accepted = result.num_accepted();
  o.draft_us = 1e6 * draft_seconds;
  o.verify_us = 1e6 * verify_seconds;
  if (target != nullptr) {
    o.target_model_us = 1e6 * (target->seconds - start.target.seconds);
    o.target_forwards = static_cast<std::int32_t>(target->forwards - start.target.forwards);
  }
  if (draft != nullptr) {
    o.draft_model_us = 1e6 * (draft->seconds - start.draft.seconds);
    o.draft_forwards = static_cast<std::int32_t>(draft->forwards - start.draft.forwards);
  }
  o.tree = &tree;
  o.accepted_nodes = result.accepted_nodes;
  return o;
}

}  // namespace specdec::detail
