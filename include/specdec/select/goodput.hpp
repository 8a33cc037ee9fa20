// Speculative Verification's verification lengths (Kim et al., arXiv
// 2509.24328, §4.3). With p_i the estimated acceptance probability of a
// request's i-th drafted token (given the ones before it were accepted):
//   E[N | g]    = sum_{i<=g} prod_{j<=i} p_j   expected accepted drafts of g verified
//   goodput(g)  = (E[N | g] + 1) / round time   (+1: the token the target always emits)
// For a batch, the verified tokens are allocated one at a time, each to the
// request whose next token adds the most expected accepted tokens
// (prod_{j<=g_q+1} p_{q,j}), while the batch's goodput
//   sum_q (E[N_q | g_q] + 1) / (fixed + Lat(b, sum_q (g_q + 1)))
// rises. One request is the batch of one (the paper's incremental search).
//
// Like the paper, the allocation stops at the first token that does not raise
// the goodput. That makes it a stopping rule: whether a request's i-th token
// is verified depends on the estimates of its tokens up to i only, never on
// what was drafted after it, which keeps a similarity-only schedule of
// sampled drafts lossless (docs/acceptance.md). Searching on past the first
// drop would look at later tokens' estimates, which depend on the token.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include <fmt/format.h>

#include "specdec/core/error.hpp"
#include "specdec/select/verify_latency.hpp"

namespace specdec {

// E[N | g] of acceptance estimates p (p.size() >= g).
inline double expected_accepted(std::span<const float> p, std::size_t g) {
  double e = 0.0, prefix = 1.0;
  for (std::size_t i = 0; i < g && i < p.size(); ++i) e += (prefix *= p[i]);
  return e;
}

struct GoodputAllocation {
  std::vector<std::int32_t> lengths;  // verified drafted tokens per request
  double expected_tokens = 0.0;       // sum_q E[N_q | g_q] + 1
  double seconds = 0.0;               // fixed + Lat(b, sum_q (g_q + 1))
  double goodput() const { return seconds > 0 ? expected_tokens / seconds : 0.0; }
};

// p[q]: request q's acceptance estimates, one per drafted token in order.
// Every request verifies at least min(min_verify, its drafts) tokens. A
// round lasts fixed_seconds + Lat(b, n): fixed_seconds 0 is the paper's
// (hardware that overlaps drafting with verification); GoodputSelector
// passes what the round spends outside the target's forward.
//
// after (optional, shaped as p): the estimate of token i that the tokens
// after it see. Token i's gain is prefix * p[q][i], and once it is taken the
// prefix is multiplied by after[q][i] instead of p[q][i]. This is how a
// sampled token's own A steers only the tokens after it (GoodputSelector,
// GoodputOptions::acceptance_after): p[q][i] then reads token i's context
// only, after[q][i] the token too, and whether token i is verified still
// depends on its context alone.
inline GoodputAllocation allocate_goodput(std::span<const std::vector<float>> p, const VerifyLatency& latency,
                                          std::int32_t min_verify = 0, double fixed_seconds = 0.0,
                                          std::span<const std::vector<float>> after = {}) {
  if (min_verify < 0) throw InvalidArgumentError(fmt::format("allocate_goodput: min_verify {} < 0", min_verify));
  if (!(fixed_seconds >= 0.0))
    throw InvalidArgumentError(fmt::format("allocate_goodput: fixed time {} s is negative", fixed_seconds));
  if (!after.empty()) {
    if (after.size() != p.size())
      throw ShapeError(fmt::format("allocate_goodput: {} requests' later estimates for {} requests",
                                   after.size(), p.size()));
    for (std::size_t q = 0; q < p.size(); ++q)
      if (after[q].size() != p[q].size())
        throw ShapeError(
            fmt::format("allocate_goodput: request {} has {} later estimates for {} drafted tokens", q,
                        after[q].size(), p[q].size()));
  }
  const auto& prefix_factor = after.empty() ? p : after;
  const auto b = static_cast<std::int32_t>(p.size());
  GoodputAllocation out;
  out.lengths.assign(p.size(), 0);
  if (b == 0) return out;
  const double fixed = fixed_seconds;
  std::vector<double> prefix(p.size(), 1.0);   // prod_{j<=g_q} p_{q,j} (or after_{q,j})
  double expected = b;                         // sum_q (E[N_q] + 1)
  std::int64_t tokens = b;                     // sum_q (g_q + 1)
  auto take = [&](std::size_t q) {
    const auto g = static_cast<std::size_t>(out.lengths[q]);
    expected += prefix[q] * p[q][g];
    prefix[q] *= prefix_factor[q][g];
    ++tokens;
    ++out.lengths[q];
  };
  for (std::size_t q = 0; q < p.size(); ++q)
    while (out.lengths[q] < min_verify && static_cast<std::size_t>(out.lengths[q]) < p[q].size()) take(q);
  double seconds = fixed + latency.seconds(b, static_cast<double>(tokens));
  for (;;) {
    std::size_t pick = p.size();
    double gain = -1.0;
    for (std::size_t q = 0; q < p.size(); ++q) {
      const auto g = static_cast<std::size_t>(out.lengths[q]);
      if (g < p[q].size() && prefix[q] * p[q][g] > gain) gain = prefix[q] * p[q][g], pick = q;
    }
    if (pick == p.size()) break;  // every draft is in
    const double s = fixed + latency.seconds(b, static_cast<double>(tokens + 1));
    if ((expected + gain) * seconds <= expected * s) break;  // the goodput would not rise
    take(pick);
    seconds = s;
  }
  out.expected_tokens = expected;
  out.seconds = seconds;
  return out;
}

}  // namespace specdec
