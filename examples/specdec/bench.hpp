#pragma once

#include <filesystem>
#include <string>
#include <vector>

#include <CLI/CLI.hpp>

#include "specdec/core/sampling_params.hpp"

namespace specdec::cli {

struct BenchCommand {
  std::filesystem::path target = "models/target";
  std::filesystem::path draft = "models/draft";
  std::filesystem::path tokenizer;
  std::vector<std::filesystem::path> prompt_sets;  // JSON lines with a "prompt" field
  std::vector<std::string> methods;                // registry specs (`specdec methods`)
  std::int64_t num_prompts = 20;                   // first N prompts of each set
  std::int64_t max_new_tokens = 64;
  SamplingParams sampling{0.0f, 0, 1.0f, 0};
  std::filesystem::path json;  // one record per (method, prompt set)
  int warmup = 1;              // untimed generations before measuring
  int threads = 0;
  // --dtype, repeatable: every method runs in each precision, prompt by
  // prompt interleaved, each against autoregressive decoding in its own
  // precision; with several, greedy runs also report where their
  // autoregressive outputs first differ. Empty = {"auto"}.
  std::vector<std::string> dtypes;
  // Batched mode (--batch N, repeatable): the prompt sets pooled into one
  // workload of requests, run through each method with up to N at once
  // (continuous batching), for each N.
  std::vector<std::int32_t> batches;
  // At least this many batches' worth of requests (the pooled prompts
  // cycled, each request its own seed), so the batch stays full for most
  // of the run instead of draining after one wave; 0 = each prompt once.
  std::int32_t waves = 0;
  // With --batch, --context L (repeatable): every request's prompt is filled
  // from the front with held-out text (`context_text`, a different stretch per
  // request) to L - max_new_tokens tokens, so that generation ends at context
  // L: the long-context grid of SPIRe (arXiv 2504.06419, §4). A prompt longer
  // than that keeps its last tokens. Empty = the prompts as they are.
  std::vector<std::int64_t> contexts;
  std::filesystem::path context_text = "data/context/heldout.txt";
  // After the timed runs, each method runs its prompts again, untimed, with
  // every round re-verified by token-level, block and traversal verification
  // on the same drafts (SameDraftsComparison); the records get their tau.
  bool same_drafts = false;
  // Greedy runs only: exit with status 1 when any method's output differs
  // from autoregressive decoding's in the same precision, listing each.
  bool check = false;
  // --soak DURATION (soak.hpp): continuous batching of random requests
  // through each method in turn for that long, greedy ones checked against
  // autoregressive decoding, resident memory sampled every `soak_interval`
  // seconds (to `soak_rss` as CSV when given). Empty = no soak.
  std::string soak;
  std::vector<float> soak_temperatures{0.0f, 0.8f};  // each request samples at one of these
  double soak_abort = 0.05;                          // the share of requests aborted mid-generation
  double soak_interval = 5.0;
  std::filesystem::path soak_rss;
  // --device: cpu (libtorch) or cuda; default: cpu where libtorch is built in.
  // On cuda, bench runs the batched grid (--batch, default 1; --context).
  std::string device;
};

void add_bench_options(CLI::App& cmd, BenchCommand& b);
int run_bench(const BenchCommand& b);
// The backends (bench.cpp: libtorch on the CPU; bench_cuda.cpp).
int run_bench_on_torch(const BenchCommand& b);
int run_bench_on_cuda(const BenchCommand& b);

}  // namespace specdec::cli
