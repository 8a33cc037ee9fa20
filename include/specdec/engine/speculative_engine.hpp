// The one round engine (docs/design.md §1): every speculative method is a
// composition of its components, and a host engine drives it one round at a
// time from its own scheduler.
//
// One round, in named phases, for every request of a step:
//   budget   = request.policy.budget(), fitted to the context left
//   draft    builder.build(request.drafter, budget, root, rng, drafted, rows)
//   select   selector.select(drafted, budget, selected)    which nodes the target sees
//   score    verifier.score(all requests' trees)            ONE target forward for the batch
//   accept   rule.verify(tree, target rows, draft rows, rng)
//   commit   verifier.commit, drafter.commit, the sink gets the tokens
//   observe  request.policy.observe(outcome)
//   carry    carry.after(...): what the next round inherits (Lyanna's
//            re-sampled tree); before the next draft, carry.plan() fuses it
//            with the fresh tree or verifies it instead of drafting
//
// A request is one sequence in flight: its drafter and policy (the host's,
// borrowed), its random streams, tree, stop conditions and result. Requests
// join (begin) and leave (when done, or abort) between steps; step(request)
// is step() of a batch of one, so the batched and the single path are the
// same code. SpeculativeDecoder::generate is a loop over step.
//
// A step for several requests drafts them one after another on the calling
// thread; their target forward is one. Sequence ids are the host's: each must
// be unused in the target model (and in the request's draft model) while the
// request is open.
#pragma once

#include <cstdint>
#include <functional>
#include <span>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "specdec/carry/no_carry_over.hpp"
#include "specdec/concepts.hpp"
#include "specdec/core/draft_tree_ops.hpp"
#include "specdec/engine/generation.hpp"
#include "specdec/engine/round_outcome.hpp"
#include "specdec/engine/timed_model.hpp"
#include "specdec/select/select_all.hpp"

namespace specdec {

template <Drafter D, class B, Verifier V, AcceptanceRule R, LengthPolicy P, class S = SelectAll,
          class C = NoCarryOver>
class SpeculativeEngine {
  static_assert(BuilderFor<B, D>,
                "SpeculativeEngine: the TreeBuilder cannot build with this Drafter (TokenInfoTreeBuilder needs a "
                "OnePassDrafter such as LyannaDrafter; the other builders take any Drafter)");
  static_assert(Selector<S>, "SpeculativeEngine: S must satisfy specdec::Selector");
  static_assert(CarryOver<C, D>,
                "SpeculativeEngine: C must satisfy specdec::CarryOver with this Drafter (LyannaResampling needs a "
                "OnePassDrafter)");
  static_assert(RuleFitsBuilder<B, R>,
                "SpeculativeEngine: the AcceptanceRule verifies chains only (R::kChainOnly) but the TreeBuilder "
                "can build trees; pair it with ChainBuilder, or verify trees with RecursiveRejectionSampling");
  static_assert(RuleFitsDrafter<R, D>,
                "SpeculativeEngine: the AcceptanceRule reads every drafted token's probability (R::kNeedsDraftProbs) "
                "but the Drafter provides none (D::kProvidesProbs is false); verify with RecursiveRejectionSampling "
                "or GreedyAcceptance");
  static_assert(!FeatureDrafter<D> || FeatureVerifier<V>,
                "SpeculativeEngine: the Drafter reads the target's hidden states (target_features()) but the "
                "Verifier cannot write them (it has no begin(seq, prompt, TargetFeatures*))");

 public:
  // One sequence in flight. Constructed by the host, which keeps it in place
  // (the engine and the stop conditions point into it) until it is done.
  class Request {
   public:
    Request(std::int32_t seq, D& drafter, P& policy, GenerationOptions options, TokenCallback on_token = {})
        : seq_(seq),
          drafter_(&drafter),
          policy_(&policy),
          options_(std::move(options)),
          on_token_(std::move(on_token)),
          sink_(options_, out_, on_token_),
          draft_rng_(options_.seed, /*stream=*/1),
          rule_rng_(options_.seed, /*stream=*/2) {
      options_.validate();
    }
    Request(const Request&) = delete;
    Request& operator=(const Request&) = delete;

    std::int32_t seq() const { return seq_; }
    D& drafter() { return *drafter_; }
    P& policy() { return *policy_; }
    // True once begun, until the engine finished it (done) or it was aborted.
    bool active() const { return begun_ && !done_; }
    bool done() const { return done_; }
    // The tokens so far, the stop reason and the Stats (final once done).
    const GenerationResult& result() const { return out_; }
    GenerationResult take_result() { return std::move(out_); }
    const DraftTree& last_tree() const { return *verified_; }
    const VerifyResult& last_result() const { return result_; }
    // The clock of this request's TimedModel-wrapped draft model, if any: the
    // outcome and Stats then split draft-model time from the rest.
    void set_draft_clock(const ModelClock* clock) { draft_clock_ = clock; }

