// Block verification on a chain (Sun, Mendlovic, Leviathan et al., "Block
// Verification Accelerates Speculative Decoding", ICLR 2025, arXiv
// 2403.10444, Algorithm 2). Lossless; the paper proves it optimal in expected
// accepted length among lossless verifications of the same drafts, so never
// below token-level speculative sampling: it judges the block as a whole.
//
// With p_0 = 1 and p_i = min(1, p_{i-1} M_b(x_i) / M_s(x_i)) (the chance the
// prefix x_1..x_i survives), the block ends at tau = max{i : eta_i < h_i},
// h_gamma = p_gamma and h_i = Z_i / (Z_i + 1 - p_i) where
// Z_i = sum_x max(p_i M_b(x | x_<=i) - M_s(x | x_<=i), 0); the emitted token is
// drawn from norm(max(p_tau M_b - M_s, 0)) after x_tau, or is the bonus from
// M_b after x_gamma. The correction is NOT the ordinary residual
// norm(max(M_b - M_s, 0)) except at tau = 0: resampling from that one is not
// lossless (the statistical tests reject it).
//
// Drafts chosen deterministically (greedy drafting, n-gram lookup) have M_s =
// one-hot, which the same formulas handle: p_i = p_{i-1} M_b(x_i), and the
// correction is M_b without x_{tau+1}. So any drafter fits.
//
// The per-row work is row_math::block_verification_row, the function the CUDA
// kernel runs, with the same Philox draws: gamma + 1 uniforms per call.
// On a chain, TraversalVerification emits exactly what this rule emits.
#pragma once

#include <vector>

#include "specdec/accept/input_checks.hpp"
#include "specdec/accept/sequence_row_math.hpp"
#include "specdec/core/distribution.hpp"
#include "specdec/core/draft_tree.hpp"
#include "specdec/core/prob_matrix.hpp"
#include "specdec/core/rng.hpp"
#include "specdec/core/verify_result.hpp"

namespace specdec {

class BlockVerification {
 public:
  static constexpr bool kLossless = true;
  // q is read only where the chain's slots were sampled; deterministic slots
  // are one-hot. So a drafter without probabilities (n-gram) fits.
  static constexpr bool kNeedsDraftProbs = false;
  static constexpr bool kChainOnly = true;  // trees: TraversalVerification
  static constexpr const char* kName = "block_verification";

  // tree: a chain, each slot's children source recorded; target: [gamma + 1,
  // vocab]; draft: the rows the chain's sampled slots refer to.
  void verify(const DraftTree& tree, const ProbRows& target, const ProbRows& draft, RandomStream& rng,
              VerifyResult& out) {
    chain_.gather(kName, tree, target, draft);
    const std::int32_t gamma = tree.size();
    const std::int64_t vocab = target.vocab();
    // The weights p_i read every drafted token's row, and the residual masses
    // whole rows past tau: check them all before the kernel runs.
    for (std::int32_t i = 0; i <= gamma; ++i)
      check_distribution(target.row(i), fmt::format("{}: target row {}", kName, i));
    for (std::int32_t i = 0; i < gamma; ++i) {
      const float* q = chain_.draft_rows[static_cast<std::size_t>(i)];
      if (q == nullptr) continue;
      check_distribution({q, static_cast<std::size_t>(vocab)},
                         fmt::format("{}: draft row {}", kName, tree.children_draft_row(i - 1)));
      detail::check_drafted_token(kName, q, tree.token(i), i);
    }
    emitted_.resize(static_cast<std::size_t>(gamma) + 1);
    const auto accepted = row_math::block_verification_row(
        chain_.draft(), chain_.tokens.data(), detail::ChainInputs::TargetRows{target}, gamma, vocab,
        rng.take(static_cast<std::uint64_t>(gamma) + 1), emitted_.data());
    detail::chain_result(accepted, gamma, emitted_[static_cast<std::size_t>(accepted)], out);
  }

  VerifyResult verify(const DraftTree& tree, const ProbRows& target, const ProbRows& draft,
                      RandomStream& rng) {
    VerifyResult r;
    verify(tree, target, draft, rng, r);
    return r;
  }

 private:
  detail::ChainInputs chain_;
  std::vector<TokenId> emitted_;
};

}  // namespace specdec
