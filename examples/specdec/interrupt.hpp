// Ctrl-C for the long commands (`generate`, `bench`): the first SIGINT asks
// the command to stop at its next step and report what it has (the text
// generated, the partial Stats, the JSON of the runs that finished), then
// exit with kInterruptedExit, as a shell expects of a command stopped by
// Ctrl-C; a second SIGINT ends the process at once.
#pragma once

namespace specdec::cli {

inline constexpr int kInterruptedExit = 130;  // 128 + SIGINT

// Installs the handler (once per process; later calls do nothing).
void catch_interrupt();
// Whether a SIGINT arrived since catch_interrupt().
bool interrupted();

}  // namespace specdec::cli
