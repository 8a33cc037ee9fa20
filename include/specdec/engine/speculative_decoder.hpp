// The speculative decoder: the round of docs/design.md §1 for one sequence,
// assembled from the five components.
//
//   budget  = policy.budget()
//   builder.build(drafter, budget, root, rng, tree, rows)    drafting
//   target  = verifier.score(seq, tree)                       one target forward
//   result  = rule.verify(tree, target, rows, rng)            accepted path + bonus
//   verifier.commit(...); drafter.commit(emitted)             caches keep the path
//   policy.observe(outcome)
//
// The root of the first round is the prompt's last token, so the first target
// forward with logits is already a verification. The decoder owns the tree,
// the draft rows and the random streams; the components are borrowed (drafter,
// verifier: they hold models and caches) or owned (builder, rule, policy:
// small value types).
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <span>
#include <utility>

#include "specdec/concepts.hpp"
#include "specdec/engine/generation.hpp"
#include "specdec/engine/round_outcome.hpp"
#include "specdec/engine/timed_model.hpp"

namespace specdec {

template <Drafter D, class B, Verifier V, AcceptanceRule R, LengthPolicy P>
class SpeculativeDecoder {
  static_assert(TreeBuilder<B>, "SpeculativeDecoder: B must satisfy specdec::TreeBuilder");
  static_assert(RuleFitsBuilder<B, R>,
                "SpeculativeDecoder: the AcceptanceRule verifies chains only (R::kChainOnly) but the TreeBuilder "
                "can build trees; pair it with ChainBuilder, or verify trees with RecursiveRejectionSampling");

 public:
  SpeculativeDecoder(D& drafter, B builder, V& verifier, R rule, P policy, std::int32_t seq = 0)
      : drafter_(&drafter),
        builder_(std::move(builder)),
        verifier_(&verifier),
        rule_(std::move(rule)),
        policy_(std::move(policy)),
        seq_(seq) {}

  // Optional clocks of TimedModel-wrapped target and draft models: with them
  // Stats splits model time from library overhead.
  void set_model_clocks(const ModelClock* target, const ModelClock* draft) {
    target_clock_ = target;
    draft_clock_ = draft;
  }

  // Called after every round with its tree and result (profiling tools, e.g.
  // Sequoia's positional acceptance measurement).
  void set_round_observer(std::function<void(const DraftTree&, const VerifyResult&)> observer) {
    round_observer_ = std::move(observer);
  }

  B& builder() { return builder_; }
  R& rule() { return rule_; }
  P& policy() { return policy_; }
  const DraftTree& last_tree() const { return tree_; }
  const VerifyResult& last_result() const { return result_; }

  GenerationResult generate(std::span<const TokenId> prompt, const GenerationOptions& options,
                            const TokenCallback& on_token = {}) {
    options.validate();
    if (prompt.empty()) throw InvalidArgumentError("generate: the prompt is empty (it needs at least one token)");
    GenerationResult out;
    Stats& stats = out.stats;
    stats.prompt_tokens = static_cast<std::int64_t>(prompt.size());
    TokenSink sink(options, out, on_token);
    sink.limit_context(context_limit(*verifier_, *drafter_), stats.prompt_tokens, "SpeculativeDecoder");
    RandomStream draft_rng(options.seed, /*stream=*/1);
    RandomStream rule_rng(options.seed, /*stream=*/2);

    const auto start = Clock::now();
    verifier_->begin(seq_, prompt);
    drafter_->begin(prompt);
    const auto prefilled = Clock::now();
    stats.prefill_seconds = seconds_between(start, prefilled);
    const ModelClock target0 = target_clock_ ? *target_clock_ : ModelClock{};
    const ModelClock draft0 = draft_clock_ ? *draft_clock_ : ModelClock{};

    TokenId root = prompt.back();
    bool done = sink.full();
    while (!done) {
      const DraftBudget budget = sink.fit(policy_.budget());  // the tree fits the context left
      const auto clocks = detail::ClockMark::now(target_clock_, draft_clock_);
      const auto t0 = Clock::now();
      builder_.build(*drafter_, budget, root, draft_rng, tree_, rows_);
      const auto t1 = Clock::now();
      const ProbRows target = verifier_->score(seq_, tree_);
      const auto t2 = Clock::now();
      result_ = rule_.verify(tree_, target, rows_.view(), rule_rng);
      verifier_->commit(seq_, tree_, result_);
      emitted_ = result_.emitted_tokens(tree_);
      drafter_->commit(emitted_);
      const auto t3 = Clock::now();

      stats.draft_seconds += seconds_between(t0, t1);
      stats.verify_seconds += seconds_between(t1, t2);
      stats.accept_seconds += seconds_between(t2, t3);
      stats.acceptance.record(result_, R::kLossless);
      policy_.observe(detail::round_outcome(detail::drafted_nodes(builder_, tree_), tree_, result_,
                                            seconds_between(t0, t1), seconds_between(t1, t3), clocks, target_clock_,
                                            draft_clock_));
      if (round_observer_) round_observer_(tree_, result_);

      const bool first = out.tokens.empty();
      for (const TokenId t : emitted_)
        if ((done = sink.push(t))) break;
      if (first) stats.time_to_first_token_seconds = seconds_between(start, Clock::now());
      root = emitted_.back();
    }
    stats.total_seconds = seconds_between(start, Clock::now());
    stats.new_tokens = static_cast<std::int64_t>(out.tokens.size());
    record_model_time(target_clock_, target0, stats.target_model_seconds, stats.target_forwards);
    record_model_time(draft_clock_, draft0, stats.draft_model_seconds, stats.draft_forwards);
    return out;
  }

 private:
  using Clock = DecodeClock;

  D* drafter_;
  B builder_;
  V* verifier_;
  R rule_;
  P policy_;
  std::int32_t seq_;
  const ModelClock* target_clock_ = nullptr;
  const ModelClock* draft_clock_ = nullptr;
  std::function<void(const DraftTree&, const VerifyResult&)> round_observer_;
  DraftTree tree_;
  ProbMatrix rows_;
  VerifyResult result_;
  std::vector<TokenId> emitted_;
};

}  // namespace specdec
