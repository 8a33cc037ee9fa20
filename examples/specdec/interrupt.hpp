// Ctrl-C for the long commands (`generate`, `bench`): the first SIGINT asks
// the command to stop at its next step and report what it has (the text
// generated, the partial Stats, the JSON of the runs that finished), then
// exit with kInterruptedExit, as a shell expects of a command stopped by
// Ctrl-C; a second SIGINT ends the process at once. Other commands keep
// SIGINT's disposition the process started with.
#pragma once

namespace specdec::cli {

inline constexpr int kInterruptedExit = 130;  // 128 + SIGINT

// First thing in main(), before any thread starts: blocks SIGINT in the
// calling thread, so in every thread started after it, and starts one
// thread of its own that waits for it (interrupt.cpp says why). Once per
// process; later calls do nothing.
void take_interrupts_on_a_thread();
// The command takes SIGINT as above (calls take_interrupts_on_a_thread()
// too, for a caller that did not).
void catch_interrupt();
// Whether a SIGINT arrived since catch_interrupt().
bool interrupted();

}  // namespace specdec::cli
