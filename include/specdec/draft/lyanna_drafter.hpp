// Lyanna's hidden-state drafter (Chen et al., arXiv 2602.21224, §4.1) over any
// FeatureHead: per round one chain h_1..h_N from the target's last hidden
// state and the bonus token, then all N states through the LM head in one
// GEMM (one-pass logits, §4.2). No drafted token enters the chain, so the
// same N logit rows serve every branch of the tree (token-info sampling,
// tree/token_info_tree.hpp) and, after a rejection, re-sampling
// (carry/lyanna_resampling.hpp).
//
// It is a Drafter like any other:
//   begin(prompt):       commits the prompt's entries fuse(H_{i-1}, E(x_i)), i = 1..L-1
//   one_pass_logits(N):  this round's N logit rows (row i predicts depth i+1);
//                        none before the first commit of a one-token prompt
//   propose(request):    for each frontier slot at depth d, the warped
//                        distribution softmax(l_{d+1} + tokenInfo(parent));
//                        what any tree builder can use (the chain is
//                        recomputed deeper when a builder asks for a level
//                        beyond the rows it has)
//   commit(tokens):      commits the accepted tokens and the bonus with the
//                        target's states of the root and the accepted path,
//                        which the verifier wrote into target_features()
#pragma once

#include <algorithm>
#include <cstdint>
#include <span>
#include <vector>

#include <fmt/format.h>

#include "specdec/core/context_limit.hpp"
#include "specdec/core/draft_tree.hpp"
#include "specdec/core/error.hpp"
#include "specdec/core/prob_matrix.hpp"
#include "specdec/core/round.hpp"
#include "specdec/core/sampling_params.hpp"
#include "specdec/core/target_features.hpp"
#include "specdec/core/warp.hpp"
#include "specdec/draft/feature_head.hpp"

namespace specdec {

template <FeatureHead H>
class LyannaDrafter {
 public:
  static constexpr bool kProvidesProbs = true;

  // The rows propose() returns are warped for the request's sampling
  // (draft_sampling_for); the one-pass logits are raw.
  explicit LyannaDrafter(H& head) : cursor_(head, "LyannaDrafter") {}

  H& head() { return cursor_.head(); }
  std::int64_t vocab_size() const { return cursor_.head().vocab_size(); }
  std::int64_t max_context() const { return context_limit(cursor_.head()); }
  const TokenInfoTable& token_info() const { return cursor_.head().token_info(); }
  // The verifier writes the target's hidden states of every commit here.
  TargetFeatures& target_features() { return cursor_.features(); }

  // The request's sampling (begin).
  const SamplingParams& sampling() const { return sampling_; }

  void begin(std::span<const TokenId> prompt, const SamplingParams& sampling = {}) {
    sampling.validate();
    cursor_.begin(prompt);
    sampling_ = sampling;
    warp_params_ = draft_sampling_for(sampling);
    rows_ = 0;
    current_ = false;
  }

  // The N one-pass logit rows for the current root; row i predicts depth i+1.
  ProbRows one_pass_logits(std::int32_t steps) {
    if (steps < 0) throw InvalidArgumentError(fmt::format("LyannaDrafter: {} draft steps", steps));
    H& head = cursor_.head();
    const auto d = head.hidden_size(), v = head.vocab_size();
    rows_ = 0;
    current_ = true;
    if (!cursor_.has_output() || steps == 0) return {nullptr, 0, v};
    chain_.resize(static_cast<std::size_t>(steps * d));
    head.chain(cursor_.output(), steps, cursor_.root_position(), chain_);
    logits_.resize(static_cast<std::size_t>(steps * v));
    head.logits(chain_, logits_);
    rows_ = steps;
    return last_logits();
  }
  // The rows of the last one_pass_logits(), until the next one: after the
  // commit of a round, re-sampling reads its rows again.
  ProbRows last_logits() const { return {logits_.data(), rows_, cursor_.head().vocab_size()}; }

  void propose(const DraftRequest& request, ProbMatrix& rows) {
    if (request.tree == nullptr) throw InvalidArgumentError("LyannaDrafter: the request has no tree");
    const auto vocab = vocab_size();
    expect_draft_vocab(rows, vocab, "LyannaDrafter");
    const DraftTree& tree = *request.tree;
    for (const auto slot : request.frontier) {
      const std::int32_t depth = slot == DraftTree::kRoot ? 0 : tree.depth(slot);  // throws on a bad slot
      auto out = rows.append_row();
      if (!cursor_.has_output()) {  // no target state yet (one-token prompt): no proposal
        std::fill(out.begin(), out.end(), 0.0f);
        continue;
      }
      if (!current_ || depth >= rows_) one_pass_logits(depth + 1);
      const TokenId parent = slot == DraftTree::kRoot ? tree.root_token() : tree.token(slot);
      biased_.assign(logits_.begin() + depth * vocab, logits_.begin() + (depth + 1) * vocab);
      token_info().add_to(parent, biased_);
      warp_(biased_, warp_params_, out);
    }
  }

  void commit(std::span<const TokenId> tokens) {
    cursor_.commit(tokens);
    current_ = false;
  }
  void end() {
    rows_ = 0;
    current_ = false;
  }
  double commit_seconds() const { return cursor_.commit_seconds(); }

 private:
  detail::HeadCursor<H> cursor_;  // h_1 of the current root
  SamplingParams sampling_, warp_params_ = draft_sampling_for(SamplingParams{});  // the request's; the drafts'
  Warper warp_;
  std::vector<float> chain_, logits_, biased_;
  std::int32_t rows_ = 0;  // rows of logits_ from the last one_pass_logits()
  bool current_ = false;   // ... computed for the current root
};

}  // namespace specdec
