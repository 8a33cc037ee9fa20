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

// A clock's reading (zero for an untimed model), and what it counted since
// an earlier reading.
inline ModelClock reading(const ModelClock* clock) { return clock ? *clock : ModelClock{}; }
inline ModelClock since(const ModelClock* clock, const ModelClock& mark) {
  if (clock == nullptr) return {};
  return {clock->seconds - mark.seconds, clock->forwards - mark.forwards};
}
inline void add(ModelClock& total, const ModelClock& part) {
  total.seconds += part.seconds;
  total.forwards += part.forwards;
}

// `drafted`: drafted_nodes() read right after the build; `target`, `draft`:
// the model time the round spent in each model (TimedModel clocks).
inline RoundOutcome round_outcome(std::int32_t drafted, const DraftTree& tree, const VerifyResult& result,
                                  double draft_seconds, double verify_seconds, const ModelClock& target,
                                  const ModelClock& draft) {
  RoundOutcome o;
  o.num_drafted = drafted;
  o.num_verified = tree.size();
  o.num_accepted = result.num_accepted();
  o.draft_us = 1e6 * draft_seconds;
  o.verify_us = 1e6 * verify_seconds;
  o.target_model_us = 1e6 * target.seconds;
  o.target_forwards = static_cast<std::int32_t>(target.forwards);
  o.draft_model_us = 1e6 * draft.seconds;
  o.draft_forwards = static_cast<std::int32_t>(draft.forwards);
  o.tree = &tree;
  o.accepted_nodes = result.accepted_nodes;
  return o;
}

}  // namespace specdec::detail
