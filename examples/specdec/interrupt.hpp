// Ctrl-C for the long commands (`generate`, `bench`): the first SIGINT asks
// the command to stop at its next step and report what it has (the text
// generated, the partial Stats, the JSON of the runs that finished), then
// exit with kInterruptedExit, as a shell expects of a command stopped by
// Ctrl-C; a second SIGINT ends the process at once.
#pragma once

namespace specdec::cli {

inline constexpr int kInterruptedExit = 130;  // 128 + SIGINT

// Starts taking SIGINT (once per process; later calls do nothing). Call it
// before the command starts any thread (before the models load): SIGINT is
// blocked in the calling thread, so in every thread started after it, and
// one thread of its own waits for it (interrupt.cpp says why).
void catch_interrupt();
// Whether a SIGINT arrived since catch_interrupt().
bool interrupted();

}  // namespace specdec::cli
