// Lyanna's decoding loop (Chen et al., arXiv 2602.21224, §4-6; docs/methods.md),
// assembled from the components: a LyannaDrafter (hidden-state chain,
// one-pass logits), the TokenInfoTreeBuilder (Algorithm 1 and re-sampling,
// Algorithm 2), a Verifier with a feature sink, and an AcceptanceRule.
//
//   L    = drafter.draft(N)                       chain + one GEMM
//   T    = BUILDSUBTREE(L, root, k), pruned to B   token-info sampling
//   T    = T ∪ T'  (fusion: last round's re-sampled tree, same root)
//   verify T in one target forward; commit; a = drafts accepted
//   if resampling and N - a - 1 > r:
//        T' = BUILDSUBTREE(L[a+1..N-1], bonus, k), pruned to B'
//        fusion: keep T' for the next round's verification (§6.2)
//        else:   verify T' now, in a target forward of its own
//
// Lossless: every child set is chosen from draft-side numbers only (top-k of
// draft logits, the union of two such sets), marked kDeterministic, and
// verified with the rule's target-only test (mode (c) of docs/methods.md);
// greedy rules give the greedy autoregressive output token for token.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <span>
#include <utility>

#include <fmt/format.h>

#include "specdec/concepts.hpp"
#include "specdec/core/draft_tree_ops.hpp"
#include "specdec/draft/lyanna_drafter.hpp"
#include "specdec/engine/generation.hpp"
#include "specdec/engine/timed_model.hpp"
#include "specdec/tree/token_info_tree.hpp"

namespace specdec {

struct LyannaOptions {
  std::int32_t depth = 3;            // N, chain steps per round
  std::int32_t branch = 4;           // k
  std::int32_t verify_budget = 12;   // B, nodes of the fresh tree
  bool resample = true;              // Algorithm 2
  bool fusion = true;                // §6.2: verify T' with the next round's tree
  std::int32_t resample_threshold = 0;  // r: re-sample only if more than r rows remain
  std::int32_t resample_budget = 4;     // B', nodes of a re-sampled tree

  void validate() const {
    if (depth <= 0 || branch <= 0 || verify_budget <= 0 || resample_budget <= 0 || resample_threshold < 0)
      throw InvalidArgumentError(fmt::format(
          "LyannaOptions: depth ({}), branch ({}), budgets ({}, {}) must be > 0 and the threshold ({}) >= 0", depth,
          branch, verify_budget, resample_budget, resample_threshold));
  }
};

template <FeatureHead H, Verifier V, AcceptanceRule R>
class LyannaDecoder {
 public:
  LyannaDecoder(LyannaDrafter<H>& drafter, V& verifier, R rule, LyannaOptions options, std::int32_t seq = 0)
      : drafter_(&drafter),
        verifier_(&verifier),
        rule_(std::move(rule)),
        options_(options),
        seq_(seq),
        builder_(options.branch, options.verify_budget) {
    options_.validate();
  }

  void set_model_clock(const ModelClock* target) { target_clock_ = target; }
  void set_round_observer(std::function<void(const DraftTree&, const VerifyResult&)> observer) {
    round_observer_ = std::move(observer);
  }
  const LyannaOptions& options() const { return options_; }

