// A Model wrapper that clocks every call into the model, so a decoder can
// tell model time from its own overhead (Stats::overhead_seconds). It forwards
// everything else unchanged and satisfies Model itself.
#pragma once

#include <chrono>
#include <cstdint>
#include <span>

#include "specdec/concepts.hpp"

namespace specdec {

struct ModelClock {
  double seconds = 0.0;       // inside forward / accept / rollback
  std::int64_t forwards = 0;  // forward calls
};

// Adds what `clock` counted since `start` (a copy taken earlier) to a
// decoder's Stats fields; nothing when the model is not timed.
inline void record_model_time(const ModelClock* clock, const ModelClock& start, double& seconds,
                              std::int64_t& forwards) {
  if (clock == nullptr) return;
  seconds = clock->seconds - start.seconds;
  forwards = clock->forwards - start.forwards;
}

template <Model M>
class TimedModel {
 public:
  explicit TimedModel(M& model) : model_(&model) {}

  M& inner() { return *model_; }
  const ModelClock& clock() const { return clock_; }

  std::int64_t vocab_size() const { return model_->vocab_size(); }
  std::int64_t hidden_size() const { return model_->hidden_size(); }
  std::int64_t max_context() const { return model_->max_context(); }

  void open(std::int32_t seq, const CachePolicy& policy) { model_->open(seq, policy); }
  void close(std::int32_t seq) { model_->close(seq); }
  void forward(const ForwardRequest& request) {
    const Timer t(clock_);
    ++clock_.forwards;
    model_->forward(request);
  }
  void accept(std::int32_t seq, std::span<const std::int32_t> path) {
    const Timer t(clock_);
    model_->accept(seq, path);
  }
  void rollback(std::int32_t seq, std::int64_t length) {
    const Timer t(clock_);
    model_->rollback(seq, length);
  }

 private:
  struct Timer {
    using Clock = std::chrono::steady_clock;
    explicit Timer(ModelClock& c) : clock(c), start(Clock::now()) {}
    ~Timer() { clock.seconds += std::chrono::duration<double>(Clock::now() - start).count(); }
    ModelClock& clock;
    Clock::time_point start;
  };

  M* model_;
  ModelClock clock_;
};

}  // namespace specdec
