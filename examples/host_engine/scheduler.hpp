// The host engine's request scheduler: requests wait in a queue, up to
// `max_batch` run at once, and every iteration advances all running requests
// by one speculative round with ONE call to SpeculativeEngine::step (one
// target forward for all of them). Finished requests leave and waiting ones
// join between steps: continuous batching, as serving engines do it.
#pragma once

#include <cstdint>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <span>
#include <vector>

#include "specdec/engine/speculative_engine.hpp"

namespace host_engine {

template <class Engine, class Drafter, class Policy>
class Scheduler {
 public:
  using MakeDrafter = std::function<std::unique_ptr<Drafter>(std::int32_t seq)>;

  Scheduler(Engine& engine, MakeDrafter make_drafter, Policy policy, std::size_t max_batch)
      : engine_(&engine), make_drafter_(std::move(make_drafter)), policy_(std::move(policy)), max_batch_(max_batch) {}

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
      admit();
      batch_.clear();
      for (auto& r : running_) batch_.push_back(&r->request);
      if (!batch_.empty()) {
        engine_->step(batch_);
        ++steps_;
        peak_batch_ = std::max(peak_batch_, batch_.size());
      }
      for (auto it = running_.begin(); it != running_.end();) {
        if ((*it)->request.done()) {
          done[(*it)->id] = (*it)->request.take_result();
          it = running_.erase(it);
        } else {
          ++it;
        }
      }
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
  struct Running {
    Running(std::int32_t i, std::unique_ptr<Drafter> d, Policy p, const specdec::GenerationOptions& o)
        : id(i), drafter(std::move(d)), policy(std::move(p)), request(i, *drafter, policy, o) {}
    std::int32_t id;
    std::unique_ptr<Drafter> drafter;
    Policy policy;
    typename Engine::Request request;
  };

  void admit() {
    while (running_.size() < max_batch_ && !waiting_.empty()) {
      Job job = std::move(waiting_.front());
      waiting_.pop_front();
      auto r = std::make_unique<Running>(job.id, make_drafter_(job.id), policy_, job.options);
      engine_->begin(r->request, job.prompt);
      running_.push_back(std::move(r));
    }
  }

  Engine* engine_;
  MakeDrafter make_drafter_;
  Policy policy_;
  std::size_t max_batch_;
  std::int32_t next_id_ = 0;
  std::deque<Job> waiting_;
  std::vector<std::unique_ptr<Running>> running_;
  std::vector<typename Engine::Request*> batch_;
  std::int64_t steps_ = 0;
  std::size_t peak_batch_ = 0;
};

}  // namespace host_engine
