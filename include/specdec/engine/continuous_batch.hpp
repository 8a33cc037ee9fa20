// Continuous batching over the one round engine, as serving engines run it:
// up to max_batch requests are in flight, every step advances all of them by
// one round with ONE call to SpeculativeEngine::step (one target forward),
// and a waiting request joins as soon as one finishes. What `specdec bench
// --batch N` and the torch methods' generate_batch run; a host engine with
// its own scheduler calls step() itself (examples/host_engine).
#pragma once

#include <algorithm>
#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <vector>

#include <fmt/format.h>

#include "specdec/core/error.hpp"
#include "specdec/engine/generation.hpp"

namespace specdec {

struct BatchRun {
  std::vector<GenerationResult> results;  // in request order
  std::int64_t steps = 0;
  double mean_batch = 0.0;  // requests per step, on average
  std::int64_t peak_batch = 0;
  double seconds = 0.0;     // wall time of the whole run
  double prefill_seconds = 0.0;  // of which in begin(): the prompts' prefills
  std::int64_t new_tokens() const {
    std::int64_t n = 0;
    for (const auto& r : results) n += static_cast<std::int64_t>(r.tokens.size());
    return n;
  }
  double tokens_per_second() const { return seconds > 0 ? static_cast<double>(new_tokens()) / seconds : 0.0; }
  // Decoding alone, the prefills left out: the throughput SPIRe and MagicDec
  // compare at long context, where a prefill costs many decode steps.
  double decode_tokens_per_second() const {
    const double decode = seconds - prefill_seconds;
    return decode > 0 ? static_cast<double>(new_tokens()) / decode : 0.0;
  }
};

// make_slot(i) returns a std::unique_ptr to request i's slot: an object with
// a `request` member (the engine's Request, constructed over the slot's own
// drafter and policy, with request i's options) that stays in place until the
// request is done. prompts[i] is request i's prompt; requests begin in order.
// `fence`, when given, runs after each admission's begins, before the prefill
// clock stops: a backend whose forwards return before the device finishes
// (cuda::LlamaModel) waits there, so that a prompt's prefill is not charged
// to the first decode step.
template <class Engine, class MakeSlot>
BatchRun run_continuous_batch(Engine& engine, std::span<const std::vector<TokenId>> prompts,
                              std::size_t max_batch, MakeSlot make_slot,
                              const std::function<void()>& fence = {}) {
  if (max_batch < 1) throw InvalidArgumentError("run_continuous_batch: max_batch must be at least 1");
  using SlotPtr = decltype(make_slot(std::size_t{0}));
  struct Running {
    std::size_t index;
    SlotPtr slot;
  };
  BatchRun run;
  run.results.resize(prompts.size());
  std::vector<Running> running;
  std::vector<typename Engine::Request*> batch;
  std::size_t next = 0;
  std::int64_t batched = 0;
  const auto start = DecodeClock::now();
  auto collect = [&] {
    std::erase_if(running, [&](Running& r) {
      if (!r.slot->request.done()) return false;
      run.results[r.index] = r.slot->request.take_result();
      return true;
    });
  };
  try {
    while (next < prompts.size() || !running.empty()) {
      const auto begun = DecodeClock::now();
      const auto admitted = next;
      while (running.size() < max_batch && next < prompts.size()) {
        running.push_back(Running{next, make_slot(next)});
        engine.begin(running.back().slot->request, prompts[next]);
        ++next;
      }
      if (fence && next > admitted) fence();
      run.prefill_seconds += seconds_between(begun, DecodeClock::now());
      collect();  // a request with nothing to generate is done at begin
      if (running.empty()) continue;
      batch.clear();
      for (auto& r : running) batch.push_back(&r.slot->request);
      engine.step(std::span<typename Engine::Request* const>(batch));
      ++run.steps;
      batched += static_cast<std::int64_t>(batch.size());
      run.peak_batch = std::max<std::int64_t>(run.peak_batch, static_cast<std::int64_t>(batch.size()));
      collect();
    }
  } catch (...) {
    // The requests still open are closed in the models before the error
    // goes on (their slots are about to be destroyed).
    for (auto& r : running) {
      try {
        engine.abort(r.slot->request);
      } catch (...) {  // NOLINT(bugprone-empty-catch): the first error is the one reported
      }
    }
    throw;
  }
  run.seconds = seconds_between(start, DecodeClock::now());
  run.mean_batch = run.steps ? static_cast<double>(batched) / static_cast<double>(run.steps) : 0.0;
  return run;
}

}  // namespace specdec
