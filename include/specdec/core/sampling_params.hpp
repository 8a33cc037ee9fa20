// Sampling parameters: how one request turns logits into a distribution
// (see warp.hpp for the semantics). They belong to the request
// (GenerationOptions::sampling): the verifier warps each request's target rows
// with them and the request's drafter its draft rows, so one step can serve
// greedy and sampled requests together.
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
  // Seeds the request's counter-based random streams (core/rng.hpp): its
  // draft sampling and its acceptance tests.
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

// How a drafter warps its rows for a request sampled at `s`: with the same
// parameters, so that the drafts follow the target's law (acceptance is
// highest when q = p), or at temperature 1 for a greedy request, whose
// draft candidates are ranked (top-1 chains, top-k children), not drawn; a
// greedy warp would leave a single candidate per node.
inline SamplingParams draft_sampling_for(const SamplingParams& s) {
  if (s.is_greedy()) return SamplingParams{1.0f, 0, 1.0f, s.seed};
  return s;
}

}  // namespace specdec
