// Lyanna's hidden-state drafter (paper §4; ALGORITHMS.md §3.1) over any
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

#include "specdec/core/error.hpp"
#include "specdec/core/prob_matrix.hpp"
#include "specdec/core/target_features.hpp"
#include "specdec/draft/feature_head.hpp"

namespace specdec {

template <FeatureHead H>
class LyannaDrafter {
 public:
  LyannaDrafter(H& head, const TargetFeatures& features) : head_(&head), features_(&features) {}

  H& head() { return *head_; }
  std::int64_t vocab_size() const { return head_->vocab_size(); }
  const TokenInfoTable& token_info() const { return head_->token_info(); }

  void begin(std::span<const TokenId> prompt) {
    if (prompt.empty()) throw InvalidArgumentError("LyannaDrafter: the prompt is empty (it needs at least one token)");
    head_->reset();
    root_position_ = static_cast<std::int64_t>(prompt.size()) - 1;
    have_h1_ = false;
    if (prompt.size() > 1) advance(prompt.subspan(1), 1);
  }

  // The N one-pass logit rows for the current root; row i predicts depth i+1.
  ProbRows draft(std::int32_t steps) {
    if (steps < 0) throw InvalidArgumentError(fmt::format("LyannaDrafter: {} draft steps", steps));
    const auto d = head_->hidden_size(), v = head_->vocab_size();
    if (!have_h1_ || steps == 0) return {nullptr, 0, v};
    chain_.resize(static_cast<std::size_t>(steps * d));
    head_->chain(h1_, steps, root_position_, chain_);
    logits_.resize(static_cast<std::size_t>(steps * v));
    head_->logits(chain_, logits_);
    return {logits_.data(), steps, v};
  }

  void commit(std::span<const TokenId> tokens) {
    if (tokens.empty()) return;
    advance(tokens, root_position_ + 1);
    root_position_ += static_cast<std::int64_t>(tokens.size());
  }

  // Seconds spent committing (the layer over verified entries), for the
  // draft-time breakdown.
  double commit_seconds() const { return commit_seconds_; }

 private:
  void advance(std::span<const TokenId> tokens, std::int64_t first_position) {
    commit_seconds_ += detail::commit_to_head(*head_, *features_, tokens, first_position, h1_, "LyannaDrafter");
    have_h1_ = true;
  }

  H* head_;
  const TargetFeatures* features_;
  std::int64_t root_position_ = 0;
  bool have_h1_ = false;
  std::vector<float> h1_, chain_, logits_;
  double commit_seconds_ = 0.0;
};

}  // namespace specdec
