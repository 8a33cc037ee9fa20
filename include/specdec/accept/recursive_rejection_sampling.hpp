// Recursive rejection sampling over a token tree: SpecInfer's multi-step
// speculative sampling (arXiv 2305.09781, §4.3, Algorithm 2), generalised per
// slot to how the children were drafted (modes (a)-(c) of docs/methods.md,
// tree verification). Lossless in every mode.
//
// At a slot u with target row P and children c_1..c_m in sibling order:
//  - kSampledWithReplacement (a, SpecInfer MSS): accept c w.p.
//    min(1, P(c)/q(c)); on rejection P <- norm(max(0, P - q)), q unchanged.
//  - kSampledWithoutReplacement (b, Sequoia §3.2): the same test, and after a
//    rejection also q <- q with c removed, renormalised.
//  - kDeterministic (c, target-only; Sequoia §2.2): q = one-hot at c, so
//    accept w.p. P(c) and on rejection remove c from P. Lossless for any child
//    set chosen without looking at the target.
// The first accepted child becomes the next slot; if none is accepted the rule
// emits a draw from the final P; after a leaf it emits the bonus from P(leaf).
// Row sums are bitexact::lane_sum, whose fixed shape the CUDA kernel
// (cuda::recursive_rejection_sampling) reproduces, so both emit the same tokens.
#pragma once

#include <algorithm>
#include <vector>

#include "specdec/accept/input_checks.hpp"
#include "specdec/accept/row_math.hpp"
#include "specdec/core/bitexact.hpp"
#include "specdec/core/distribution.hpp"
#include "specdec/core/draft_tree.hpp"
#include "specdec/core/prob_matrix.hpp"
#include "specdec/core/rng.hpp"
#include "specdec/core/row_kernels.hpp"
#include "specdec/core/verify_result.hpp"

namespace specdec {

class RecursiveRejectionSampling {
 public:
  static constexpr bool kLossless = true;
  // It reads q only at slots the builder marked sampled, where q is the row
  // the children were drawn from; deterministic slots take the target-only
  // test. So any drafter fits, including one without probabilities.
  static constexpr bool kNeedsDraftProbs = false;
  static constexpr const char* kName = "recursive_rejection_sampling";

  // target: [tree.size() + 1, vocab] (root first); draft: the rows the tree's
  // sampled slots refer to (may be empty when every slot is deterministic).
  // Draws one uniform per child tested plus one for the emitted token.
  void verify(const DraftTree& tree, const ProbRows& target, const ProbRows& draft,
              RandomStream& rng, VerifyResult& out) {
    detail::check_rule_inputs(kName, tree, target);
    const std::int64_t vocab = target.vocab();
    out.clear();
    std::int32_t slot = DraftTree::kRoot;
    while (true) {
      const auto p = target.row(slot + 1);
      check_distribution(p, fmt::format("{}: target row {}", kName, slot + 1));
      if (tree.num_children(slot) == 0) {
        out.bonus_token = row_math::sample_row(p.data(), vocab, rng.uniform());
        return;
      }
      detail::check_children_recorded(kName, tree, slot);
      const std::int32_t next = tree.children_mode(slot) == ChildMode::kDeterministic
                                    ? verify_deterministic(tree, slot, p, rng, out)
                                    : verify_sampled(tree, slot, p, draft, rng, out);
      out.depth_accepted.push_back(next >= 0 ? 1 : 0);
      if (next < 0) return;  // bonus_token was set from the residual
      out.accepted_nodes.push_back(next);
      slot = next;
    }
  }

  VerifyResult verify(const DraftTree& tree, const ProbRows& target, const ProbRows& draft,
                      RandomStream& rng) {
    VerifyResult r;
    verify(tree, target, draft, rng, r);
    return r;
  }

