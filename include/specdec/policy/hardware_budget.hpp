// DuoDecoding's hardware-aware draft budget (Lv et al., arXiv 2503.00784,
// §3.1): the draft budget gamma is the cost coefficient c = (time of one
// target forward on its resource) / (time of one draft forward on its own),
// so the drafter fills the target's forward and neither waits for the other.
//
// measure_cost_coefficient() times both on the resources they run on: the
// target on the calling thread, the draft on the DraftWorker, at the same
// time (on a CPU the two share one memory bus, and the contention is part of
// what they cost). Each figure is the median of timed forwards at a fixed
// context length, of one token each as in the paper (its GPU target verifies
// a tail at the cost of one step; a CPU target does not, which
// docs/RESULTS.md measures). Call it again to re-measure (another load on the
// machine, another context length).
//
// snap_budget() turns c into gamma: round(c), or a neighbour (round(c) +- 1,
// within 1 of c) with more divisors up to 8, which lets the multi-sequence builder split the
// budget into more sequences (the paper's code enables multi-sequence
// drafting for gamma 12, 16 and 24 only).
#pragma once

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <numeric>
#include <vector>

#include <fmt/format.h>

#include "specdec/concepts.hpp"
#include "specdec/core/error.hpp"
#include "specdec/core/logit_rows.hpp"

