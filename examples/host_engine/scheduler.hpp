// The host engine's request scheduler: requests wait in a queue, up to
// `max_batch` run at once, and every iteration advances all running requests
// by one speculative round with ONE step() of the method (one target forward
// for all of them). Finished requests leave and waiting ones join between
// steps: continuous batching, as serving engines do it. The method is any
// the registry builds by name (methods.hpp), behind specdec::AnyDecoder.
#pragma once

#include <algorithm>
#include <cstdint>
#include <deque>
#include <map>
#include <vector>

#include "specdec/engine/any_decoder.hpp"

namespace host_engine {

class Scheduler {
 public:
  Scheduler(specdec::AnyDecoder& method, std::size_t max_batch) : method_(&method), max_batch_(max_batch) {}

  // Queues a request; returns its id (also its sequence id in the models).
  std::int32_t submit(std::vector<specdec::TokenId> prompt, specdec::GenerationOptions options) {
    const auto id = next_id_++;
    waiting_.push_back(Job{id, std::move(prompt), std::move(options)});
    return id;
  }

  // Runs until every request has finished; returns each one's result by id.
  std::map<std::int32_t, specdec::GenerationResult> run() {
    std::map<std::int32_t, specdec::GenerationResult> done;
    while (!waiting_.empty() || !running_.empty()) {
      while (running_.size() < max_batch_ && !waiting_.empty()) {  // admit
        const Job job = std::move(waiting_.front());
        waiting_.pop_front();
        method_->begin(job.id, job.prompt, job.options);
        running_.push_back(job.id);
      }
      std::size_t active = 0;
      for (const auto id : running_) active += method_->done(id) ? 0 : 1;
      if (active > 0) {
        method_->step();  // every running request, one target forward
        ++steps_;
        peak_batch_ = std::max(peak_batch_, active);
      }
      std::erase_if(running_, [&](std::int32_t id) {
        if (!method_->done(id)) return false;
        done[id] = method_->take_result(id);
        return true;
      });
    }
    return done;
  }

  std::int64_t steps() const { return steps_; }
  std::size_t peak_batch() const { return peak_batch_; }

 private:
  struct Job {
    std::int32_t id;
    std::vector<specdec::TokenId> prompt;
    specdec::GenerationOptions options;
  };

  specdec::AnyDecoder* method_;
  std::size_t max_batch_;
  std::int32_t next_id_ = 0;
  std::deque<Job> waiting_;
  std::vector<std::int32_t> running_;
  std::int64_t steps_ = 0;
  std::size_t peak_batch_ = 0;
};

// What a run of the scheduler gives back.
struct Outputs {
  std::map<std::int32_t, specdec::GenerationResult> results;  // by request id (submission order)
  std::int64_t steps = 0;
  std::size_t peak_batch = 0;
};

// Decodes `prompts` as concurrent requests (request i is prompts[i], with
// options[i]) through `method`, at most max_batch at once.
inline Outputs run_requests(specdec::AnyDecoder& method, const std::vector<std::vector<specdec::TokenId>>& prompts,
                            const std::vector<specdec::GenerationOptions>& options, std::size_t max_batch) {
  Scheduler scheduler(method, max_batch);
  for (std::size_t i = 0; i < prompts.size(); ++i) scheduler.submit(prompts[i], options[i]);
  Outputs out;
  out.results = scheduler.run();
  out.steps = scheduler.steps();
  out.peak_batch = scheduler.peak_batch();
  return out;
}

}  // namespace host_engine
