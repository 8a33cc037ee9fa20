// Speculative Verification's two indicators of whether a drafted token will
// be accepted (Kim et al., arXiv 2509.24328, §4.1), read from a companion
// model's distribution P_c next to the draft's P_d at the token's position:
//   S = sum_x min(P_d(x), P_c(x))   the draft/companion similarity (1 - TV,
//                                    Leviathan et al.'s beta, arXiv
//                                    2211.17192 §3.1, with the companion in
//                                    the target's place)
//   A = min(1, P_c(t) / P_d(t))      the acceptance probability of the drafted
//                                    token t had the companion been the target
// S depends on the position's context only; A also on the drafted token
// (which is why A may only steer the verification of tokens that are a
// function of their context: docs/acceptance.md, "Speculative Verification").
#pragma once

#include <algorithm>
#include <cstddef>
#include <span>

#include <fmt/format.h>

#include "specdec/core/error.hpp"
#include "specdec/core/types.hpp"

namespace specdec {

struct DraftIndicators {
  float similarity = 0.0f;  // S
  float acceptance = 0.0f;  // A
};

inline DraftIndicators draft_indicators(std::span<const float> draft, std::span<const float> companion,
                                        TokenId token) {
  if (draft.size() != companion.size())
    throw ShapeError(fmt::format("draft_indicators: the draft row has {} entries, the companion's {}", draft.size(),
                                 companion.size()));
  if (token < 0 || static_cast<std::size_t>(token) >= draft.size())
    throw InvalidArgumentError(fmt::format("draft_indicators: token {} is outside the vocabulary of {}", token,
                                           draft.size()));
  // 16 partial sums: the loop vectorises (one ordered float sum would not);
  // each lane adds at most vocab / 16 terms in [0, 1].
  constexpr std::size_t kLanes = 16;
  float lanes[kLanes] = {};
  const std::size_t n = draft.size(), body = n - n % kLanes;
  for (std::size_t i = 0; i < body; i += kLanes)
    for (std::size_t l = 0; l < kLanes; ++l) lanes[l] += std::min(draft[i + l], companion[i + l]);
  double s = 0.0;
  for (const float v : lanes) s += v;
  for (std::size_t i = body; i < n; ++i) s += std::min(draft[i], companion[i]);
  const float q = draft[static_cast<std::size_t>(token)], c = companion[static_cast<std::size_t>(token)];
  // A drafted token has q > 0; a row that gave it none cannot rank it: A is
  // then 1 where the companion would draw it and 0 where it would not.
  const float a = q > 0.0f ? std::min(1.0f, c / q) : (c > 0.0f ? 1.0f : 0.0f);
  return {static_cast<float>(std::min(1.0, s)), a};
}

}  // namespace specdec
