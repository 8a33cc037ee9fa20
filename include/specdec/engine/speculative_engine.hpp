// The one round engine (docs/design.md §1): every speculative method is a
// composition of its components, and a host engine drives it one round at a
// time from its own scheduler.
//
// One round, in named phases, for every request of a step:
//   budget   = request.policy.budget(), fitted to the context left
//   draft    builder.build(request.drafter, budget, root, rng, drafted, rows)
//   select   selector.select(drafted, budget, selected)    which nodes the target sees (all;
//            a verify budget; SV's goodput allocation over a companion's scores)
//   score    verifier.score(all requests' trees)            ONE target forward for the batch
//   accept   rule.verify(tree, target rows, draft rows, rng), or by the
//            verifier in the score phase where it runs the rule itself
//            (RuleVerifier: a device verifier, whose rows stay on the GPU)
//   commit   verifier.commit, drafter.commit, the sink gets the tokens
//   observe  request.policy.observe(outcome)
//   carry    carry.after(...): what the next round inherits (Lyanna's
//            re-sampled tree, DuoDecoding's tail); before the next draft,
//            carry.plan() fuses it with the fresh tree, verifies it instead
//            of drafting, or verifies it while the builder grows drafts
//            below it (a lagged round: drafting runs during the score, on the
//            DraftWorker when one is set)
//
// A request is one sequence in flight: its drafter and policy (the host's,
// borrowed), its random streams, tree, stop conditions and result. Requests
// join (begin) and leave (when done, or abort) between steps; step(request)
// is step() of a batch of one, so the batched and the single path are the
// same code. SpeculativeDecoder::generate is a loop over step.
//
// A step for several requests drafts their chains together when the builder
// and drafter can (BatchBuilderFor and BatchDrafter: one drafter forward per
// level for the batch), and otherwise one request after another on the calling thread;
// their target forward is one. A selector that follows the requests
// (TrackingSelector, SV's companion) is told of every begin, commit and end,
// and one that learns from step times gets each step's (observe_step).
// Sequence ids are the host's: each must be unused in the target model (and
// in the request's draft model, and the selector's companion) while the
// request is open.
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <span>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "specdec/carry/no_carry_over.hpp"
#include "specdec/concepts.hpp"
#include "specdec/core/draft_tree_ops.hpp"
#include "specdec/engine/draft_worker.hpp"
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
  static_assert(!kCarryLags<C> || GrowsTail<B, D>,
                "SpeculativeEngine: the carry-over lags (C::kLags, DuoDecoding's LaggedTail) but the TreeBuilder "
                "cannot grow a carried tail (it needs grow(drafter, budget, rng, tree, rows); MultiSequenceBuilder "
                "has it)");
  static_assert(!kCarryLags<C> || !FeatureDrafter<D>,
                "SpeculativeEngine: a lagged carry-over drafts while the target runs, but a feature-level Drafter "
                "needs the target's hidden states of the tokens it drafts after");
  static_assert(!TrackingSelector<S> || std::same_as<C, NoCarryOver>,
                "SpeculativeEngine: the Selector follows each request's context (SV's companion scores every "
                "drafted tree) but the carry-over verifies carried trees it never sees; use NoCarryOver with it");
  static_assert(requires(const V& v) { { v.max_context() } -> std::convertible_to<std::int64_t>; },
                "SpeculativeEngine: the Verifier has no max_context(): say how many tokens (prompt + generated) a "
                "sequence of its model holds (kUnboundedContext for no limit), so generation stops at a full "
                "context instead of running past it");
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
          draft_rng_(options_.sampling.seed, options_.draft_stream()),
          rule_rng_(options_.sampling.seed, options_.rule_stream()) {
      options_.validate();
    }
    Request(const Request&) = delete;
    Request& operator=(const Request&) = delete;

    std::int32_t seq() const { return seq_; }
    const SamplingParams& sampling() const { return options_.sampling; }
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
    DraftTree scored_;     // a lagged round's carried tail: what the target verifies
    bool lagged_ = false;  // this round verifies a tail while drafting below it
    ModelClock draft0_;    // the draft clock when the round began
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

  // Where lagged drafts run (DuoDecoding's concurrent drafting): a worker
  // thread of the host's, alive while the engine steps; nullptr (the
  // default) drafts them on the calling thread, before the target's forward.
  void set_draft_worker(DraftWorker* worker) { worker_ = worker; }
  DraftWorker* draft_worker() const { return worker_; }

  // Called after every request's round with its verified tree and result
  // (profiling tools, e.g. Sequoia's positional acceptance measurement).
  void set_round_observer(std::function<void(const DraftTree&, const VerifyResult&)> observer) {
    round_observer_ = std::move(observer);
  }

  // The same, with the round's rows (profiling tools that read the target's
  // and the draft's distributions, e.g. `specdec profile-sv`; core/round.hpp).
  using RoundView = specdec::RoundView;
  void set_round_view_observer(std::function<void(const RoundView&)> observer) {
    round_view_observer_ = std::move(observer);
  }

  // Opens the request's sequence in the target and the drafter and prefills
  // the prompt in both (a drafter that can prefill caches all of it but the
  // root, so steps are decode only); the request takes part in the next step. A request with
  // nothing to generate (max_new_tokens 0, or a full context) is done at once.
  // A rule that verifies greedy decoding only (R::kGreedyOnly, or a
  // RuntimeRule holding one: rule_greedy_only) refuses a
  // sampled request here: it would emit the target's argmax while the
  // request asked for samples.
  void begin(Request& r, std::span<const TokenId> prompt) {
    if (r.begun_) throw InvalidArgumentError(fmt::format("SpeculativeEngine: request {} was already begun", r.seq_));
    if (prompt.empty()) throw InvalidArgumentError("generate: the prompt is empty (it needs at least one token)");
    if (rule_greedy_only(rule_) && !r.sampling().is_greedy())
      throw InvalidArgumentError(fmt::format(
          "SpeculativeEngine: request {} samples at temperature {}, but the acceptance rule ({}) verifies greedy "
          "decoding only; verify it with RecursiveRejectionSampling or another lossless rule, or set temperature 0",
          r.seq_, r.sampling().temperature, rule_name(rule_)));
    auto& stats = r.out_.stats;
    stats.prompt_tokens = static_cast<std::int64_t>(prompt.size());
    r.sink_.limit_context(context_limit(*verifier_, *r.drafter_), stats.prompt_tokens, "SpeculativeEngine");
    r.start_ = DecodeClock::now();
    // With a draft worker, a drafter that can prefill does so there while the
    // target prefills here (DuoDecoding's parallel first iteration).
    constexpr bool kOverlap = !FeatureDrafter<D> && requires(D& d) { d.prefill(); };
    const bool overlap = kOverlap && worker_ != nullptr;
    if constexpr (kOverlap)
      if (overlap) worker_->submit([&r, prompt] {
          r.drafter_->begin(prompt, r.options_.sampling);
          r.drafter_->prefill();
        });
    try {
      if constexpr (FeatureDrafter<D>)
        verifier_->begin(r.seq_, prompt, &r.drafter_->target_features());
      else
        verifier_->begin(r.seq_, prompt);
    } catch (...) {
      if (overlap) wait_quietly();
      throw;
    }
    try {
      if (overlap) {
        worker_->wait();
      } else {
        r.drafter_->begin(prompt, r.options_.sampling);
        if constexpr (kOverlap) r.drafter_->prefill();
      }
    } catch (...) {
      // The request never began: its sequences are closed again.
      verifier_->end(r.seq_);
      if (overlap) r.drafter_->end();
      throw;
    }
    if constexpr (TrackingSelector<S>) {
      try {
        selector_.begin(r.seq_, prompt);
      } catch (...) {
        verifier_->end(r.seq_);
        r.drafter_->end();
        throw;
      }
    }
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
  //
  // A request whose carry-over lags (LaggedTail, DuoDecoding) verifies the
  // tail drafted last round while its drafter drafts below the tail: on the
  // draft worker, concurrently with the target's forward, when one is set;
  // before the forward on this thread otherwise (same tokens, same law).
  void step(std::span<Request* const> batch) {
    for (const Request* r : batch)
      if (!r->active())
        throw InvalidArgumentError(fmt::format("SpeculativeEngine::step: request {} is {}", r->seq_,
                                               r->begun_ ? "done" : "not begun"));
    StepTimes t = start_step(batch);
    draft_phase(batch);
    t.concurrent = worker_ != nullptr && !lagged_.empty();
    if (t.concurrent)  // lagged drafts: on the worker while the target scores, or here
      worker_->submit([this, &t] { t.lagged_seconds = draft_lagged(); });
    else if (!lagged_.empty())
      t.lagged_seconds = draft_lagged();
    try {
      select_phase(batch, t);
      score_phase(batch, t);
    } catch (...) {
      if (t.concurrent) wait_quietly();  // the worker still writes into these requests
      throw;
    }
    if (t.concurrent) {
      const auto w = DecodeClock::now();
      worker_->wait();
      t.wait_seconds = seconds_between(w, DecodeClock::now());
    }
    for (Request* r : lagged_) r->draft_model_ = detail::since(r->draft_clock_, r->draft0_);
    for (std::size_t i = 0; i < batch.size(); ++i)
      accept_phase(*batch[i], target_rows_[i], kVerifierAccepts ? &fused_results_[i] : nullptr, t);
    end_step(batch, t);
  }

  // Ends a request before it is done (the host cancelled it): its sequence is
  // closed in the target and its drafter; what it generated stays in result().
  void abort(Request& r) {
    if (!r.active()) return;
    r.sink_.cancel();
    finish(r);
  }

 private:
  // Chains of a step are drafted together, one forward per level, when the
  // builder grows them in lockstep and the drafter batches its forwards.
  static constexpr bool kDraftsBatched = BatchBuilderFor<B, D> && BatchDrafter<D>;
  // The verifier runs the rule where its rows are (a device verifier).
  static constexpr bool kVerifierAccepts = RuleVerifier<V, R>;

  // One step's clocks: its start, the model clocks at its start (the
  // target's, and each distinct drafter's: what is left of the wall time is
  // the host's), and what the phases measured.
  struct StepTimes {
    DecodeClock::time_point start;
    ModelClock target0;
    double select_seconds = 0.0;  // per request
    double score_seconds = 0.0, wait_seconds = 0.0, lagged_seconds = 0.0;
    ModelClock score_model;  // the target's forward(s) of the score phase
    bool concurrent = false;  // lagged drafts ran on the worker
  };
  StepTimes start_step(std::span<Request* const> batch) {
    StepTimes t;
    t.start = DecodeClock::now();
    t.target0 = detail::reading(target_clock_);
    step_clocks_.clear();
    for (Request* r : batch)
      if (r->draft_clock_ != nullptr &&
          std::none_of(step_clocks_.begin(), step_clocks_.end(), [&](const auto& c) { return c.first == r->draft_clock_; }))
        step_clocks_.emplace_back(r->draft_clock_, *r->draft_clock_);
    return t;
  }

  // budget, draft: each request's budget (fitted to the context left) and
  // its tree, as its carry-over plans it (draft_request); the chains of
  // requests that draft in lockstep in one batched build.
  void draft_phase(std::span<Request* const> batch) {
    lagged_.clear();
    build_items_.clear();
    build_requests_.clear();
    for (Request* r : batch) draft_request(*r, batch.size());
    if (!build_items_.empty()) draft_batched();
  }

  // The one place the carry modes are dispatched:
  //   kLagged   the tail is verified while drafts grow below it (plan_lagged)
  //   kNone     a fresh tree, with the batch's others when they draft in lockstep
  //   kInstead  the carried tree is verified in place of a fresh one
  //   kFuse     a fresh tree, trie-unioned with the carried one if it fits
  void draft_request(Request& r, std::size_t batch_size) {
    r.draft0_ = detail::reading(r.draft_clock_);
    const auto t0 = DecodeClock::now();
    r.budget_ = r.sink_.fit(r.policy_->budget());  // the tree fits the context left
    const auto room = r.sink_.tree_room();
    const CarryPlan plan = carry_.plan(r.carry_, r.root_, room);
    r.lagged_ = plan.mode == CarryMode::kLagged;
    if (r.lagged_) {
      plan_lagged(r, plan, room);
      return;
    }
    if constexpr (kDraftsBatched) {
      if (plan.mode == CarryMode::kNone && batch_size > 1) {  // drafted below, with the batch's others
        build_items_.push_back(BuildItem<D>{r.drafter_, r.budget_, r.root_, &r.draft_rng_, &r.drafted_, &r.rows_});
        build_requests_.push_back(&r);
        return;
      }
    }
    if (plan.mode == CarryMode::kInstead) {
      r.drafted_ = *plan.tree;
      r.rows_.resize(0, r.rows_.vocab());
      r.fresh_nodes_ = r.num_drafted_ = 0;
    } else {
      builder_.build(*r.drafter_, r.budget_, r.root_, r.draft_rng_, r.drafted_, r.rows_);
      r.num_drafted_ = detail::drafted_nodes(builder_, r.drafted_);  // the shared builder's pool is r's now
      r.fresh_nodes_ = r.drafted_.size();
      if (plan.mode == CarryMode::kFuse && plan.tree->size() <= room - r.fresh_nodes_)
        r.drafted_ = trie_union(r.drafted_, *plan.tree).tree;  // fresh nodes keep their indices
    }
    r.draft_seconds_ = seconds_between(t0, DecodeClock::now());
    r.draft_model_ = detail::since(r.draft_clock_, r.draft0_);
  }

  // select: which drafted nodes the target sees (a lagged tail is verified
  // whole: its drafts hang below its tip); each request's ScoreItem.
  void select_phase(std::span<Request* const> batch, StepTimes& t) {
    const auto t1 = DecodeClock::now();
    selections_.clear();
    for (Request* r : batch) {
      r->verified_ = r->lagged_ ? &r->scored_ : &r->drafted_;
      if (!r->lagged_)
        selections_.push_back(Selection{r->seq_, &r->drafted_, r->budget_, &r->selected_, false, r->rows_.view(),
                                        r->options_.sampling});
    }
    if (!selections_.empty()) selector_.select(selections_);
    items_.clear();
    std::size_t next_selection = 0;
    for (Request* r : batch) {
      if (!r->lagged_ && selections_[next_selection++].use_selected) r->verified_ = &r->selected_;
      items_.push_back(ScoreItem{r->seq_, r->verified_, r->options_.sampling});
    }
    t.select_seconds = seconds_between(t1, DecodeClock::now()) / static_cast<double>(batch.size());
  }

  // score: one target forward for the whole batch. A verifier that runs the
  // rule itself (RuleVerifier: the rows stay on the device) accepts here
  // too, each request drawing from its own rule stream; the round's target
  // rows are then empty on the host.
  void score_phase(std::span<Request* const> batch, StepTimes& t) {
    const auto target0 = detail::reading(target_clock_);
    const auto t2 = DecodeClock::now();
    target_rows_.assign(batch.size(), ProbRows{});
    if constexpr (kVerifierAccepts) {
      draft_views_.clear();
      rule_rngs_.clear();
      for (Request* r : batch) {
        draft_views_.push_back(r->rows_.view());
        rule_rngs_.push_back(&r->rule_rng_);
      }
      fused_results_.resize(batch.size());
      verifier_->verify_round(rule_, std::span<const ScoreItem>(items_), std::span<const ProbRows>(draft_views_),
                              std::span<RandomStream* const>(rule_rngs_), std::span<VerifyResult>(fused_results_));
    } else {
      verifier_->score(items_, target_rows_);
    }
    t.score_seconds = seconds_between(t2, DecodeClock::now());
    t.score_model = detail::since(target_clock_, target0);
  }

  // accept, commit, observe, emit, carry: one request's end of the round.
  // `fused`: the outcome the verifier already found (RuleVerifier), else null.
  void accept_phase(Request& r, const ProbRows& target_rows, VerifyResult* fused, const StepTimes& t) {
    const DraftTree& tree = *r.verified_;
    const auto t3 = DecodeClock::now();
    const auto commit_target0 = detail::reading(target_clock_);
    const auto commit_draft0 = detail::reading(r.draft_clock_);
    if (fused != nullptr)
      r.result_ = std::move(*fused);
    else
      r.result_ = rule_.verify(tree, target_rows, r.rows_.view(), r.rule_rng_);
    verifier_->commit(r.seq_, tree, r.result_);
    if constexpr (TrackingSelector<S>) selector_.commit(r.seq_, tree, r.result_);
    r.emitted_ = r.result_.emitted_tokens(tree);
    r.drafter_->commit(r.emitted_);
    RoundTimes round;
    round.accept_seconds = seconds_between(t3, DecodeClock::now());
    round.target_model = t.score_model;  // a shared forward counts for every request in it
    detail::add(round.target_model, detail::since(target_clock_, commit_target0));
    round.draft_model = r.draft_model_;
    detail::add(round.draft_model, detail::since(r.draft_clock_, commit_draft0));
    record_round(r, t, round);
    r.policy_->observe(detail::round_outcome(r.num_drafted_, tree, r.result_, r.draft_seconds_ + t.select_seconds,
                                             t.score_seconds + round.accept_seconds, round.target_model,
                                             round.draft_model));
    if (round_observer_) round_observer_(tree, r.result_);
    if (round_view_observer_) round_view_observer_(RoundView{r.seq_, &tree, target_rows, r.rows_.view(), &r.result_});
    auto& stats = r.out_.stats;
    const bool first = r.out_.tokens.empty();
    bool done = false;
    for (const TokenId token : r.emitted_)
      if ((done = r.sink_.push(token))) break;
    if (first) stats.time_to_first_token_seconds = seconds_between(r.start_, DecodeClock::now());
    r.root_ = r.emitted_.back();
    // carry-over: what the next round inherits (drafting work); a finished
    // request has no room for it, but its counts are still recorded
    const auto t5 = DecodeClock::now();
    const CarryRound carried{&tree,      r.fresh_nodes_, &r.drafted_, r.rows_.view(),
                             &r.result_, r.root_,        done ? 0 : r.sink_.tree_room()};
    carry_.after(r.carry_, *r.drafter_, carried, stats);
    stats.draft_seconds += seconds_between(t5, DecodeClock::now());
    if (done) finish(r);
  }

  // One request's round, folded into its Stats in one place.
  struct RoundTimes {
    double accept_seconds = 0.0;
    ModelClock target_model, draft_model;
  };
  void record_round(Request& r, const StepTimes& t, const RoundTimes& round) {
    auto& stats = r.out_.stats;
    stats.draft_seconds += r.draft_seconds_ + t.select_seconds;
    stats.verify_seconds += t.score_seconds;
    stats.accept_seconds += round.accept_seconds;
    stats.target_model_seconds += round.target_model.seconds;
    stats.target_forwards += round.target_model.forwards;
    stats.draft_model_seconds += round.draft_model.seconds;
    stats.draft_forwards += round.draft_model.forwards;
    stats.acceptance.record(r.result_, rule_lossless(rule_) && selector_lossless());
    stats.verified.record(r.num_drafted_, r.verified_->size());
    if (r.lagged_) {
      stats.lag.score_seconds += t.score_seconds;
      stats.lag.draft_seconds += r.draft_seconds_;
      stats.lag.target_wait_seconds += t.wait_seconds;
      if (t.concurrent) {
        stats.lag.draft_idle_seconds += std::max(0.0, t.score_seconds - t.lagged_seconds);
        stats.lag.worker_model_seconds += r.draft_model_.seconds;
      }
    }
  }

  // Host time of the step: its wall time less the model calls on this
  // thread and the wait for the worker (whose draft forwards overlap),
  // shared among the requests it advanced; and the step's timing for a
  // selector that learns from it.
  void end_step(std::span<Request* const> batch, const StepTimes& t) {
    double model_seconds = detail::since(target_clock_, t.target0).seconds + t.wait_seconds;
    for (const auto& [clock, mark] : step_clocks_) model_seconds += detail::since(clock, mark).seconds;
    if (t.concurrent)
      for (const Request* r : lagged_) model_seconds -= r->draft_model_.seconds;  // counted on the worker
    const double host_share = std::max(0.0, seconds_between(t.start, DecodeClock::now()) - model_seconds) /
                              static_cast<double>(batch.size());
    for (Request* r : batch) {
      r->out_.stats.step_host_seconds += host_share;
      r->out_.stats.shared_steps += batch.size() > 1;
    }
    if constexpr (requires(S& s, const StepTiming& st) { s.observe_step(st); }) {
      std::int64_t scored = 0;
      for (const auto& item : items_) scored += item.tree->size() + 1;
      selector_.observe_step(StepTiming{static_cast<std::int32_t>(batch.size()), scored, t.score_seconds,
                                        seconds_between(t.start, DecodeClock::now())});
    }
  }

  // A lagged round: the target scores the carried tail (trimmed to the room
  // by the plan) and the builder grows below it within what room is left.
  void plan_lagged(Request& r, const CarryPlan& plan, std::int32_t room) {
    if constexpr (kCarryLags<C>) {
      r.scored_ = *plan.tree;
      r.drafted_ = *plan.tree;
      r.rows_.assign(plan.rows);
      const auto left = std::max(0, room - r.scored_.size());
      r.budget_.max_nodes = std::min(r.budget_.max_nodes, left);
      r.budget_.max_depth = std::min(r.budget_.max_depth, left);
      r.budget_.verify_nodes = std::min(r.budget_.verify_nodes, left);
      r.fresh_nodes_ = 0;  // the target verifies carried nodes only
      lagged_.push_back(&r);
    } else {
      (void)r, (void)plan, (void)room;
      throw InvalidArgumentError("SpeculativeEngine: the carry-over planned a lagged round but does not declare kLags");
    }
  }

  // Grows every lagged request's drafts below its tail (on the worker, or on
  // the calling thread); returns the seconds it took.
  double draft_lagged() {
    const auto start = DecodeClock::now();
    if constexpr (kCarryLags<C>) {
      for (Request* r : lagged_) {
        const auto t0 = DecodeClock::now();
        const auto carried = r->drafted_.size();
        builder_.grow(*r->drafter_, r->budget_, r->draft_rng_, r->drafted_, r->rows_);
        r->num_drafted_ = r->drafted_.size() - carried;
        r->draft_seconds_ = seconds_between(t0, DecodeClock::now());
      }
    }
    return seconds_between(start, DecodeClock::now());
  }

  // Drafts the requests of build_items_ in one batched build (one drafter
  // forward per level for all of them). As with the target's forward, the
  // shared time and forwards count for every request in them.
  void draft_batched() {
    if constexpr (kDraftsBatched) {
      const ModelClock* clock = nullptr;  // the drafters' model is shared: any request's clock is its
      for (const Request* r : build_requests_) clock = r->draft_clock_ ? r->draft_clock_ : clock;
      const auto model0 = detail::reading(clock);
      const auto t0 = DecodeClock::now();
      builder_.build_batch(std::span<const BuildItem<D>>(build_items_));
      const double seconds = seconds_between(t0, DecodeClock::now());
      const auto model = detail::since(clock, model0);
      for (Request* r : build_requests_) {
        r->num_drafted_ = r->fresh_nodes_ = r->drafted_.size();
        r->draft_seconds_ = seconds;
        r->draft_model_ = model;
      }
    }
  }
  // After a failed score: lets the worker finish; the score's error wins.
  void wait_quietly() {
    try {
      worker_->wait();
    } catch (...) {  // NOLINT(bugprone-empty-catch): the score's exception is the one reported
    }
  }

  bool selector_lossless() const {
    if constexpr (requires(const S& s) { { s.lossless() } -> std::convertible_to<bool>; })
      return selector_.lossless();
    else
      return true;
  }

  void finish(Request& r) {
    auto& stats = r.out_.stats;
    stats.total_seconds = seconds_between(r.start_, DecodeClock::now());
    stats.new_tokens = static_cast<std::int64_t>(r.out_.tokens.size());
    verifier_->end(r.seq_);
    r.drafter_->end();
    if constexpr (TrackingSelector<S>) selector_.end(r.seq_);
    r.done_ = true;
  }

  B builder_;
  V* verifier_;
  R rule_;
  S selector_;
  C carry_;
  const ModelClock* target_clock_ = nullptr;
  std::function<void(const DraftTree&, const VerifyResult&)> round_observer_;
  std::function<void(const RoundView&)> round_view_observer_;
  DraftWorker* worker_ = nullptr;
  std::vector<Request*> lagged_;
  std::vector<BuildItem<D>> build_items_;  // requests drafted in one batched build
  std::vector<Request*> build_requests_;   // ... and whose they are
  std::vector<std::pair<const ModelClock*, ModelClock>> step_clocks_;  // a step's drafter clocks at its start
  std::vector<Selection> selections_;
  std::vector<ScoreItem> items_;
  std::vector<ProbRows> target_rows_;
  std::vector<ProbRows> draft_views_;        // a RuleVerifier's round: each request's draft rows,
  std::vector<RandomStream*> rule_rngs_;     // its rule stream,
  std::vector<VerifyResult> fused_results_;  // and its outcome
};

}  // namespace specdec
