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
//
// A handler is installed as well: a background command of a shell without
// job control starts with SIGINT ignored, and a thread started before
// main() (one that does not block SIGINT) would otherwise drop the signal.
#include "interrupt.hpp"

#include <pthread.h>
#include <signal.h>
#include <unistd.h>

#include <atomic>
#include <thread>

namespace specdec::cli {
namespace {

std::atomic<bool> g_catching{false};     // the command called catch_interrupt()
std::atomic<bool> g_interrupted{false};  // the first SIGINT since then arrived
bool g_ignored_at_start = false;         // the process started with SIGINT ignored

// One SIGINT: while a command catches them the first sets the flag and the
// second ends the process as SIGINT's default action does; otherwise the
// disposition the process started with (ignore it, or end the process).
// Only lock-free atomics, signal(), sigprocmask() and raise(): also safe in
// the handler.
void on_interrupt() {
  const bool catching = g_catching.load();
  if (catching && !g_interrupted.exchange(true)) return;
  if (!catching && g_ignored_at_start) return;
  ::signal(SIGINT, SIG_DFL);
  sigset_t set;
  sigemptyset(&set);
  sigaddset(&set, SIGINT);
  sigprocmask(SIG_UNBLOCK, &set, nullptr);  // on Linux, the calling thread's mask
  raise(SIGINT);
  _exit(kInterruptedExit);  // not reached: SIGINT's default action ends the process
}

extern "C" void on_interrupt_signal(int) {
  on_interrupt();
}

[[noreturn]] void wait_for_interrupts(sigset_t set) {
  for (;;) {
    int signal = 0;
    if (sigwait(&set, &signal) == 0 && signal == SIGINT) on_interrupt();
  }
}

}  // namespace

void take_interrupts_on_a_thread() {
  static const bool started = [] {
    struct sigaction old {};
    if (sigaction(SIGINT, nullptr, &old) == 0) g_ignored_at_start = old.sa_handler == SIG_IGN;
    struct sigaction action {};
    action.sa_handler = on_interrupt_signal;
    sigemptyset(&action.sa_mask);
    if (sigaction(SIGINT, &action, nullptr) != 0) return false;
    sigset_t set;
    sigemptyset(&set);
    sigaddset(&set, SIGINT);
    if (pthread_sigmask(SIG_BLOCK, &set, nullptr) != 0) return false;
    std::thread(wait_for_interrupts, set).detach();
    return true;
  }();
  (void)started;
}

void catch_interrupt() {
  take_interrupts_on_a_thread();
  g_catching.store(true);
}

bool interrupted() {
  return g_interrupted.load();
}

}  // namespace specdec::cli
