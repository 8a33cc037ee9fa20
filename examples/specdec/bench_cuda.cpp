// `specdec bench --device cuda`: the batched grid of the registry's methods
// on the CUDA models (bench/cuda_methods_grid.hpp, which cuda_methods_bench
// runs too): every (context, batch) cell, each method against autoregressive
// decoding on the same requests.
#include <cstdio>

#include <fmt/format.h>

#include "../../bench/cuda_methods_grid.hpp"
#include "bench.hpp"
#include "common.hpp"
#include "generate.hpp"  // require_cuda_device, cuda_weights_dtype
#include "specdec/core/error.hpp"

namespace specdec::cli {

int run_bench_on_cuda(const BenchCommand& b) {
  const auto refuse = [](const char* what) {
    throw InvalidArgumentError(fmt::format("bench: {} runs on the CPU only (--device cpu)", what));
  };
  if (!b.soak.empty()) refuse("--soak");
  if (b.same_drafts) refuse("--same-drafts");
  if (b.dtypes.size() > 1) refuse("comparing precisions (--dtype given more than once)");
  if (b.threads != 0) refuse("--threads (the forwards' CPU threads)");
  for (const auto& spec : b.methods) (void)cuda::method_registry().parse(spec);  // said before anything loads
  bench::CudaGridRun run;
  run.dtype = cuda_weights_dtype(b.dtypes.empty() ? "auto" : b.dtypes.front());
  check_writable(b.json);
  require_cuda_device();
  run.target = b.target;
  run.draft = b.draft;
  run.tokenizer = tokenizer_path(b.target, b.tokenizer);
  if (b.tokenizer.empty()) check_draft_tokenizer(b.draft, run.tokenizer);
  run.context_text = b.context_text;
  run.json = b.json;
  run.prompt_sets = b.prompt_sets;
  run.num_prompts = b.num_prompts;
  run.grid.methods = b.methods;
  if (!b.batches.empty()) run.grid.batches = b.batches;  // else one request at a time
  if (!b.contexts.empty()) run.grid.contexts = b.contexts;
  run.grid.waves = b.waves;
  run.grid.max_new_tokens = b.max_new_tokens;
  run.grid.sampling = b.sampling;
  run.grid.warmup = b.warmup > 0;
  const auto totals = bench::run_cuda_methods_grid(run);
  if (!b.json.empty()) std::printf("wrote %s\n", b.json.string().c_str());
  if (!b.check) return 0;
  std::printf("check %s: %lld of %lld greedy outputs differ from autoregressive decoding\n",
              totals.differing == 0 ? "passed" : "FAILED", static_cast<long long>(totals.differing),
              static_cast<long long>(totals.outputs));
  return totals.differing == 0 ? 0 : 1;
}

}  // namespace specdec::cli
