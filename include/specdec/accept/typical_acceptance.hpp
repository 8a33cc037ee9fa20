// Typical acceptance (Medusa, Cai et al., arXiv 2401.10774, §2.3.1). LOSSY: the
// output is not distributed as the target's; it trades exactness for longer
// accepted runs. kLossless is false, and AcceptanceStats records every round
// it verifies as lossy.
//
// A drafted token x under target row P is accepted iff
//     P(x) > min(posterior_threshold, posterior_alpha * exp(-H(P)))
// (H the entropy of P). Over the tree, the path with the most consecutive
// accepted tokens wins; ties go to the larger sum of log P along the path.
// The bonus token is drawn from the target row after the chosen path.
#pragma once

#include <cmath>
#include <vector>

#include <fmt/format.h>

#include "specdec/accept/input_checks.hpp"
#include "specdec/accept/row_math.hpp"
#include "specdec/core/bitexact.hpp"
#include "specdec/core/distribution.hpp"
#include "specdec/core/draft_tree.hpp"
#include "specdec/core/error.hpp"
#include "specdec/core/prob_matrix.hpp"
#include "specdec/core/rng.hpp"
#include "specdec/core/verify_result.hpp"

namespace specdec {

struct TypicalAcceptanceParams {
  // Medusa's medusa_generate defaults: epsilon = 0.09, delta = 0.3 = sqrt(epsilon).
  float posterior_threshold = 0.09f;
  float posterior_alpha = 0.3f;

  void validate() const {
    if (!(posterior_threshold > 0.0f && posterior_threshold <= 1.0f))
      throw InvalidArgumentError(fmt::format(
          "TypicalAcceptanceParams.posterior_threshold must be in (0, 1], got {}", posterior_threshold));
    if (!(posterior_alpha > 0.0f && std::isfinite(posterior_alpha)))
      throw InvalidArgumentError(fmt::format(
          "TypicalAcceptanceParams.posterior_alpha must be finite and > 0, got {}", posterior_alpha));
  }
};

class TypicalAcceptance {
 public:
  static constexpr bool kLossless = false;
  static constexpr bool kNeedsDraftProbs = false;
  static constexpr const char* kName = "typical_acceptance (lossy)";

  explicit TypicalAcceptance(TypicalAcceptanceParams params = {}) : params_(params) {
    params_.validate();
  }

  const TypicalAcceptanceParams& params() const { return params_; }

  // The acceptance threshold of one target row. The entropy's logarithms,
  // sum and exponential are bitexact's, so the CUDA kernel
  // (cuda::typical_acceptance) finds the same threshold to the bit.
  double threshold(std::span<const float> p) const {
    const double entropy = bitexact::lane_sum_of(
        [&p](std::int64_t i) {
          const double v = p[static_cast<std::size_t>(i)];
          return v > 0.0 ? -bitexact::mul_rn(v, bitexact::log_positive(v)) : 0.0;
        },
        static_cast<std::int64_t>(p.size()));
    return std::min(static_cast<double>(params_.posterior_threshold),
                    static_cast<double>(params_.posterior_alpha) * bitexact::exp_nonpositive_double(-entropy));
  }

  void verify(const DraftTree& tree, const ProbRows& target, const ProbRows& /*draft*/,
              RandomStream& rng, VerifyResult& out) {
    detail::check_rule_inputs(kName, tree, target);
    const auto n = static_cast<std::size_t>(tree.size());
    // Nodes are topologically ordered, so one forward pass decides every node:
    // ok[c] = parent ok and P_parent(c) > threshold(P_parent).
    ok_.assign(n, 0);
    score_.assign(n, 0.0);
    slot_threshold_.assign(n + 1, -1.0);
    slot_checked_.assign(n + 1, 0);
    std::int32_t best = DraftTree::kRoot;
    for (std::int32_t c = 0; c < tree.size(); ++c) {
      const auto parent = tree.parent(c);
      if (parent != DraftTree::kRoot && !ok_[static_cast<std::size_t>(parent)]) continue;
      const auto p = target.row(parent + 1);
      const auto slot = static_cast<std::size_t>(parent + 1);
      if (!slot_checked_[slot]) {
        check_distribution(p, fmt::format("{}: target row {}", kName, parent + 1));
        slot_checked_[slot] = 1;
      }
      const double p_x = p[static_cast<std::size_t>(tree.token(c))];
      // The threshold is at most posterior_threshold, so a token above it is
      // accepted without the O(vocab) entropy.
      if (!(p_x > params_.posterior_threshold)) {
        if (slot_threshold_[slot] < 0.0) slot_threshold_[slot] = threshold(p);
        if (!(p_x > slot_threshold_[slot])) continue;
      }
      ok_[static_cast<std::size_t>(c)] = 1;
      score_[static_cast<std::size_t>(c)] =
          (parent == DraftTree::kRoot ? 0.0 : score_[static_cast<std::size_t>(parent)]) + bitexact::log_positive(p_x);
      if (best == DraftTree::kRoot || tree.depth(c) > tree.depth(best) ||
          (tree.depth(c) == tree.depth(best) &&
           score_[static_cast<std::size_t>(c)] > score_[static_cast<std::size_t>(best)]))
        best = c;
    }
    out.clear();
    out.accepted_nodes = tree.path_to(best);
    out.depth_accepted.assign(out.accepted_nodes.size(), 1);
    if (tree.num_children(best) > 0) out.depth_accepted.push_back(0);
    const auto p = target.row(best + 1);
    if (!slot_checked_[static_cast<std::size_t>(best + 1)])
      check_distribution(p, fmt::format("{}: target row {}", kName, best + 1));
    out.bonus_token = row_math::sample_row(p.data(), target.vocab(), rng.uniform());
  }

  VerifyResult verify(const DraftTree& tree, const ProbRows& target, const ProbRows& draft,
                      RandomStream& rng) {
    VerifyResult r;
    verify(tree, target, draft, rng, r);
    return r;
  }

 private:
  TypicalAcceptanceParams params_;
  std::vector<std::uint8_t> ok_;
  std::vector<double> score_;
  std::vector<double> slot_threshold_;
  std::vector<std::uint8_t> slot_checked_;
};

}  // namespace specdec
