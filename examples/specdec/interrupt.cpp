#include "interrupt.hpp"

#include <csignal>

namespace specdec::cli {
namespace {

volatile std::sig_atomic_t g_interrupted = 0;

extern "C" void on_interrupt(int) { g_interrupted = 1; }

}  // namespace

void catch_interrupt() {
  static const bool installed = [] {
    struct sigaction action {};
    action.sa_handler = on_interrupt;
    sigemptyset(&action.sa_mask);
    action.sa_flags = SA_RESETHAND;  // the second Ctrl-C takes the default action
    return sigaction(SIGINT, &action, nullptr) == 0;
  }();
  (void)installed;
}

bool interrupted() { return g_interrupted != 0; }

}  // namespace specdec::cli
