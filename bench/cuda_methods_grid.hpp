// The batched grid (methods_grid.hpp) on the CUDA model, what
// cuda_methods_bench and `specdec bench --device cuda` run: the registry's
// methods (cuda::method_registry()) on cuda::LlamaModel target and draft on
// device 0, every (context, batch) cell against autoregressive decoding in
// the same cell; a table row per cell as it finishes, and the JSON.
#pragma once

#include <cuda_runtime.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "methods_grid.hpp"
#include "specdec/cuda/chain_speculative_sampling.hpp"  // cuda_device_count
#include "specdec/cuda/llama_methods.hpp"
#include "specdec/cuda/llama_model.hpp"
#include "specdec/io/file_io.hpp"
#include "specdec/io/prompts.hpp"
#include "specdec/tokenizer/tokenizer.hpp"

namespace specdec::bench {

struct CudaGridRun {
  std::filesystem::path target = "models/target", draft = "models/draft",
                        tokenizer = "models/tokenizer.model";
  std::filesystem::path context_text = "data/context/heldout.txt";
  std::filesystem::path json;  // empty: no JSON
  std::vector<std::filesystem::path> prompt_sets;
  std::int64_t num_prompts = 4;  // the first N of each set
  DType dtype = DType::kBF16;
  bool graphs = false;  // forwards as CUDA graphs (also on with SPECDEC_CUDA_GRAPHS=1, read at load)
  GridOptions grid;
};

// Whether a CUDA device is visible to this process.
inline bool cuda_device_visible() {
  int devices = 0;
  return cuda::cuda_device_count(&devices) == Status::kOk && devices > 0;
}

struct CudaGridTotals {
  std::int64_t outputs = 0;    // the methods' requests, over every cell (autoregressive decoding's left out)
  std::int64_t differing = 0;  // of those, greedy outputs unlike autoregressive decoding's
};

// Runs the grid; a device must be visible.
inline CudaGridTotals run_cuda_methods_grid(const CudaGridRun& a) {
  cudaDeviceProp prop{};
  (void)cudaGetDeviceProperties(&prop, 0);
  const auto tokenizer = Tokenizer::load(a.tokenizer);
  std::vector<std::vector<TokenId>> prompts;
  for (const auto& path : a.prompt_sets)
    for (const auto& text : io::read_prompts(path, a.num_prompts))
      prompts.push_back(tokenizer.encode(text, true));
  std::vector<TokenId> text;
  for (const auto l : a.grid.contexts)
    if (l > 0 && text.empty()) text = tokenizer.encode(io::read_text_file(a.context_text));
  const auto name = a.context_text.string();
  const ContextFill fill = [&](const std::vector<TokenId>& p, std::int64_t context, std::size_t i) {
    return context == 0
               ? p
               : io::fill_to_context(p, text, tokenizer.bos_id(), context, a.grid.max_new_tokens, i, name);
  };
  auto target = cuda::LlamaModel::load(a.target, a.dtype);
  auto draft = cuda::LlamaModel::load(a.draft, a.dtype);
  const char* env = std::getenv("SPECDEC_CUDA_GRAPHS");
  const bool graphs = a.graphs || (env != nullptr && std::string_view(env) == "1");
  target.set_graphs(graphs);
  draft.set_graphs(graphs);
  const char* dtype = a.dtype == DType::kBF16 ? "bf16" : "f32";
  std::printf("%s, %s weights%s; %zu prompts, %lld new tokens, %d waves\n", prop.name, dtype,
              graphs ? ", CUDA graphs" : "", prompts.size(), static_cast<long long>(a.grid.max_new_tokens),
              a.grid.waves);
  std::printf("%-36s %7s %5s %10s %10s %8s %6s %7s %8s %6s\n", "method", "context", "batch", "tok/s",
              "decode/s", "decode x", "tau", "occup.", "ttft ms", "differ");
  nlohmann::json records = nlohmann::json::array();
  CudaGridTotals totals;
  run_methods_grid(cuda::method_registry(), target, &draft, prompts, fill, a.grid, [&](const GridCell& c) {
    std::printf("%-36s %7lld %5d %10.1f %10.1f %8.2f %6.2f %7.1f %8.2f %6lld\n", c.method.c_str(),
                static_cast<long long>(c.context), c.batch, c.tokens_per_second, c.decode_tokens_per_second,
                c.decode_speedup, c.tau, c.occupancy, c.ttft_ms, static_cast<long long>(c.differing));
    std::fflush(stdout);
    records.push_back(to_json(c));
    if (c.method != "autoregressive") totals.outputs += c.requests;
    totals.differing += c.differing;
  });
  if (!a.json.empty())
    io::write_text_atomically(a.json, nlohmann::json{{"device", prop.name},
                                                     {"dtype", dtype},
                                                     {"graphs", graphs},
                                                     {"max_new_tokens", a.grid.max_new_tokens},
                                                     {"temperature", a.grid.sampling.temperature},
                                                     {"cells", records}}
                                              .dump(1) +
                                          "\n");
  if (totals.differing > 0)
    std::printf("%lld greedy outputs differ from autoregressive decoding\n",
                static_cast<long long>(totals.differing));
  return totals;
}

}  // namespace specdec::bench
