// Speculative decoding over many sequences at once: every round drafts a tree
// per active sequence (each with its own drafter, policy and random streams),
// verifies all trees in ONE target forward (ragged: every sequence keeps its
// own prefix length and tree shape), then accepts and commits per sequence.
// Requests finish at different times and new ones join between rounds, the
// continuous batching of serving engines (vLLM, SGLang).
//
// Sequence ids are the caller's: a request's id must already exist in the
// target model and in the drafter the factory makes for it (for the reference
// model: start_sequence), and must not be in use by another active request.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "specdec/concepts.hpp"
#include "specdec/engine/generation.hpp"
#include "specdec/engine/round_outcome.hpp"

namespace specdec {

struct BatchRequest {
  std::int32_t seq_id = 0;
  std::vector<TokenId> prompt;
  GenerationOptions options;
  TokenCallback on_token;  // streaming; may be empty
};

struct BatchResult {
  std::int32_t seq_id = 0;
  GenerationResult result;
};

// V must also provide score_batch(seqs, trees, rows) (verify/model_verifier.hpp).
template <Drafter D, class B, Verifier V, AcceptanceRule R, LengthPolicy P>
class BatchedSpeculativeDecoder {
  static_assert(TreeBuilder<B>, "BatchedSpeculativeDecoder: B must satisfy specdec::TreeBuilder");
  static_assert(RuleFitsBuilder<B, R>,
                "BatchedSpeculativeDecoder: the AcceptanceRule verifies chains only (R::kChainOnly) but the "
                "TreeBuilder can build trees; pair it with ChainBuilder, or verify trees with "
                "RecursiveRejectionSampling");

 public:
  using DrafterFactory = std::function<D(std::int32_t seq_id)>;
  using PolicyFactory = std::function<P()>;

  BatchedSpeculativeDecoder(DrafterFactory make_drafter, B builder, V& verifier, R rule, PolicyFactory make_policy)
      : make_drafter_(std::move(make_drafter)),
        builder_(std::move(builder)),
        verifier_(&verifier),
        rule_(std::move(rule)),
        make_policy_(std::move(make_policy)) {}

  // Adds a request; it prefills now and joins the next round.
  void submit(BatchRequest request) {
    request.options.validate();
    if (request.prompt.empty())
      throw InvalidArgumentError(fmt::format("BatchedSpeculativeDecoder: request {} has an empty prompt", request.seq_id));
    for (const auto& a : active_)
      if (a->request.seq_id == request.seq_id)
        throw InvalidArgumentError(fmt::format("BatchedSpeculativeDecoder: sequence {} is already active", request.seq_id));
    auto a = std::make_unique<Active>(std::move(request), make_drafter_, make_policy_);
    a->sink.limit_context(context_limit(*verifier_, a->drafter), static_cast<std::int64_t>(a->request.prompt.size()),
                          "BatchedSpeculativeDecoder");
    const auto start = Clock::now();
    verifier_->begin(a->request.seq_id, a->request.prompt);
    a->drafter.begin(a->request.prompt);
    a->out.stats.prompt_tokens = static_cast<std::int64_t>(a->request.prompt.size());
    a->out.stats.prefill_seconds = seconds_between(start, Clock::now());
    a->start = start;
    a->root = a->request.prompt.back();
    if (a->sink.full()) {  // max_new_tokens 0 or a full context: done before any round
      done_early_.push_back(finish(*a));
    } else {
      active_.push_back(std::move(a));
    }
  }

  std::size_t num_active() const { return active_.size(); }
  std::int64_t rounds() const { return rounds_; }

