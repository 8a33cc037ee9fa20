// The statistics every decoding method reports, so methods compare side by
// side (docs/design.md §5): tau, acceptance per depth, zero-accept rounds, and
// where the time went — drafting, verification, model forwards, library
// overhead.
#pragma once

#include <cstdint>
#include <vector>

#include "specdec/core/acceptance_stats.hpp"

namespace specdec {

// Why a generation ended.
// kContextLimit: prompt + generated tokens filled the models' context (the
// smallest of the target's and the drafter's); every token produced is kept.
// kCancelled: the host ended the request between steps.
enum class StopReason : std::uint8_t { kMaxNewTokens, kStopToken, kStopString, kContextLimit, kCancelled };

inline const char* to_string(StopReason r) {
  switch (r) {
    case StopReason::kMaxNewTokens: return "max_new_tokens";
    case StopReason::kStopToken: return "stop_token";
    case StopReason::kStopString: return "stop_string";
    case StopReason::kContextLimit: return "context_limit";
    case StopReason::kCancelled: return "cancelled";
  }
  return "unknown";
}

struct Stats {
  AcceptanceStats acceptance;  // rounds, tau, per-depth conditional acceptance
  StopReason stop_reason = StopReason::kMaxNewTokens;
  std::int64_t new_tokens = 0;
  std::int64_t prompt_tokens = 0;
  // Wall-clock seconds. prefill covers the prompt (target and drafter);
  // draft = building trees (drafter forwards included), verify = the target
  // forward over the trees plus warping its rows, accept = the acceptance rule
  // plus committing the result to target and drafter.
  double total_seconds = 0.0;
  double prefill_seconds = 0.0;
  double time_to_first_token_seconds = 0.0;
  double draft_seconds = 0.0;
  double verify_seconds = 0.0;
  double accept_seconds = 0.0;
  // Time inside Model::forward/accept/rollback after the prefill, when the
  // models are wrapped in TimedModel (zero otherwise): what remains of the
  // rounds' time is the library's own overhead.
  double target_model_seconds = 0.0;
  double draft_model_seconds = 0.0;
  // Host time of the engine's steps (wall time less model calls and the
  // wait for a concurrent drafter), each step's divided among the requests
  // it advanced, and how many of this request's steps advanced others too.
  double step_host_seconds = 0.0;
  std::int64_t shared_steps = 0;
  std::int64_t target_forwards = 0;
  std::int64_t draft_forwards = 0;
  // Feature-level draft heads (EAGLE, Lyanna): time in the head's transformer
  // layer (all of it, including committing verified entries, which falls in
  // accept_seconds: draft_commit_seconds) and in its LM head.
  double draft_layer_seconds = 0.0;
  double draft_head_seconds = 0.0;
  double draft_commit_seconds = 0.0;
  // Lyanna re-sampling (§5.3) and verification fusion (§6.2): trees built
  // from a round's unused logits, their nodes sent to the target, tokens
  // accepted from nodes only they contributed, and target forwards spent on
  // verifying them separately (no fusion).
  struct Resampling {
    std::int64_t trees = 0, nodes = 0, accepted = 0, separate_forwards = 0;
  } resampling;
  // DuoDecoding (arXiv 2503.00784): the lagged tail and the concurrent draft.
  //  rounds: rounds that verified a (possibly empty) tail while drafting below it
  //  tail_nodes / tail_accepted: tail tokens verified / accepted
  //  tips: rounds whose whole tail was accepted, so the target's token after it
  //        met the sequences drafted below (sequences_drafted of them in all);
  //        chosen: that token was a sequence's first token (its continuation
  //        becomes the next tail); stale: drafts dropped because the tail was
  //        rejected before its tip
  //  top1_confusion[actual][predicted] (paper Table 4), over tips: actual 0 =
  //        the top-1 sequence's first token was the target's, 1 = it was not;
  //        predicted 0 = one sequence was drafted, 1 = more than one
  //  overlap: seconds the target forward and the concurrent draft each took,
  //        how long the target's thread then waited for the draft, and how
  //        long the draft's thread sat idle while the target still ran
  struct Lag {
    std::int64_t rounds = 0, tail_nodes = 0, tail_accepted = 0, tips = 0, sequences_drafted = 0, chosen = 0,
                 stale = 0;
    std::int64_t top1_confusion[2][2] = {{0, 0}, {0, 0}};
    double score_seconds = 0.0, draft_seconds = 0.0, target_wait_seconds = 0.0, draft_idle_seconds = 0.0;
    double worker_model_seconds = 0.0;  // draft-model time spent on the worker (overlapping the target's)

