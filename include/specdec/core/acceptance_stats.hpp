// Counters every acceptance rule's results feed, so methods compare side by
// side: tau (tokens per round), acceptance rate, per-depth conditional
// acceptance and zero-accept rounds (llama.cpp-style per-position counters).
#pragma once

#include <cstdint>
#include <vector>

#include "specdec/core/verify_result.hpp"

namespace specdec {

struct AcceptanceStats {
  // False once any round was verified by a lossy rule (typical acceptance):
  // the output is then no longer distributed as the target's.
  bool lossless = true;
  std::int64_t num_rounds = 0;
  std::int64_t num_emitted = 0;      // accepted drafts + bonus tokens
  std::int64_t num_accepted = 0;     // accepted drafts
  std::int64_t num_zero_accept = 0;  // rounds that accepted no draft
  // Index d: rounds that tried depth d + 1, and rounds that accepted there.
  std::vector<std::int64_t> depth_tried, depth_accepted;

  void record(const VerifyResult& r, bool rule_is_lossless) {
    lossless = lossless && rule_is_lossless;
    ++num_rounds;
    num_accepted += r.num_accepted();
    num_emitted += r.num_accepted() + 1;
    if (r.num_accepted() == 0) ++num_zero_accept;
    if (depth_tried.size() < r.depth_accepted.size()) {
      depth_tried.resize(r.depth_accepted.size(), 0);
      depth_accepted.resize(r.depth_accepted.size(), 0);
    }
    for (std::size_t d = 0; d < r.depth_accepted.size(); ++d) {
      ++depth_tried[d];
      depth_accepted[d] += r.depth_accepted[d];
    }
  }

  // Mean tokens committed per round (tau).
  double mean_emitted() const { return num_rounds ? double(num_emitted) / double(num_rounds) : 0.0; }
  // P(accept at depth d | depth d was tried), d >= 1.
  double conditional_acceptance(std::size_t d) const {
    if (d == 0 || d > depth_tried.size() || depth_tried[d - 1] == 0) return 0.0;
    return double(depth_accepted[d - 1]) / double(depth_tried[d - 1]);
  }
  // Accepted drafts over tried depths: the per-token acceptance rate.
  double acceptance_rate() const {
    std::int64_t tried = 0;
    for (auto t : depth_tried) tried += t;
    return tried ? double(num_accepted) / double(tried) : 0.0;
  }
};

}  // namespace specdec
