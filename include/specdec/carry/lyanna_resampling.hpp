// Lyanna's re-sampling and verification fusion as a carry-over (Chen et al.,
// arXiv 2602.21224, §5.3 Algorithm 2 and §6.2; docs/methods.md).
//
// After a round that accepted a drafts and emitted the bonus token t_gt at
// depth a + 1, the one-pass rows l_{a+2}..l_N of that round are still valid
// under t_gt (the hidden-state chain never saw a drafted token), so
//   if N - a - 1 > r:  T' = BUILDSUBTREE(l_{a+2..N}, t_gt, k), pruned to B'
// and the next round, whose root is t_gt,
//   fusion (§6.2): verifies T ∪ T' (trie union with its fresh tree T) in one
//                  target forward;
//   otherwise:     verifies T' alone, in a target forward of its own, before
//                  drafting afresh.
// Every child set of T' is top-k of draft-side numbers (kDeterministic), so
// the union is verified by the target-only rule: lossless.
#pragma once

#include <algorithm>
#include <cstdint>

#include <fmt/format.h>

#include "specdec/concepts.hpp"
#include "specdec/core/draft_tree_ops.hpp"
#include "specdec/core/error.hpp"
#include "specdec/engine/stats.hpp"
#include "specdec/tree/token_info_tree.hpp"

namespace specdec {

struct LyannaResamplingOptions {
  bool fusion = true;          // §6.2: verify T' with the next round's tree
  std::int32_t threshold = 0;  // r: re-sample only if more than r rows remain
  std::int32_t budget = 4;     // B', nodes of a re-sampled tree
  std::int32_t branch = 4;     // k of BUILDSUBTREE

  void validate() const {
    if (threshold < 0 || budget <= 0 || branch <= 0)
      throw InvalidArgumentError(fmt::format(
          "LyannaResamplingOptions: threshold ({}) must be >= 0, budget ({}) and branch ({}) > 0", threshold, budget,
          branch));
  }
};

class LyannaResampling {
 public:
  struct State {
    DraftTree pending;          // T', rooted at the next root (size 0: none)
    bool planned = false;       // the current round verifies `pending`
    CarryMode mode = CarryMode::kNone;
  };

  explicit LyannaResampling(LyannaResamplingOptions options = {})
      : options_((options.validate(), options)), builder_(options.branch, options.budget) {}

  const LyannaResamplingOptions& options() const { return options_; }

  CarryPlan plan(State& s, TokenId root, std::int32_t room) {
    s.mode = CarryMode::kNone;
    if (s.pending.size() == 0) return {};
    if (s.pending.root_token() != root)
      throw InvalidTreeError(fmt::format("LyannaResampling: the re-sampled tree's root {} is not this round's root {}",
                                         s.pending.root_token(), root));
    if (options_.fusion) {
      s.mode = CarryMode::kFuse;  // the engine fuses it if the context has room for both trees
      return {CarryMode::kFuse, &s.pending};
    }
    if (s.pending.size() > room) s.pending = prune_to_budget(s.pending, room).tree;
    if (s.pending.size() == 0) return {};
    s.mode = CarryMode::kInstead;
    return {CarryMode::kInstead, &s.pending};
  }

  // round.verified: what the target verified this round; its first
  // round.fresh_nodes nodes were drafted afresh, the rest carried.
  template <OnePassDrafter D>
  void after(State& s, D& drafter, const CarryRound& round, Stats& stats) {
    const DraftTree& tree = *round.verified;
    const VerifyResult& result = *round.result;
    stats.resampling.nodes += tree.size() - round.fresh_nodes;
    for (const auto node : result.accepted_nodes) stats.resampling.accepted += node >= round.fresh_nodes;
    if (s.mode == CarryMode::kInstead) ++stats.resampling.separate_forwards;
    const bool fresh_round = s.mode != CarryMode::kInstead;
    s.pending.clear(round.next_root);
    s.mode = CarryMode::kNone;
    // Algorithm 2 from the rows of a fresh round (a separately verified T'
    // has no rows of its own).
    if (!fresh_round || round.room <= 0) return;
    const ProbRows logits = drafter.last_logits();
    if (builder_.resample(logits, drafter.token_info(), result.num_accepted(), round.next_root, options_.threshold,
                          options_.budget, s.pending))
      ++stats.resampling.trees;
  }

 private:
  LyannaResamplingOptions options_;
  TokenInfoTreeBuilder builder_;
};

}  // namespace specdec