    // Sums the counters and times of another generation (a bench's totals).
    Lag& operator+=(const Lag& o) {
      rounds += o.rounds;
      tail_nodes += o.tail_nodes;
      tail_accepted += o.tail_accepted;
      tips += o.tips;
      sequences_drafted += o.sequences_drafted;
      chosen += o.chosen;
      stale += o.stale;
      for (int i = 0; i < 2; ++i)
        for (int j = 0; j < 2; ++j) top1_confusion[i][j] += o.top1_confusion[i][j];
      score_seconds += o.score_seconds;
      draft_seconds += o.draft_seconds;
      target_wait_seconds += o.target_wait_seconds;
      draft_idle_seconds += o.draft_idle_seconds;
      worker_model_seconds += o.worker_model_seconds;
      return *this;
    }
  } lag;

  // What each round drafted and what the target verified of it (a selector,
  // SV's GoodputSelector, verifies less than was drafted): nodes in all, and
  // rounds by the number of nodes verified (index = nodes).
  struct Verified {
    std::int64_t drafted_nodes = 0, verified_nodes = 0;
    std::vector<std::int64_t> rounds_by_nodes;

    void record(std::int32_t drafted, std::int32_t verified_count) {
      drafted_nodes += drafted;
      verified_nodes += verified_count;
      const auto v = static_cast<std::size_t>(verified_count);
      if (rounds_by_nodes.size() <= v) rounds_by_nodes.resize(v + 1, 0);
      ++rounds_by_nodes[v];
    }
    Verified& operator+=(const Verified& o) {
      drafted_nodes += o.drafted_nodes;
      verified_nodes += o.verified_nodes;
      if (rounds_by_nodes.size() < o.rounds_by_nodes.size()) rounds_by_nodes.resize(o.rounds_by_nodes.size(), 0);
      for (std::size_t i = 0; i < o.rounds_by_nodes.size(); ++i) rounds_by_nodes[i] += o.rounds_by_nodes[i];
      return *this;
    }
  } verified;

  std::int64_t rounds() const { return acceptance.num_rounds; }
  double decode_seconds() const { return total_seconds - prefill_seconds; }
  // New tokens per second over the whole generation (prefill included), the
  // figure a user waits for.
  double tokens_per_second() const { return total_seconds > 0 ? double(new_tokens) / total_seconds : 0.0; }
  // Everything in the rounds that is not a model call (on the calling
  // thread: draft-model time on a worker overlaps it, and the wait for the
  // worker is not the library's). A request decoded in a batch is charged
  // its share of each step, not the whole step (its wall time holds the
  // other requests' drafting and acceptance too).
  double overhead_seconds() const {
    if (shared_steps > 0) return step_host_seconds;
    return decode_seconds() - target_model_seconds - (draft_model_seconds - lag.worker_model_seconds) -
           lag.target_wait_seconds;
  }
  double overhead_per_round_seconds() const { return rounds() ? overhead_seconds() / double(rounds()) : 0.0; }
  // Drafting time outside the head's layer and LM head: token-info sampling /
  // tree building, warping, bookkeeping (feature heads only).
  double draft_other_seconds() const {
    return draft_seconds - (draft_layer_seconds - draft_commit_seconds) - draft_head_seconds;
  }
  double target_forward_seconds() const {
    return target_forwards ? target_model_seconds / double(target_forwards) : 0.0;
  }
};

}  // namespace specdec
