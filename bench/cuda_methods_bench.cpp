// The methods of cuda::method_registry() decoding on the CUDA model, batched
// and at long contexts: the grid of `specdec bench --batch --context`
// (bench/methods_grid.hpp) on a GPU, for the comparisons the seed systems
// make there (MagicDec and SPIRe's batch x context grid, arXiv 2504.06419
// §4; SV's batch sizes). Every cell runs autoregressive decoding first, then
// each method on the same requests; the table and the JSON give tokens/s,
// decode-only tokens/s (the prompts' prefills left out) over autoregressive
// decoding's, tau and the mean requests per step.
//
//   cuda_methods_bench [--target models/target] [--draft models/draft]
//       [--tokenizer models/tokenizer.model] [--context-text data/context/heldout.txt]
//       [--prompts data/prompts/prose.jsonl]... [--num-prompts 4] [--max-new-tokens 64]
//       [--batch N]... [--context L]... [--waves 4] [--method SPEC]...
//       [--temperature T] [--seed S] [--dtype bf16|f32] [--graphs] [--json OUT]
//
// Defaults: batch 1 and 8, contexts as prompted, methods chain:k=4 and
// magicdec:k=4. Exit status 1 when a greedy output differs from
// autoregressive decoding's, 2 on bad arguments; without a device it prints
// "skipped: no CUDA device" and exits 0.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <string>
#include <string_view>

#include <fmt/format.h>

#include "cuda_methods_grid.hpp"
#include "specdec/core/error.hpp"

namespace sd = specdec;

namespace {

using Args = sd::bench::CudaGridRun;

Args parse(int argc, char** argv) {
  Args a;
  a.grid.batches.clear();
  a.grid.contexts.clear();
  a.grid.waves = 4;
  const auto number = [](std::string_view flag, const char* v) {
    char* end = nullptr;
    const long long n = std::strtoll(v, &end, 10);
    if (end == v || *end != '\0')
      throw sd::InvalidArgumentError(fmt::format("{} needs a whole number, got '{}'", flag, v));
    return static_cast<std::int64_t>(n);
  };
  for (int i = 1; i < argc; ++i) {
    const std::string_view flag = argv[i];
    if (flag == "--graphs") {
      a.graphs = true;
      continue;
    }
    if (i + 1 >= argc) throw sd::InvalidArgumentError(fmt::format("{} needs a value", flag));
    const char* v = argv[++i];
    if (flag == "--target")
      a.target = v;
    else if (flag == "--draft")
      a.draft = v;
    else if (flag == "--tokenizer")
      a.tokenizer = v;
    else if (flag == "--context-text")
      a.context_text = v;
    else if (flag == "--json")
      a.json = v;
    else if (flag == "--prompts")
      a.prompt_sets.emplace_back(v);
    else if (flag == "--num-prompts")
      a.num_prompts = number(flag, v);
    else if (flag == "--max-new-tokens")
      a.grid.max_new_tokens = number(flag, v);
    else if (flag == "--batch")
      a.grid.batches.push_back(static_cast<std::int32_t>(number(flag, v)));
    else if (flag == "--context")
      a.grid.contexts.push_back(number(flag, v));
    else if (flag == "--waves")
      a.grid.waves = static_cast<std::int32_t>(number(flag, v));
    else if (flag == "--method")
      a.grid.methods.emplace_back(v);
    else if (flag == "--temperature")
      a.grid.sampling.temperature = std::stof(v);
    else if (flag == "--seed")
      a.grid.sampling.seed = static_cast<std::uint64_t>(number(flag, v));
    else if (flag == "--dtype") {
      if (std::string_view(v) == "bf16")
        a.dtype = sd::DType::kBF16;
      else if (std::string_view(v) == "f32")
        a.dtype = sd::DType::kF32;
      else
        throw sd::InvalidArgumentError(fmt::format("--dtype is bf16 or f32, not '{}'", v));
    } else {
      throw sd::InvalidArgumentError(fmt::format("unknown option {}", flag));
    }
  }
  if (a.grid.batches.empty()) a.grid.batches = {1, 8};
  if (a.grid.contexts.empty()) a.grid.contexts = {0};
  if (a.grid.methods.empty()) a.grid.methods = {"chain:k=4", "magicdec:k=4"};
  if (a.prompt_sets.empty()) a.prompt_sets = {"data/prompts/prose.jsonl", "data/prompts/code.jsonl"};
  for (const auto b : a.grid.batches)
    if (b < 1) throw sd::InvalidArgumentError(fmt::format("--batch {} (each must be >= 1)", b));
  return a;
}

int run(const Args& a) {
  if (!sd::bench::cuda_device_visible()) {
    std::printf("skipped: no CUDA device\n");
    return 0;
  }
  return sd::bench::run_cuda_methods_grid(a).differing > 0 ? 1 : 0;
}

}  // namespace

int main(int argc, char** argv) {
  Args args;
  try {
    args = parse(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cuda_methods_bench: %s\n", e.what());
    return 2;
  }
  try {
    return run(args);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "cuda_methods_bench: %s\n", e.what());
    return 1;
  }
}
