// `specdec bench`'s options, and the device it runs on (bench.cpp: libtorch
// on the CPU; bench_cuda.cpp: the CUDA backend).
#include "bench.hpp"

#include <fmt/format.h>

#include "common.hpp"
#include "generate.hpp"  // check_method_device
#include "specdec/core/error.hpp"

namespace specdec::cli {

void add_bench_options(CLI::App& cmd, BenchCommand& b) {
  cmd.add_option("--target", b.target, "target model directory");
  cmd.add_option("--draft", b.draft, "draft model directory");
  cmd.add_option("--tokenizer", b.tokenizer, "tokenizer (default: beside --target)");
  cmd.add_option("--prompts", b.prompt_sets, "prompt sets (JSON lines with a \"prompt\" field)")->required();
  cmd.add_option("--method", b.methods, "a method spec (repeat); `specdec methods` lists them")->required();
  cmd.add_option("--num-prompts", b.num_prompts, "prompts per set (the first N)");
  cmd.add_option("--max-new-tokens", b.max_new_tokens, "tokens per generation");
  add_sampling_options(cmd, b.sampling);
  cmd.add_option("--json", b.json, "write the results as JSON here");
  cmd.add_option("--warmup", b.warmup, "untimed generations before measuring");
  cmd.add_option("--threads", b.threads, "CPU threads (0 = all cores)");
  cmd.add_option(
      "--dtype", b.dtypes,
      "inference weights: auto (bf16 on a GPU, and on a CPU that runs it natively; else f32), f32 or bf16; "
      "on the CPU, repeat to run every method in each, interleaved, and compare them (default: auto)");
  cmd.add_option("--batch", b.batches,
                 "run the pooled prompt sets as concurrent requests, up to N at once (repeat for several N)");
  cmd.add_option(
      "--context", b.contexts,
      "with --batch: fill each prompt from the front with held-out text so that generation ends at this "
      "context (repeat for several)");
  cmd.add_option("--context-text", b.context_text, "the held-out text --context fills prompts from");
  cmd.add_option("--waves", b.waves,
                 "with --batch: at least waves x N requests (the prompts cycled, each request its own seed)");
  cmd.add_flag(
      "--same-drafts", b.same_drafts,
      "then rerun each method untimed, re-verifying every round with token-level, block and traversal "
      "verification on the same drafts, and report each rule's tau");
  cmd.add_flag(
      "--check", b.check,
      "with --temperature 0: exit with status 1 when any method's output differs from autoregressive "
      "decoding's in the same precision, naming each");
  auto* soak = cmd.add_option(
      "--soak", b.soak,
      "run random requests (prompt prefixes, lengths up to --max-new-tokens, temperatures, aborts) "
      "through each method in turn, --batch at once, for this long (90s, 15m, 2h); greedy outputs "
      "checked against autoregressive decoding, resident memory sampled");
  cmd.add_option("--soak-temperatures", b.soak_temperatures,
                 "with --soak: the temperatures requests sample at")
      ->delimiter(',')
      ->needs(soak);
  cmd.add_option("--soak-abort", b.soak_abort, "with --soak: the share of requests aborted mid-generation")
      ->needs(soak);
  cmd.add_option("--soak-interval", b.soak_interval, "with --soak: seconds between memory samples")
      ->needs(soak);
  cmd.add_option("--soak-rss", b.soak_rss, "with --soak: write the memory samples here as CSV")->needs(soak);
  add_device_option(cmd, b.device);
}

int run_bench(const BenchCommand& b) {
  // What is refused on every device, before any backend starts.
  check_device("bench: ", b.device);
  for (const auto& spec : b.methods) check_method_device(spec, b.device);
  if (b.check && !b.sampling.is_greedy())
    throw InvalidArgumentError(
        fmt::format("bench: --check compares greedy outputs with autoregressive decoding; it needs "
                    "--temperature 0 (got {})",
                    b.sampling.temperature));
  for (const auto n : b.batches)
    if (n < 1) throw InvalidArgumentError(fmt::format("bench: --batch {} (each must be >= 1)", n));
  if (b.waves < 0) throw InvalidArgumentError(fmt::format("bench: --waves {} (must be >= 0)", b.waves));
#if SPECDEC_CLI_WITH_TORCH
  if (b.device == "cpu") return run_bench_on_torch(b);
#endif
#if SPECDEC_CLI_WITH_CUDA
  if (b.device == "cuda") return run_bench_on_cuda(b);
#endif
  return 2;  // not reached: check_device refused it
}

}  // namespace specdec::cli