  // One round for every active sequence: drafting, one batched target
  // forward, acceptance and commits. Returns the requests that finished.
  std::vector<BatchResult> step() {
    std::vector<BatchResult> finished = std::move(done_early_);
    done_early_.clear();
    if (active_.empty()) return finished;
    ++rounds_;
    seqs_.clear();
    trees_.clear();
    for (auto& a : active_) {
      const auto t0 = Clock::now();
      builder_.build(a->drafter, a->sink.fit(a->policy.budget()), a->root, a->draft_rng, a->tree, a->rows);
      a->draft_seconds = seconds_between(t0, Clock::now());
      a->drafted = detail::drafted_nodes(builder_, a->tree);  // the shared builder's pool is this sequence's now
      a->out.stats.draft_seconds += a->draft_seconds;
      seqs_.push_back(a->request.seq_id);
      trees_.push_back(&a->tree);
    }
    const auto t1 = Clock::now();
    verifier_->score_batch(seqs_, trees_, target_rows_);
    const double verify = seconds_between(t1, Clock::now());
    for (std::size_t i = 0; i < active_.size(); ++i) {
      auto& a = *active_[i];
      const auto t2 = Clock::now();
      a.result = rule_.verify(a.tree, target_rows_[i], a.rows.view(), a.rule_rng);
      verifier_->commit(a.request.seq_id, a.tree, a.result);
      const auto emitted = a.result.emitted_tokens(a.tree);
      a.drafter.commit(emitted);
      auto& stats = a.out.stats;
      stats.verify_seconds += verify;  // the shared forward counts for every sequence in it
      stats.accept_seconds += seconds_between(t2, Clock::now());
      stats.acceptance.record(a.result, R::kLossless);
      // One shared target forward and no model clocks here: the outcome's
      // times are the sequence's own drafting and the shared verification.
      a.policy.observe(detail::round_outcome(a.drafted, a.tree, a.result, a.draft_seconds, verify, detail::ClockMark{},
                                             nullptr, nullptr));
      const bool first = a.out.tokens.empty();
      for (const TokenId t : emitted)
        if ((a.done = a.sink.push(t))) break;
      if (first) stats.time_to_first_token_seconds = seconds_between(a.start, Clock::now());
      a.root = emitted.back();
    }
    for (auto it = active_.begin(); it != active_.end();) {
      if ((*it)->done) {
        finished.push_back(finish(**it));
        it = active_.erase(it);
      } else {
        ++it;
      }
    }
    return finished;
  }

  // Runs rounds until every submitted request has finished.
  std::vector<BatchResult> run() {
    std::vector<BatchResult> all;
    while (!active_.empty() || !done_early_.empty())
      for (auto& r : step()) all.push_back(std::move(r));
    return all;
  }

 private:
  using Clock = DecodeClock;

  struct Active {
    Active(BatchRequest r, const DrafterFactory& make_drafter, const PolicyFactory& make_policy)
        : request(std::move(r)),
          drafter(make_drafter(request.seq_id)),
          policy(make_policy()),
          sink(request.options, out, request.on_token),
          draft_rng(request.options.seed, /*stream=*/1),
          rule_rng(request.options.seed, /*stream=*/2) {}
    BatchRequest request;
    D drafter;
    P policy;
    GenerationResult out;
    TokenSink sink;
    RandomStream draft_rng, rule_rng;
    DraftTree tree;
    ProbMatrix rows;
    VerifyResult result;
    TokenId root = kNoToken;
    Clock::time_point start;
    bool done = false;
    double draft_seconds = 0.0;  // this round's
    std::int32_t drafted = 0;    // this round's drafted nodes
  };

  BatchResult finish(Active& a) {
    a.out.stats.total_seconds = seconds_between(a.start, Clock::now());
    a.out.stats.new_tokens = static_cast<std::int64_t>(a.out.tokens.size());
    return BatchResult{a.request.seq_id, std::move(a.out)};
  }

  DrafterFactory make_drafter_;
  B builder_;
  V* verifier_;
  R rule_;
  PolicyFactory make_policy_;
  std::vector<std::unique_ptr<Active>> active_;
  std::vector<BatchResult> done_early_;
  std::int64_t rounds_ = 0;
  std::vector<std::int32_t> seqs_;
  std::vector<const DraftTree*> trees_;
  std::vector<ProbRows> target_rows_;
};

}  // namespace specdec