 private:
  // Target-only rule. P is never copied until the final residual: a rejected
  // child's mass is subtracted from the running total instead.
  std::int32_t verify_deterministic(const DraftTree& tree, std::int32_t slot, std::span<const float> p,
                                    RandomStream& rng, VerifyResult& out) {
    double mass = row_kernels::lane_sum(p.data(), static_cast<std::int64_t>(p.size()));
    removed_.clear();
    for (auto c = tree.first_child(slot); c >= 0; c = tree.next_sibling(c)) {
      const TokenId x = tree.token(c);
      const bool gone = std::find(removed_.begin(), removed_.end(), x) != removed_.end();
      const double p_x = gone ? 0.0 : static_cast<double>(p[static_cast<std::size_t>(x)]);
      if (rng.uniform() * mass < p_x) return c;  // P(x) / mass, P renormalised
      if (!gone) {
        removed_.push_back(x);
        mass -= p_x;
      }
    }
    residual_.assign(p.begin(), p.end());
    for (TokenId x : removed_) residual_[static_cast<std::size_t>(x)] = 0.0;
    out.bonus_token = emit(residual_, p, rng);
    return -1;
  }

  // SpecInfer MSS (with replacement) or Sequoia (without), on double scratch.
  std::int32_t verify_sampled(const DraftTree& tree, std::int32_t slot, std::span<const float> p,
                              const ProbRows& draft, RandomStream& rng, VerifyResult& out) {
    const auto q_row = detail::sampled_children_row(kName, tree, slot, draft, p.size());
    const bool without_replacement = tree.children_mode(slot) == ChildMode::kSampledWithoutReplacement;
    detail::check_distinct_children(kName, tree, slot);
    // The builders draw children against the row's exact sum
    // (row_math::sample_row), so the law a child was drawn from is q / sum(q).
    // The first child is tested on P and q / sum(q) read in place; only a
    // rejection copies them into the double scratch that the residual
    // updates (normalising q there also makes the without-replacement update
    // exact). An accepted first child, the common case, copies nothing; the
    // numbers tested are the same either way.
    const auto n = static_cast<std::int64_t>(q_row.size());
    const double q_total = row_kernels::lane_sum(q_row.data(), n);
    bool copied = false;
    for (auto c = tree.first_child(slot); c >= 0; c = tree.next_sibling(c)) {
      const auto x = static_cast<std::size_t>(tree.token(c));
      if (!(q_row[x] > 0.0f))
        throw InvalidDistributionError(fmt::format(
            "{}: child {} (token {}) of slot {} has draft probability {}; it cannot have been sampled",
            kName, c, x, slot, q_row[x]));
      const double q_x = copied             ? q_[x]
                         : q_total > 0.0    ? static_cast<double>(q_row[x]) / q_total
                                            : static_cast<double>(q_row[x]);
      const double p_x = copied ? residual_[x] : static_cast<double>(p[x]);
      if (rng.uniform() * q_x < p_x) return c;
      if (!copied) {
        residual_.assign(p.begin(), p.end());
        q_.assign(q_row.begin(), q_row.end());
        if (q_total > 0.0) row_kernels::divide(q_.data(), n, q_total);
        copied = true;
      }
      // P <- norm(max(0, P - q)), the mass in lane_sum's shape; if nothing
      // is left (P == q up to rounding, unreachable in exact arithmetic) P
      // stays as it was.
      const double mass = row_kernels::residual_mass(residual_.data(), q_.data(), n);
      if (mass > 0.0) row_kernels::subtract_residual(residual_.data(), q_.data(), n, mass);
      if (without_replacement) {
        const double rest = 1.0 - q_[x];
        q_[x] = 0.0;
        if (rest > 0.0) row_kernels::divide(q_.data(), n, rest);
      }
    }
    out.bonus_token = emit(residual_, p, rng);
    return -1;
  }

  // The emitted token after every child was rejected: a draw from the residual,
  // or from p itself if rounding left the residual empty.
  static TokenId emit(const std::vector<double>& residual, std::span<const float> p, RandomStream& rng) {
    const double u = rng.uniform();
    const TokenId y = row_math::sample_row(residual.data(), static_cast<std::int64_t>(residual.size()), u);
    return y != kNoToken ? y : row_math::sample_row(p.data(), static_cast<std::int64_t>(p.size()), u);
  }

  std::vector<TokenId> removed_;
  std::vector<double> residual_;
  std::vector<double> q_;
};

}  // namespace specdec
