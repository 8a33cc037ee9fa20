// Lyanna's hidden-state drafter (Chen et al., arXiv 2602.21224, §4.1) over any
// FeatureHead: per round one chain h_1..h_N from the target's last hidden
// state and the bonus token, then all N states through the LM head in one
// GEMM (one-pass logits, §4.2). No drafted token enters the chain, so the
// same N logit rows serve every branch of the tree (token-info sampling,
// tree/token_info_tree.hpp) and, after a rejection, re-sampling.
//
// Lifecycle (the target's hidden states come from a TargetFeatures that the
// verifier fills, core/target_features.hpp):
//   begin(prompt):     commits the prompt's entries fuse(H_{i-1}, E(x_i)), i = 1..L-1
//   draft(N):          the N logit rows of this round (none before the first
//                      commit of a one-token prompt: no hidden state yet)
//   commit(tokens):    commits the accepted tokens and the bonus with the
//                      target's states of the root and the accepted path
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include <fmt/format.h>

#include "specdec/core/context_limit.hpp"
#include "specdec/core/error.hpp"
#include "specdec/core/prob_matrix.hpp"
#include "specdec/core/target_features.hpp"
#include "specdec/draft/feature_head.hpp"

namespace specdec {

template <FeatureHead H>
class LyannaDrafter {
 public:
  explicit LyannaDrafter(H& head) : cursor_(head, "LyannaDrafter") {}

  H& head() { return cursor_.head(); }
  std::int64_t vocab_size() const { return cursor_.head().vocab_size(); }
  std::int64_t max_context() const { return context_limit(cursor_.head()); }
  const TokenInfoTable& token_info() const { return cursor_.head().token_info(); }
  // The verifier writes the target's hidden states of every commit here.
  TargetFeatures& target_features() { return cursor_.features(); }

  void begin(std::span<const TokenId> prompt) { cursor_.begin(prompt); }

  // The N one-pass logit rows for the current root; row i predicts depth i+1.
  ProbRows draft(std::int32_t steps) {
    if (steps < 0) throw InvalidArgumentError(fmt::format("LyannaDrafter: {} draft steps", steps));
    H& head = cursor_.head();
    const auto d = head.hidden_size(), v = head.vocab_size();
    if (!cursor_.has_output() || steps == 0) return {nullptr, 0, v};
    chain_.resize(static_cast<std::size_t>(steps * d));
    head.chain(cursor_.output(), steps, cursor_.root_position(), chain_);
    logits_.resize(static_cast<std::size_t>(steps * v));
    head.logits(chain_, logits_);
    return {logits_.data(), steps, v};
  }

  void commit(std::span<const TokenId> tokens) { cursor_.commit(tokens); }
  void end() {}
  double commit_seconds() const { return cursor_.commit_seconds(); }

 private:
  detail::HeadCursor<H> cursor_;  // h_1 of the current root
  std::vector<float> chain_, logits_;
};

}  // namespace specdec
