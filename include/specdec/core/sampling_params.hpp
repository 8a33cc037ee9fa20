// Sampling parameters: the one description of "how to turn logits into a
// distribution" that target and draft share (see warp.hpp for the semantics).
#pragma once

#include <cmath>
#include <cstdint>
#include <fmt/format.h>

#include "specdec/core/error.hpp"

namespace specdec {

struct SamplingParams {
  // 0 means greedy (argmax, ties to the lowest token id); otherwise logits are
  // divided by it before the softmax. Must be finite and >= 0.
  float temperature = 1.0f;
  // 0 means off. Otherwise keep the tokens whose logit is >= the k-th largest
  // logit (so tokens tied at the boundary are all kept). k >= vocab is off.
  std::int32_t top_k = 0;
  // 1 means off. Otherwise keep the smallest set of most probable tokens whose
  // mass reaches top_p, plus every token tied with the last one kept. In (0, 1].
  float top_p = 1.0f;
  // Seed of the counter-based RNG (core/rng.hpp) that every rule draws from.
  std::uint64_t seed = 0;

  bool is_greedy() const { return temperature == 0.0f; }

  // Throws InvalidArgumentError naming the first field outside its domain.
  void validate() const {
    if (!std::isfinite(temperature) || temperature < 0.0f)
      throw InvalidArgumentError(fmt::format(
          "SamplingParams.temperature must be finite and >= 0 (0 = greedy), got {}", temperature));
    if (top_k < 0)
      throw InvalidArgumentError(
          fmt::format("SamplingParams.top_k must be >= 0 (0 = off), got {}", top_k));
    if (!(top_p > 0.0f && top_p <= 1.0f))
      throw InvalidArgumentError(
          fmt::format("SamplingParams.top_p must be in (0, 1] (1 = off), got {}", top_p));
  }
};

}  // namespace specdec
