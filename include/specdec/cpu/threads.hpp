// How specdec's CPU forwards use threads, and what they met of other work on
// the cores.
//
// A forward's products, attention and row fills run on the calling thread's
// team: the calling thread plus forward_threads() - 1 helper threads that
// specdec starts for it (one team per calling thread, kept for the thread's
// life; helpers spin briefly for the next step, then sleep). Work is cut into
// ranges of items (like a static schedule); a thread that runs out of its
// own takes items from the back of another's, so a helper that the OS has
// descheduled costs nothing unless it holds an item; the caller then waits
// for that one item (a stall). Every 50 ms the caller adds up what
// contention cost it: its stalls, and its own wait for a core (Linux's
// schedstat: runnable while another task had its core). Above 20% the team
// runs alone on the calling thread, and every 100 ms it reads how much of
// the process's cores sat idle (/proc/stat); when three quarters of a core
// per helper was idle, it runs as a team again. So a machine whose cores are
// taken decodes at about one thread's speed instead of waiting on preempted
// threads at every step (docs/integration.md, "Threads").
#pragma once

#include <cstdint>

namespace specdec::cpu {

// Cores this process may run on: its CPU affinity (the main thread's), capped
// by a cgroup v2 CPU quota (cpu.max) where one is set, rounded up. Read once.
int available_cores();

// Threads a forward started on the calling thread uses: the calling
// thread's set_forward_threads, else the process-wide
// set_default_forward_threads, else every available core; never more than
// available_cores() (oversubscribed cores never speed up a forward that
// streams its weights from memory).
//
// Not ATen's count: libtorch 1.13 defaults to one intra-op thread on some
// machines (on the 2-core VM of docs/RESULTS.md it reports one core), and
// changing ATen's count in a running process slows later work there. Forwards
// use no OpenMP region on the CPUs with specdec's own kernels (AVX-512F);
// elsewhere oneDNN's products still run on ATen's OpenMP threads.
int forward_threads();

// The calling thread's count: n >= 1, or 0 to follow the process default.
// A host that runs forwards on several threads at once (DuoDecoding's target
// and draft) gives each thread its share. Throws InvalidArgumentError for
// n < 0.
void set_forward_threads(int n);

// The process default for threads that set none: n >= 1, or 0 for every
// available core (the default). Throws InvalidArgumentError for n < 0.
void set_default_forward_threads(int n);

// Counters over the whole process since it started (or since
// reset_contention_stats).
struct ContentionStats {
  std::int64_t jobs = 0;  // threaded steps (a product, an attention pass, a row fill) of teams with helpers
  std::int64_t solo_jobs = 0;  // of those, run on the calling thread alone after contention
  std::int64_t stalls = 0;     // waits far longer than items take for a helper's item (it was preempted)
  double stall_seconds = 0.0;  // time the calling threads waited in those stalls
  // 50 ms windows that lost over 20% to stalls and run-queue waits: each sent a team alone
  std::int64_t contended = 0;

  // The counts of an interval: later - earlier, or a sum of intervals.
  ContentionStats operator-(const ContentionStats& earlier) const {
    return {jobs - earlier.jobs, solo_jobs - earlier.solo_jobs, stalls - earlier.stalls,
            stall_seconds - earlier.stall_seconds, contended - earlier.contended};
  }
  ContentionStats& operator+=(const ContentionStats& o) {
    jobs += o.jobs;
    solo_jobs += o.solo_jobs;
    stalls += o.stalls;
    stall_seconds += o.stall_seconds;
    contended += o.contended;
    return *this;
  }
  // The share of threaded steps that ran on the calling thread alone.
  double solo_fraction() const {
    return jobs > 0 ? static_cast<double>(solo_jobs) / static_cast<double>(jobs) : 0.0;
  }
};
ContentionStats contention_stats();
void reset_contention_stats();

}  // namespace specdec::cpu
