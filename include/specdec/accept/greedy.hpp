// Greedy verification (temperature 0; on trees SpecInfer's VerifyGreedy,
// arXiv 2305.09781, §4.3, Algorithm 2, of which a chain is the one-path case):
// from the root, descend into the child whose token is the target's argmax;
// the bonus token is the argmax after the last accepted node. On a tree this
// follows the one path that matches, so the deepest matching path wins.
// Lossless for greedy decoding: the output equals greedy autoregressive output.
#pragma once

#include <cmath>
#include <limits>

#include "specdec/accept/input_checks.hpp"
#include "specdec/core/distribution.hpp"
#include "specdec/core/draft_tree.hpp"
#include "specdec/core/prob_matrix.hpp"
#include "specdec/core/row_kernels.hpp"
#include "specdec/core/rng.hpp"
#include "specdec/core/verify_result.hpp"

namespace specdec {

class GreedyAcceptance {
 public:
  static constexpr bool kLossless = true;
  static constexpr bool kNeedsDraftProbs = false;
  static constexpr bool kGreedyOnly = true;  // lossless at temperature 0 only: the engine refuses sampled requests
  static constexpr const char* kName = "greedy";

  // target: [tree.size() + 1, vocab] rows (root first), probabilities or logits
  // (only the argmax matters, so rows are checked for NaN/Inf but not for sum).
  // draft and rng are unused.
  void verify(const DraftTree& tree, const ProbRows& target, const ProbRows& /*draft*/,
              RandomStream& /*rng*/, VerifyResult& out) const {
    detail::check_rule_inputs(kName, tree, target);
    out.clear();
    std::int32_t slot = DraftTree::kRoot;
    while (true) {
      const TokenId y = checked_argmax(target.row(slot + 1), slot);
      if (tree.num_children(slot) == 0) {
        out.bonus_token = y;
        return;
      }
      const auto c = tree.find_child(slot, y);
      out.depth_accepted.push_back(c >= 0 ? 1 : 0);
      if (c < 0) {
        out.bonus_token = y;
        return;
      }
      out.accepted_nodes.push_back(c);
      slot = c;
    }
  }

  VerifyResult verify(const DraftTree& tree, const ProbRows& target, const ProbRows& draft,
                      RandomStream& rng) const {
    VerifyResult r;
    verify(tree, target, draft, rng, r);
    return r;
  }

 private:
  // argmax (ties to the lowest id) and the NaN/+inf check, in vectorized passes.
  static TokenId checked_argmax(std::span<const float> row, std::int32_t slot) {
    if (row.empty()) throw InvalidDistributionError(fmt::format("greedy: empty target row for slot {}", slot));
    const auto n = static_cast<std::int64_t>(row.size());
    const auto scan = row_kernels::max_scan(row.data(), n);
    if (scan.bad)
      for (std::size_t i = 0; i < row.size(); ++i)
        if (std::isnan(row[i]) || row[i] == std::numeric_limits<float>::infinity())
          throw InvalidDistributionError(
              fmt::format("greedy: target row of slot {} has {} at token {}", slot, row[i], i));
    return static_cast<TokenId>(row_kernels::first_equal(row.data(), n, scan.max));
  }
};

}  // namespace specdec
