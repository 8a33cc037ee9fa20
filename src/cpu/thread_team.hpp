// parallel_for over the calling thread's team (specdec/cpu/threads.hpp):
// the threaded steps of a forward without OpenMP's barriers.
//
// Why not OpenMP: a `#pragma omp parallel for schedule(static)` hands each
// thread its share up front and ends in a barrier, so every region waits for
// its slowest thread. When other work takes a core, the OS deschedules one of
// the team for a whole time slice (milliseconds) while the other spins at
// the barrier; a forward has ~31 regions, and a 0.5 ms step became 50-300x
// slower (docs/RESULTS.md, "When other work takes the cores"). Here each
// thread owns a range of the items, claims from its front and steals from
// the back of the others' ranges, so the threads that run take the work of
// those that do not, and the caller waits only for items a helper has
// started.
//
// Each item must write outputs of its own (no two items the same bytes):
// which thread runs an item never changes what it computes.
//
// Internal to src/cpu.
#pragma once

#include <cstdint>

namespace specdec::cpu {

using TeamItem = void (*)(const void* context, std::int64_t item);

// Runs item(context, i) for every i in [0, n) on the calling thread's team
// and returns when all are done. Runs inline, in order, when the team has no
// helpers, while contention keeps the team alone, for n == 1, and when called from inside an item.
// An exception thrown by an item ends the process (items are kernels).
void team_run(std::int64_t n, TeamItem item, const void* context);

template <class F>
void parallel_for(std::int64_t n, const F& f) {
  team_run(
      n, [](const void* c, std::int64_t i) { (*static_cast<const F*>(c))(i); }, &f);
}

}  // namespace specdec::cpu
