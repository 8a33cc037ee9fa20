// Helpers for the tests of the forwards' thread team (tests/unit/threads,
// tests/torch): a scoped thread count, a busy wait, and a check that the
// team's helpers take items.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <thread>

#include "specdec/cpu/threads.hpp"
#include "thread_team.hpp"

namespace specdec::test {

// Sets the calling thread's forward thread count for a scope.
struct ForwardThreads {
  explicit ForwardThreads(int n) { cpu::set_forward_threads(n); }
  ~ForwardThreads() { cpu::set_forward_threads(0); }
};

inline void spin_for(std::chrono::microseconds d) {
  const auto until = std::chrono::steady_clock::now() + d;
  while (std::chrono::steady_clock::now() < until) {
  }
}

// Whether, within a few seconds, a job of the calling thread's team runs an
// item on a helper: the team works as a team (a back-off left by an earlier
// test, or a busy machine, can keep jobs on the caller for a while).
inline bool helpers_take_items() {
  const auto caller = std::this_thread::get_id();
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (std::chrono::steady_clock::now() < give_up) {
    std::atomic<bool> off{false};
    cpu::parallel_for(16, [&](std::int64_t) {
      spin_for(std::chrono::microseconds(50));
      if (std::this_thread::get_id() != caller) off = true;
    });
    if (off) return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(25));
  }
  return false;
}

}  // namespace specdec::test