   private:
    friend class SpeculativeEngine;

    std::int32_t seq_;
    D* drafter_;
    P* policy_;
    GenerationOptions options_;
    TokenCallback on_token_;
    GenerationResult out_;
    TokenSink sink_;
    RandomStream draft_rng_, rule_rng_;
    const ModelClock* draft_clock_ = nullptr;
    DecodeClock::time_point start_;
    bool begun_ = false, done_ = false;
    TokenId root_ = kNoToken;
    typename C::State carry_;
    // This round's.
    DraftBudget budget_;
    DraftTree drafted_, selected_;
    std::int32_t fresh_nodes_ = 0;  // nodes of drafted_ drafted this round (the rest were carried over)
    const DraftTree* verified_ = &drafted_;  // drafted_, or selected_ when the selector kept less
    ProbMatrix rows_;
    VerifyResult result_;
    std::vector<TokenId> emitted_;
    std::int32_t num_drafted_ = 0;
    double draft_seconds_ = 0.0;
    ModelClock draft_model_;  // draft-model time of this round
  };

  SpeculativeEngine(B builder, V& verifier, R rule, S selector = {}, C carry = {})
      : builder_(std::move(builder)),
        verifier_(&verifier),
        rule_(std::move(rule)),
        selector_(std::move(selector)),
        carry_(std::move(carry)) {}

  B& builder() { return builder_; }
  R& rule() { return rule_; }
  S& selector() { return selector_; }
  C& carry_over() { return carry_; }
  V& verifier() { return *verifier_; }

  // The clock of a TimedModel-wrapped target: outcomes and Stats then carry
  // target-model time and forwards.
  void set_target_clock(const ModelClock* clock) { target_clock_ = clock; }

  // Called after every request's round with its verified tree and result
  // (profiling tools, e.g. Sequoia's positional acceptance measurement).
  void set_round_observer(std::function<void(const DraftTree&, const VerifyResult&)> observer) {
    round_observer_ = std::move(observer);
  }

  // Opens the request's sequence in the target and the drafter and prefills
  // the prompt; the request takes part in the next step. A request with
  // nothing to generate (max_new_tokens 0, or a full context) is done at once.
  void begin(Request& r, std::span<const TokenId> prompt) {
    if (r.begun_) throw InvalidArgumentError(fmt::format("SpeculativeEngine: request {} was already begun", r.seq_));
    if (prompt.empty()) throw InvalidArgumentError("generate: the prompt is empty (it needs at least one token)");
    auto& stats = r.out_.stats;
    stats.prompt_tokens = static_cast<std::int64_t>(prompt.size());
    r.sink_.limit_context(context_limit(*verifier_, *r.drafter_), stats.prompt_tokens, "SpeculativeEngine");
    r.start_ = DecodeClock::now();
    if constexpr (FeatureDrafter<D>)
      verifier_->begin(r.seq_, prompt, &r.drafter_->target_features());
    else
      verifier_->begin(r.seq_, prompt);
    r.drafter_->begin(prompt);
    r.begun_ = true;
    stats.prefill_seconds = seconds_between(r.start_, DecodeClock::now());
    r.root_ = prompt.back();
    if (r.sink_.full()) finish(r);
  }

  void step(Request& r) {
    Request* one[] = {&r};
    step(std::span<Request* const>(one));
  }

