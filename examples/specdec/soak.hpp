// `specdec bench --soak DURATION`: a long run of continuous batching that
// a serving host would see, checked as it goes. Requests of random prompts,
// lengths and temperatures stream through each --method in turn (a wave of
// requests per method, up to --batch at once), some aborted mid-generation;
// greedy requests are spot-checked against greedy autoregressive decoding
// of the same prompt; the process's resident memory is sampled every few
// seconds (a CSV that scripts/plot_soak.py draws). Exits with status 1 when
// any checked output differs, 130 on Ctrl-C (the summary of what ran
// first).
#pragma once

#include "bench.hpp"

namespace specdec::cli {

// "90", "90s", "15m", "2h" -> seconds; InvalidArgumentError otherwise.
double parse_duration(const std::string& text);

int run_soak(const BenchCommand& b);

}  // namespace specdec::cli
