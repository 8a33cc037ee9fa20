// Why a thread of its own takes SIGINT, rather than a handler on whichever
// thread the signal lands: a handler runs on the interrupted thread, below
// its stack pointer, in the middle of whatever code it ran. With the f32
// forwards on oneDNN's matmul (CPUs without AVX-512 before the AVX2 row
// kernel; still the bf16 path where the CPU has no native bf16), a SIGINT
// landing in a forward corrupted the heap inside dnnl_primitive_execute
// (glibc: "corrupted size vs. prev_size while consolidating"): in 6 runs of 6
// of tests/cli/interrupt_test.sh bench with the handler, in none of 6 with
// this thread. With SIGINT blocked in every compute thread, no signal lands
// in a forward, a system call or a library.
#include "interrupt.hpp"

#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <thread>

namespace specdec::cli {
namespace {

std::atomic<bool> g_interrupted{false};

// The first SIGINT sets the flag; the second takes the default action
// (the process ends, killed by SIGINT).
[[noreturn]] void take_signals(sigset_t set) {
  for (;;) {
    int signal = 0;
    if (sigwait(&set, &signal) != 0 || signal != SIGINT) continue;
    if (!g_interrupted.exchange(true)) continue;
    ::signal(SIGINT, SIG_DFL);
    pthread_sigmask(SIG_UNBLOCK, &set, nullptr);
    raise(SIGINT);
    _exit(kInterruptedExit);  // not reached: SIGINT's default action ends the process
  }
}

}  // namespace

void catch_interrupt() {
  static const bool started = [] {
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    if (pthread_sigmask(SIG_BLOCK, &set, nullptr) != 0) return false;
    std::thread(take_signals, set).detach();
    return true;
  }();
  (void)started;
}

bool interrupted() {
  return g_interrupted.load(std::memory_order_relaxed);
}

}  // namespace specdec::cli