  // One round for every request in `batch` (all begun and not done): each
  // drafts and selects, one target forward scores them all, then each
  // accepts, commits and is observed. A request that finishes is closed in
  // the target and its drafter, and done() turns true.
  void step(std::span<Request* const> batch) {
    for (const Request* r : batch)
      if (!r->active())
        throw InvalidArgumentError(fmt::format("SpeculativeEngine::step: request {} is {}", r->seq_,
                                               r->begun_ ? "done" : "not begun"));
    // budget, draft (with what the last round carried over)
    for (Request* r : batch) {
      const auto draft0 = detail::reading(r->draft_clock_);
      const auto t0 = DecodeClock::now();
      r->budget_ = r->sink_.fit(r->policy_->budget());  // the tree fits the context left
      const auto room = r->sink_.tree_room();
      const CarryPlan plan = carry_.plan(r->carry_, r->root_, room);
      if (plan.mode == CarryMode::kInstead) {  // verify the carried tree in a forward of its own
        r->drafted_ = *plan.tree;
        r->rows_.resize(0, r->rows_.vocab());
        r->fresh_nodes_ = r->num_drafted_ = 0;
      } else {
        builder_.build(*r->drafter_, r->budget_, r->root_, r->draft_rng_, r->drafted_, r->rows_);
        r->num_drafted_ = detail::drafted_nodes(builder_, r->drafted_);  // the shared builder's pool is r's now
        r->fresh_nodes_ = r->drafted_.size();
        if (plan.mode == CarryMode::kFuse && plan.tree->size() <= room - r->fresh_nodes_)
          r->drafted_ = trie_union(r->drafted_, *plan.tree).tree;  // fresh nodes keep their indices
      }
      r->draft_seconds_ = seconds_between(t0, DecodeClock::now());
      r->draft_model_ = detail::since(r->draft_clock_, draft0);
    }
    // select
    const auto t1 = DecodeClock::now();
    selections_.clear();
    for (Request* r : batch)
      selections_.push_back(Selection{r->seq_, &r->drafted_, r->budget_, &r->selected_, false});
    selector_.select(selections_);
    items_.clear();
    for (std::size_t i = 0; i < batch.size(); ++i) {
      Request& r = *batch[i];
      r.verified_ = selections_[i].use_selected ? &r.selected_ : &r.drafted_;
      items_.push_back(ScoreItem{r.seq_, r.verified_});
    }
    const double select_seconds = seconds_between(t1, DecodeClock::now()) / static_cast<double>(batch.size());
    // score: one target forward for the whole batch
    const auto target0 = detail::reading(target_clock_);
    const auto t2 = DecodeClock::now();
    target_rows_.resize(batch.size());
    verifier_->score(items_, target_rows_);
    const double score_seconds = seconds_between(t2, DecodeClock::now());
    const auto score_model = detail::since(target_clock_, target0);
    // accept, commit, observe
    for (std::size_t i = 0; i < batch.size(); ++i) {
      Request& r = *batch[i];
      const DraftTree& tree = *r.verified_;
      const auto t3 = DecodeClock::now();
      const auto commit_target0 = detail::reading(target_clock_);
      const auto commit_draft0 = detail::reading(r.draft_clock_);
      r.result_ = rule_.verify(tree, target_rows_[i], r.rows_.view(), r.rule_rng_);
      verifier_->commit(r.seq_, tree, r.result_);
      r.emitted_ = r.result_.emitted_tokens(tree);
      r.drafter_->commit(r.emitted_);
      const auto t4 = DecodeClock::now();
      const double accept_seconds = seconds_between(t3, t4);
      auto target_model = score_model;  // a shared forward counts for every request in it
      detail::add(target_model, detail::since(target_clock_, commit_target0));
      auto draft_model = r.draft_model_;
      detail::add(draft_model, detail::since(r.draft_clock_, commit_draft0));

      auto& stats = r.out_.stats;
      stats.draft_seconds += r.draft_seconds_ + select_seconds;
      stats.verify_seconds += score_seconds;
      stats.accept_seconds += accept_seconds;
      stats.target_model_seconds += target_model.seconds;
      stats.target_forwards += target_model.forwards;
      stats.draft_model_seconds += draft_model.seconds;
      stats.draft_forwards += draft_model.forwards;
      stats.acceptance.record(r.result_, R::kLossless);
      r.policy_->observe(detail::round_outcome(r.num_drafted_, tree, r.result_, r.draft_seconds_ + select_seconds,
                                               score_seconds + accept_seconds, target_model, draft_model));
      if (round_observer_) round_observer_(tree, r.result_);
      const bool first = r.out_.tokens.empty();
      bool done = false;
      for (const TokenId t : r.emitted_)
        if ((done = r.sink_.push(t))) break;
      if (first) stats.time_to_first_token_seconds = seconds_between(r.start_, DecodeClock::now());
      r.root_ = r.emitted_.back();
      // carry-over: what the next round inherits (drafting work); a finished
      // request has no room for it, but its counts are still recorded
      const auto t5 = DecodeClock::now();
      carry_.after(r.carry_, *r.drafter_, tree, r.fresh_nodes_, r.result_, r.root_, done ? 0 : r.sink_.tree_room(),
                   stats);
      stats.draft_seconds += seconds_between(t5, DecodeClock::now());
      if (done) finish(r);
    }
  }

  // Ends a request before it is done (the host cancelled it): its sequence is
  // closed in the target and its drafter; what it generated stays in result().
  void abort(Request& r) {
    if (!r.active()) return;
    r.sink_.cancel();
    finish(r);
  }

 private:
  void finish(Request& r) {
    auto& stats = r.out_.stats;
    stats.total_seconds = seconds_between(r.start_, DecodeClock::now());
    stats.new_tokens = static_cast<std::int64_t>(r.out_.tokens.size());
    verifier_->end(r.seq_);
    r.drafter_->end();
    r.done_ = true;
  }

  B builder_;
  V* verifier_;
  R rule_;
  S selector_;
  C carry_;
  const ModelClock* target_clock_ = nullptr;
  std::function<void(const DraftTree&, const VerifyResult&)> round_observer_;
  std::vector<Selection> selections_;
  std::vector<ScoreItem> items_;
  std::vector<ProbRows> target_rows_;
};

}  // namespace specdec
