// The forwards' thread team (src/cpu/thread_team.hpp, specdec/cpu/threads.hpp):
// every item runs once, helpers take work, and helpers preempted holding
// items start a back-off. Built without libtorch, so the ThreadSanitizer
// pass checks the team's protocol too.
#include "thread_team.hpp"

#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "specdec/core/error.hpp"
#include "specdec/cpu/threads.hpp"
#include "support/catch.hpp"
#include "support/team_support.hpp"

namespace sd = specdec;
namespace tb = specdec::cpu;
using sd::test::ForwardThreads;
using sd::test::helpers_take_items;
using sd::test::spin_for;

TEST_CASE("The thread count follows the settings and the available cores", "[threads]") {
  const int cores = sd::cpu::available_cores();
  REQUIRE(cores >= 1);
  CHECK(sd::cpu::forward_threads() == cores);  // the default: every available core
  {
    const ForwardThreads one(1);
    CHECK(sd::cpu::forward_threads() == 1);
  }
  {
    const ForwardThreads many(cores + 7);  // never more threads than cores
    CHECK(sd::cpu::forward_threads() == cores);
  }
  sd::cpu::set_default_forward_threads(1);
  CHECK(sd::cpu::forward_threads() == 1);
  {
    const ForwardThreads own(cores);  // a thread's own count wins over the default
    CHECK(sd::cpu::forward_threads() == cores);
  }
  sd::cpu::set_default_forward_threads(0);
  CHECK(sd::cpu::forward_threads() == cores);
  REQUIRE_THROWS_AS(sd::cpu::set_forward_threads(-1), sd::InvalidArgumentError);
  REQUIRE_THROWS_AS(sd::cpu::set_default_forward_threads(-2), sd::InvalidArgumentError);
}

TEST_CASE("parallel_for runs every item exactly once, nested calls inline", "[threads]") {
  const int threads = GENERATE(1, 2);
  const ForwardThreads t(threads);
  for (const std::int64_t n : {0, 1, 2, 3, 64, 1000}) {
    INFO(threads << " threads, " << n << " items");
    std::vector<std::atomic<int>> runs(static_cast<std::size_t>(n));
    std::vector<std::atomic<int>> inner(static_cast<std::size_t>(n));
    tb::parallel_for(n, [&](std::int64_t i) {
      runs[static_cast<std::size_t>(i)].fetch_add(1);
      // A nested loop runs on the item's thread, to completion.
      tb::parallel_for(3, [&](std::int64_t) { inner[static_cast<std::size_t>(i)].fetch_add(1); });
    });
    for (std::int64_t i = 0; i < n; ++i) {
      CHECK(runs[static_cast<std::size_t>(i)].load() == 1);
      CHECK(inner[static_cast<std::size_t>(i)].load() == 3);
    }
  }
  // More items than the job word holds: whole ranges become items.
  const std::int64_t big = (std::int64_t{1} << 22) + 5;
  std::vector<std::uint8_t> seen(static_cast<std::size_t>(big), 0);
  tb::parallel_for(big, [&](std::int64_t i) { seen[static_cast<std::size_t>(i)] += 1; });
  std::int64_t once = 0;
  for (const auto s : seen) once += s == 1;
  CHECK(once == big);
}

TEST_CASE("Helpers take items, and helpers that hold them far too long start a back-off", "[threads]") {
  if (sd::cpu::available_cores() < 2) {
    WARN("one core: no helpers to test");
    return;
  }
  const ForwardThreads t(2);
  const auto caller = std::this_thread::get_id();
  if (!helpers_take_items()) {
    WARN("the cores stayed busy for 10 s: no helper ran, nothing to test");
    return;
  }

  // A helper that sleeps in its item (as if preempted) stalls the caller;
  // once stalls take over 20% of a 50 ms window the team runs the next jobs
  // on the calling thread alone. The caller's item spins long enough for a
  // helper to take the other. (Retried for a while: on a busy machine the
  // team may already run alone, and then no helper takes an item.)
  const auto before = sd::cpu::contention_stats();
  bool backed_off = false;
  const auto give_up = std::chrono::steady_clock::now() + std::chrono::seconds(10);
  while (!backed_off && std::chrono::steady_clock::now() < give_up) {
    tb::parallel_for(2, [&](std::int64_t) {
      if (std::this_thread::get_id() == caller)
        spin_for(std::chrono::microseconds(300));
      else
        std::this_thread::sleep_for(std::chrono::milliseconds(8));
    });
    backed_off = sd::cpu::contention_stats().contended > before.contended;
  }
  REQUIRE(backed_off);
  const auto after = sd::cpu::contention_stats();
  // The caller's own run-queue wait also counts: on a machine other work
  // keeps busy, that alone can start the back-off before a stall does.
  if (after.stalls == before.stalls) {
    WARN("the back-off came from the caller's run-queue wait (other work holds the cores), not from a stall");
  } else {
    CHECK(after.stall_seconds > before.stall_seconds);
  }
  std::set<std::thread::id> ran_on;
  std::mutex m;
  tb::parallel_for(16, [&](std::int64_t) {
    const std::lock_guard lock(m);
    ran_on.insert(std::this_thread::get_id());
  });
  CHECK(ran_on == std::set<std::thread::id>{caller});
  CHECK(sd::cpu::contention_stats().solo_jobs == after.solo_jobs + 1);
}