  GenerationResult generate(std::span<const TokenId> prompt, const GenerationOptions& options,
                            const TokenCallback& on_token = {}) {
    options.validate();
    if (prompt.empty()) throw InvalidArgumentError("generate: the prompt is empty (it needs at least one token)");
    GenerationResult out;
    Stats& stats = out.stats;
    stats.prompt_tokens = static_cast<std::int64_t>(prompt.size());
    TokenSink sink(options, out, on_token);
    sink.limit_context(context_limit(*verifier_, *drafter_), stats.prompt_tokens, "LyannaDecoder");
    RandomStream rule_rng(options.seed, /*stream=*/2);

    const auto start = Clock::now();
    verifier_->begin(seq_, prompt, &drafter_->target_features());
    drafter_->begin(prompt);
    const auto prefilled = Clock::now();
    stats.prefill_seconds = seconds_between(start, prefilled);
    const ModelClock target0 = target_clock_ ? *target_clock_ : ModelClock{};
    const double commit0 = drafter_->commit_seconds();

    TokenId root = prompt.back();
    pending_.clear(root);
    bool done = sink.full();
    const auto& table = drafter_->token_info();
    while (!done) {
      const auto t0 = Clock::now();
      // Near the end of the context the chain and the tree shrink to fit.
      const auto room = sink.tree_room();
      const ProbRows logits = drafter_->draft(std::min(options_.depth, room));
      builder_.build(logits, table, root, fresh_);
      if (fresh_.size() > room) fresh_ = prune_to_budget(fresh_, room).tree;
      if (pending_.size() > room - fresh_.size()) pending_.clear(root);
      const std::int32_t fresh_size = fresh_.size();
      const DraftTree* tree = &fresh_;  // verified as drafted unless fused
      if (options_.fusion && pending_.size() > 0) {
        if (pending_.root_token() != root)
          throw InvalidTreeError("LyannaDecoder: the re-sampled tree's root is not this round's root");
        fused_ = trie_union(fresh_, pending_).tree;  // fresh_'s nodes keep their indices
        tree = &fused_;
        stats.resampling.nodes += fused_.size() - fresh_size;
      }
      pending_.clear(root);
      const auto t1 = Clock::now();
      const ProbRows target = score(*tree);
      const auto t2 = Clock::now();
      result_ = rule_.verify(*tree, target, ProbRows{}, rule_rng);
      for (const auto node : result_.accepted_nodes) stats.resampling.accepted += node >= fresh_size;
      verifier_->commit(seq_, *tree, result_);
      emitted_ = result_.emitted_tokens(*tree);
      drafter_->commit(emitted_);
      const auto t3 = Clock::now();
      record_round(stats, *tree, t0, t1, t2, t3);

      const bool first = out.tokens.empty();
      for (const TokenId t : emitted_)
        if ((done = sink.push(t))) break;
      if (first) stats.time_to_first_token_seconds = seconds_between(start, Clock::now());
      root = emitted_.back();
      if (done || !options_.resample) continue;

      // Algorithm 2: re-sample under the bonus token from the unused rows.
      const auto r0 = Clock::now();
      if (!builder_.resample(logits, table, result_.num_accepted(), root, options_.resample_threshold,
                             options_.resample_budget, pending_))
        continue;
      ++stats.resampling.trees;
      stats.draft_seconds += seconds_between(r0, Clock::now());
      if (options_.fusion) continue;  // verified with the next round's tree
      const auto left = std::min(sink.tree_room(), options_.resample_budget);
      if (pending_.size() > left) pending_ = prune_to_budget(pending_, left).tree;
      // Without fusion: a target forward of its own.
      stats.resampling.nodes += pending_.size();
      ++stats.resampling.separate_forwards;
      const auto s1 = Clock::now();
      const ProbRows target2 = score(pending_);
      const auto s2 = Clock::now();
      result_ = rule_.verify(pending_, target2, ProbRows{}, rule_rng);
      stats.resampling.accepted += result_.num_accepted();
      verifier_->commit(seq_, pending_, result_);
      emitted_ = result_.emitted_tokens(pending_);
      drafter_->commit(emitted_);
      const auto s3 = Clock::now();
      record_round(stats, pending_, s1, s1, s2, s3);
      for (const TokenId t : emitted_)
        if ((done = sink.push(t))) break;
      root = emitted_.back();
      pending_.clear(root);
    }
    verifier_->end(seq_);
    drafter_->end();
    stats.total_seconds = seconds_between(start, Clock::now());
    stats.new_tokens = static_cast<std::int64_t>(out.tokens.size());
    stats.draft_commit_seconds = drafter_->commit_seconds() - commit0;
    record_model_time(target_clock_, target0, stats.target_model_seconds, stats.target_forwards);
    return out;
  }

 private:
  using Clock = DecodeClock;

  ProbRows score(const DraftTree& tree) {
    const ScoreItem item{seq_, &tree};
    ProbRows rows;
    verifier_->score(std::span(&item, 1), std::span(&rows, 1));
    return rows;
  }

  void record_round(Stats& stats, const DraftTree& tree, Clock::time_point t0, Clock::time_point t1,
                    Clock::time_point t2, Clock::time_point t3) {
    stats.draft_seconds += seconds_between(t0, t1);
    stats.verify_seconds += seconds_between(t1, t2);
    stats.accept_seconds += seconds_between(t2, t3);
    stats.acceptance.record(result_, R::kLossless);
    if (round_observer_) round_observer_(tree, result_);
  }

  LyannaDrafter<H>* drafter_;
  V* verifier_;
  R rule_;
  LyannaOptions options_;
  std::int32_t seq_;
  TokenInfoTreeBuilder builder_;
  const ModelClock* target_clock_ = nullptr;
  std::function<void(const DraftTree&, const VerifyResult&)> round_observer_;
  DraftTree fresh_, fused_, pending_;
  VerifyResult result_;
  std::vector<TokenId> emitted_;
};

}  // namespace specdec