namespace specdec {

inline std::int32_t divisors_up_to_8(std::int32_t n) {
  std::int32_t count = 0;
  for (std::int32_t d = 1; d <= std::min(n, 8); ++d) count += n % d == 0;
  return count;
}

// gamma from the cost coefficient c (>= 1 whatever c is).
inline std::int32_t snap_budget(double c) {
  if (!(c > 0.0) || !std::isfinite(c))
    throw InvalidArgumentError(fmt::format("snap_budget: the cost coefficient must be positive and finite, got {}", c));
  const auto nearest = std::max<std::int32_t>(1, static_cast<std::int32_t>(std::lround(c)));
  std::int32_t best = nearest;
  for (const auto g : {nearest - 1, nearest + 1}) {
    if (g < 1 || std::abs(g - c) > 1.0) continue;  // a neighbour, not a jump
    const auto more = divisors_up_to_8(g) - divisors_up_to_8(best);
    if (more > 0 || (more == 0 && std::abs(g - c) < std::abs(best - c))) best = g;
  }
  return best;
}

struct CostCoefficient {
  double target_seconds = 0.0;     // median target forward of target_tokens tokens
  double draft_seconds = 0.0;      // median draft forward of one token
  std::int32_t target_tokens = 1;  // tokens in each timed target forward
  bool concurrent = false;         // the two were timed at the same time on their own threads
  double c() const { return draft_seconds > 0.0 ? target_seconds / draft_seconds : 0.0; }
  std::int32_t gamma() const { return snap_budget(c()); }
};

struct CostMeasureOptions {
  std::int32_t target_seq = 1 << 30;  // scratch sequence ids (opened, then closed)
  std::int32_t draft_seq = (1 << 30) + 1;
  std::int64_t context = 128;  // tokens cached before the timed forwards
  std::int32_t forwards = 21;      // timed forwards per model (after 2 untimed)
  std::int32_t target_tokens = 1;  // tokens per target forward (the paper: one forward pass of each model)
  void validate() const {
    if (context < 1 || forwards < 1 || target_tokens < 1)
      throw InvalidArgumentError(fmt::format(
          "CostMeasureOptions: context ({}), forwards ({}) and target_tokens ({}) must be >= 1", context, forwards,
          target_tokens));
  }
};

namespace detail {

// Median seconds of `forwards` forwards of `tokens` new tokens after a
// `context`-token prefix on a scratch sequence of `model` (opened and closed
// here). The logits are written, as a round would.
template <Model M>
double median_forward_seconds(M& model, std::int32_t seq, std::int64_t context, std::int32_t tokens,
                              std::int32_t forwards) {
  const auto vocab = model.vocab_size();
  if (context + tokens > model.max_context())
    throw InvalidArgumentError(fmt::format("measure_cost_coefficient: {} + {} tokens exceed the model's context of {}",
                                           context, tokens, model.max_context()));
  model.open(seq, CachePolicy{});
  struct Close {
    M& m;
    std::int32_t seq;
    ~Close() { m.close(seq); }
  } close{model, seq};
  std::vector<TokenId> ids(static_cast<std::size_t>(context + tokens));
  for (std::size_t i = 0; i < ids.size(); ++i) ids[i] = static_cast<TokenId>((i * 7 + 3) % static_cast<std::size_t>(vocab));
  std::vector<std::int64_t> positions(ids.size());
  std::iota(positions.begin(), positions.end(), std::int64_t{0});
  const SequenceInput prefix{seq, std::span(ids).first(static_cast<std::size_t>(context)),
                             std::span(positions).first(static_cast<std::size_t>(context))};
  model.forward(ForwardRequest{std::span(&prefix, 1)});
  std::vector<std::int32_t> all(static_cast<std::size_t>(context));
  std::iota(all.begin(), all.end(), 0);
  model.accept(seq, all);
  const SequenceInput step{seq, std::span(ids).subspan(static_cast<std::size_t>(context)),
                           std::span(positions).subspan(static_cast<std::size_t>(context))};
  HostRows logits;
  ForwardRequest request{std::span(&step, 1)};
  request.logits = logits.view(tokens, vocab);
  std::vector<double> times;
  for (std::int32_t i = 0; i < forwards + 2; ++i) {  // each forward drops what the last one staged
    const auto t0 = std::chrono::steady_clock::now();
    model.forward(request);
    const std::chrono::duration<double> dt = std::chrono::steady_clock::now() - t0;
    if (i >= 2) times.push_back(dt.count());
  }
  std::nth_element(times.begin(), times.begin() + static_cast<std::ptrdiff_t>(times.size() / 2), times.end());
  return times[times.size() / 2];
}

template <Model T, Model D, class W>
CostCoefficient time_both(T& target, D& draft, W* worker, std::int32_t target_tokens,
                          const CostMeasureOptions& o) {
  CostCoefficient out;
  out.target_tokens = target_tokens;
  out.concurrent = worker != nullptr;
  const auto time_draft = [&] {
    out.draft_seconds = median_forward_seconds(draft, o.draft_seq, o.context, 1, o.forwards);
  };
  if (worker != nullptr) {
    worker->submit(time_draft);
    try {
      out.target_seconds = median_forward_seconds(target, o.target_seq, o.context, target_tokens, o.forwards);
    } catch (...) {
      try {
        worker->wait();
      } catch (...) {  // NOLINT(bugprone-empty-catch): the target's error is the one reported
      }
      throw;
    }
    worker->wait();
  } else {
    out.target_seconds = median_forward_seconds(target, o.target_seq, o.context, target_tokens, o.forwards);
    time_draft();
  }
  return out;
}

}  // namespace detail

// What runs the draft's timed forwards beside the target: the engine's
// DraftWorker (engine/draft_worker.hpp), or a host's own thread: submit a
// task, then wait for it (rethrowing what it threw).
template <class W>
concept TaskRunner = requires(W& w, std::function<void()> task) {
  w.submit(std::move(task));
  w.wait();
};

// The cost coefficient of `target` (run on this thread) and `draft` (run on
// `worker`, or after the target on this thread when worker is null).
template <Model T, Model D, TaskRunner W>
CostCoefficient measure_cost_coefficient(T& target, D& draft, W* worker, const CostMeasureOptions& o = {}) {
  o.validate();
  return detail::time_both(target, draft, worker, o.target_tokens, o);
}
template <Model T, Model D>
CostCoefficient measure_cost_coefficient(T& target, D& draft, std::nullptr_t, const CostMeasureOptions& o = {}) {
  o.validate();
  struct None {
    void submit(std::function<void()>) {}
    void wait() {}
  };
  return detail::time_both(target, draft, static_cast<None*>(nullptr), o.target_tokens, o);
}

// A fixed budget of gamma drafted tokens a round, from the cost coefficient
// (or given). Lossless whatever gamma is: it only sets how much is drafted.
class HardwareBudget {
 public:
  explicit HardwareBudget(std::int32_t gamma) { set_gamma(gamma); }
  explicit HardwareBudget(const CostCoefficient& cost) : HardwareBudget(cost.gamma()) {}

  std::int32_t gamma() const { return gamma_; }
  void set_gamma(std::int32_t gamma) {
    if (gamma < 1) throw InvalidArgumentError(fmt::format("HardwareBudget: gamma must be >= 1, got {}", gamma));
    gamma_ = gamma;
  }

  DraftBudget budget() const { return DraftBudget{gamma_, gamma_, gamma_, 0.0f}; }
  void observe(const RoundOutcome& /*outcome*/) {}

 private:
  std::int32_t gamma_ = 1;
};

}  // namespace specdec
