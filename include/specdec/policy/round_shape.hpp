// Where a method beats chain speculation: the regime map. SPIRe's model
// (throughput_model.hpp; Neelam et al., arXiv 2504.06419, §2) prices a chain
// round as k draft steps and one verification. The seed systems reshape that
// round:
//  - Lyanna (arXiv 2602.21224) drafts a whole chain in one head pass, so its
//    drafting does not grow with sequential draft steps;
//  - DuoDecoding (arXiv 2503.00784) drafts on other hardware while the
//    target verifies, so its drafting hides behind the verification;
//  - Speculative Verification (Kim et al., arXiv 2509.24328) verifies fewer
//    tokens, chosen with a companion's pass, which pays where each further
//    verified token costs.
// A RoundShape states one round in units of the target's one-token step,
// leaving free the two costs the hardware sets:
//   c  one draft-model step, and
//   s  what each further token adds to a verification: v(n) = 1 + s (n - 1).
// On a GPU at batch 1, s is near 0 and a small draft's step is bound by its
// kernels' latency (c ~ 0.35 for the default models on an H200); on a CPU,
// c follows the weights' ratio (~0.08) and s is ~0.1. A round then takes
//   serial_drafts c + max(slowdown v(n), overlapped_drafts c) + fixed
// target steps and emits `tokens`. Everything but c and s is measured once,
// on any machine, and held (`python3 -m specdec.regime` measures it from
// `specdec bench --json`; docs/regime.md says what that assumes).
#pragma once

#include <algorithm>
#include <cmath>
#include <optional>

#include <fmt/format.h>

#include "specdec/core/error.hpp"

namespace specdec {

struct RoundShape {
  double tokens = 1.0;             // tau: tokens a round emits
  double serial_drafts = 0.0;      // drafting before the verification, in draft steps
  double overlapped_drafts = 0.0;  // drafting during it (another core or device), in draft steps
  double verified_tokens = 1.0;    // n: tokens the verification scores per sequence
  double slowdown = 1.0;           // the verification's time against v(n) (e.g. fewer cores)
  double fixed = 0.0;              // the rest (host work, commits, waits), in target steps

  void check() const {
    if (!(tokens >= 1.0 && std::isfinite(tokens)) || !(serial_drafts >= 0.0) || !(overlapped_drafts >= 0.0) ||
        !(verified_tokens >= 1.0) || !(slowdown > 0.0) || !(fixed >= 0.0) || !std::isfinite(serial_drafts) ||
        !std::isfinite(overlapped_drafts) || !std::isfinite(verified_tokens) || !std::isfinite(slowdown) ||
        !std::isfinite(fixed))
      throw InvalidArgumentError(fmt::format(
          "RoundShape: tokens {} and verified tokens {} must be >= 1, drafts {} and {} and fixed {} >= 0, "
          "slowdown {} > 0, all finite",
          tokens, verified_tokens, serial_drafts, overlapped_drafts, fixed, slowdown));
  }
  // Target steps a round takes at draft-step cost c and verification slope s.
  double steps(double c, double s) const {
    check();
    if (!(c >= 0.0) || !(s >= 0.0) || !std::isfinite(c) || !std::isfinite(s))
      throw InvalidArgumentError(
          fmt::format("RoundShape: draft step {} and verification slope {} must be finite and >= 0", c, s));
    const double verify = slowdown * (1.0 + s * (verified_tokens - 1.0));
    return serial_drafts * c + std::max(verify, overlapped_drafts * c) + fixed;
  }
  // Tokens per target step: the speedup over autoregressive decoding.
  double tokens_per_step(double c, double s) const { return tokens / steps(c, s); }
};

// How much faster `method` decodes than `base` at (c, s).
inline double speedup_over(const RoundShape& method, const RoundShape& base, double c, double s) {
  return method.tokens_per_step(c, s) / base.tokens_per_step(c, s);
}

// A draft-step cost in [0, c_max] at which `method` and `base` decode
// equally fast at slope s, found by bisection (to 1e-9) where their order at
// 0 and at c_max differs; nullopt where it does not. Without overlapped
// drafting both rounds are linear in c, so the crossing is unique; a max()
// makes them piecewise linear, with at most one crossing per piece.
inline std::optional<double> break_even_draft_step(const RoundShape& method, const RoundShape& base, double s,
                                                   double c_max) {
  if (!(c_max > 0.0) || !std::isfinite(c_max))
    throw InvalidArgumentError(fmt::format("break_even_draft_step: c_max {} must be finite and > 0", c_max));
  const auto gap = [&](double c) {
    return base.tokens * method.steps(c, s) - method.tokens * base.steps(c, s);
  };
  double lo = 0.0, hi = c_max;
  const double g_lo = gap(lo), g_hi = gap(hi);
  if (g_lo == 0.0) return lo;
  if ((g_lo > 0.0) == (g_hi > 0.0)) return std::nullopt;
  while (hi - lo > 1e-9) {
    const double mid = 0.5 * (lo + hi);
    if ((gap(mid) > 0.0) == (g_lo > 0.0))
      lo = mid;
    else
      hi = mid;
  }
  return 0.5 * (lo + hi);
}

}  // namespace specdec
