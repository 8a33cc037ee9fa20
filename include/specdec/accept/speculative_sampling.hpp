// Speculative sampling on a chain (Leviathan et al., arXiv 2211.17192, §2.3,
// Algorithm 1; Chen et al., arXiv 2302.01318, Algorithm 2): accept x_i with
// probability min(1, p_i(x_i) / q_i(x_i)); on the first rejection emit a draw
// from norm(max(0, p_i - q_i)); after full acceptance emit the bonus token
// from p_{gamma+1}. Lossless: the emitted tokens are distributed exactly as
// the (warped) target's.
//
// Drafts chosen deterministically (n-gram lookup, greedy drafting) have
// q = one-hot, which this rule handles as the special case it is (accept with
// probability p(x); residual = p without x).
//
// The per-row work is row_math::chain_speculative_sampling_row, the same
// function the CUDA kernel runs, with the same Philox draws: one stream, gamma
// + 1 uniforms per call whatever the outcome.
#pragma once

#include <vector>

#include "specdec/accept/input_checks.hpp"
#include "specdec/accept/row_math.hpp"
#include "specdec/core/distribution.hpp"
#include "specdec/core/draft_tree.hpp"
#include "specdec/core/prob_matrix.hpp"
#include "specdec/core/rng.hpp"
#include "specdec/core/verify_result.hpp"

namespace specdec {

class SpeculativeSampling {
 public:
  static constexpr bool kLossless = true;
  static constexpr bool kNeedsDraftProbs = true;  // every drafted token's q is read
  static constexpr bool kChainOnly = true;  // decoders refuse to compile it with a tree builder
  static constexpr const char* kName = "speculative_sampling";

  // tree: a chain (parents -1, 0, 1, ...), each slot's children source recorded.
  // target: [gamma + 1, vocab]; draft: the rows the chain's slots refer to.
  void verify(const DraftTree& tree, const ProbRows& target, const ProbRows& draft,
              RandomStream& rng, VerifyResult& out) {
    chain_.gather(kName, tree, target, draft);
    const std::int32_t gamma = tree.size();
    const std::int64_t vocab = target.vocab();
    emitted_.resize(static_cast<std::size_t>(gamma) + 1);
    const auto accepted = row_math::chain_speculative_sampling_row(
        chain_.draft(), chain_.tokens.data(), detail::ChainInputs::TargetRows{target}, gamma, vocab,
        rng.take(static_cast<std::uint64_t>(gamma) + 1), emitted_.data());

    // Check what the kernel read (target and draft rows 0..accepted), after the
    // fact: rows past the first rejection are never read, so checking them would
    // cost O(gamma * vocab) for nothing. NaN or a row that is not a distribution
    // makes the outcome meaningless, so it is an error, not a result.
    for (std::int32_t i = 0; i <= accepted; ++i)
      check_distribution(target.row(i), fmt::format("{}: target row {}", kName, i));
    for (std::int32_t i = 0; i < gamma && i <= accepted; ++i) {
      const float* q = chain_.draft_rows[static_cast<std::size_t>(i)];
      if (q == nullptr) continue;
      check_distribution({q, static_cast<std::size_t>(vocab)},
                         fmt::format("{}: draft row {}", kName, tree.children_draft_row(i - 1)));
      detail::check_drafted_token(kName, q, tree.token(i), i);
    }
    if (emitted_[static_cast<std::size_t>(accepted)] == kNoToken)
      throw InvalidDistributionError(fmt::format("{}: target row {} has no mass", kName, accepted));
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
