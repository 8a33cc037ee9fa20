// The least a feature-level Drafter is (it reads the target's hidden states,
// as EAGLE and Lyanna heads do): for the compile-fail tests that pair one
// with what cannot serve it.
#pragma once

#include <cstdint>
#include <span>

#include "specdec/concepts.hpp"
#include "specdec/core/target_features.hpp"

namespace specdec::testing {

struct FeatureReadingDrafter {
  static constexpr bool kProvidesProbs = true;
  std::int64_t vocab_size() const { return 8; }
  void begin(std::span<const TokenId>, const SamplingParams& = {}) {}
  void propose(const DraftRequest&, ProbMatrix&) {}
  void commit(std::span<const TokenId>) {}
  void end() {}
  TargetFeatures& target_features() { return features; }
  TargetFeatures features;
};

}  // namespace specdec::testing
