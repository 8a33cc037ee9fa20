// A thread of its own for drafting while the target verifies (DuoDecoding,
// arXiv 2503.00784, §3.1: the draft model runs on its own execution resource,
// concurrently with the target's forward). The engine hands it a round's
// lagged drafts (SpeculativeEngine::set_draft_worker) and waits for them
// after the target's forward; with a GPU target the drafter stays on this
// CPU thread.
//
// The thread can be pinned to CPUs, and `on_start` runs on it before any job:
// the place to give the draft backend its own intra-op threads (OpenMP's
// thread count is per calling thread, so the target's thread keeps its own).
// One job at a time; wait() rethrows what a job threw.
#pragma once

#include <condition_variable>
#include <exception>
#include <functional>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <utility>
#include <vector>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "specdec/core/error.hpp"

#if defined(__linux__)
#include <pthread.h>
#include <sched.h>
#endif

namespace specdec {

// Pins the calling thread to `cpus` (none: leaves it as it is). Throws
// UnsupportedError naming the CPUs where the system refuses (a CPU the
// process may not use) or cannot pin at all.
inline void pin_this_thread(std::span<const int> cpus) {
  if (cpus.empty()) return;
#if defined(__linux__)
  cpu_set_t set;
  CPU_ZERO(&set);
  for (const int cpu : cpus) {
    if (cpu < 0 || cpu >= CPU_SETSIZE)
      throw InvalidArgumentError(fmt::format("pin_this_thread: CPU {} is out of range", cpu));
    CPU_SET(cpu, &set);
  }
  if (const int err = pthread_setaffinity_np(pthread_self(), sizeof(set), &set); err != 0)
    throw UnsupportedError(fmt::format("pin_this_thread: cannot pin to CPUs {} (error {}; does the process have them?)",
                                       fmt::join(cpus, ","), err));
#else
  throw UnsupportedError("pin_this_thread: thread pinning is implemented on Linux only");
#endif
}

// The CPUs the calling thread may run on (Linux; empty elsewhere).
inline std::vector<int> allowed_cpus() {
  std::vector<int> out;
#if defined(__linux__)
  cpu_set_t set;
  CPU_ZERO(&set);
  if (pthread_getaffinity_np(pthread_self(), sizeof(set), &set) == 0)
    for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu)
      if (CPU_ISSET(cpu, &set)) out.push_back(cpu);
#endif
  return out;
}

class DraftWorker {
 public:
  struct Options {
    std::vector<int> cpus;           // pin the worker here (empty: not pinned)
    std::function<void()> on_start;  // runs first, on the worker thread
  };

  // Starts the thread; throws what pinning or on_start threw there.
  explicit DraftWorker(Options options = {}) : options_(std::move(options)) {
    thread_ = std::thread([this] { run(); });
    std::unique_lock lock(mutex_);
    changed_.wait(lock, [this] { return started_; });
    if (error_) {
      auto error = std::exchange(error_, nullptr);
      lock.unlock();
      thread_.join();
      std::rethrow_exception(error);
    }
  }

  DraftWorker(const DraftWorker&) = delete;
  DraftWorker& operator=(const DraftWorker&) = delete;

  ~DraftWorker() {
    {
      std::lock_guard lock(mutex_);
      stopping_ = true;
    }
    changed_.notify_all();
    if (thread_.joinable()) thread_.join();
  }

  const std::vector<int>& cpus() const { return options_.cpus; }

  // Runs `job` on the worker; the previous job must have been waited for.
  void submit(std::function<void()> job) {
    {
      std::lock_guard lock(mutex_);
      if (submitted_)  // even if it has finished: its error is reported by wait()
        throw InvalidArgumentError("DraftWorker::submit: the previous job was not waited for (wait() first)");
      job_ = std::move(job);
      submitted_ = true;
    }
    changed_.notify_all();
  }

  // Blocks until the submitted job (if any) is done; rethrows its exception.
  void wait() {
    std::unique_lock lock(mutex_);
    changed_.wait(lock, [this] { return !job_ && !running_; });
    submitted_ = false;
    if (error_) std::rethrow_exception(std::exchange(error_, nullptr));
  }

 private:
  void run() {
    try {
      pin_this_thread(options_.cpus);
      if (options_.on_start) options_.on_start();
    } catch (...) {
      std::lock_guard lock(mutex_);
      error_ = std::current_exception();
      started_ = true;
      changed_.notify_all();
      return;
    }
    std::unique_lock lock(mutex_);
    started_ = true;
    changed_.notify_all();
    while (true) {
      changed_.wait(lock, [this] { return stopping_ || job_; });
      if (!job_) return;  // stopping with nothing left to run
      auto job = std::exchange(job_, nullptr);
      running_ = true;
      lock.unlock();
      std::exception_ptr error;
      try {
        job();
      } catch (...) {
        error = std::current_exception();
      }
      lock.lock();
      running_ = false;
      if (error) error_ = error;
      changed_.notify_all();
    }
  }

  Options options_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::function<void()> job_;
  bool running_ = false, started_ = false, stopping_ = false;
  bool submitted_ = false;  // a job was submitted and not yet waited for
  std::exception_ptr error_;
  std::thread thread_;
};

}  // namespace specdec
