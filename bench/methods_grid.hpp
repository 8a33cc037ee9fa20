// The batched grid of `specdec bench --batch --context`, for the method
// registry of any Model (cuda_methods_bench runs it on cuda::LlamaModel;
// the CLI, which adds the performance model, takes its workloads from here):
// every method at every (context, batch) cell, continuous batching over one
// workload, against autoregressive decoding in the same cell. The workload
// of a cell: the prompts cycled to at least waves x batch requests, each
// filled to the context (io::fill_to_context), request i sampling with seed
// + i. Greedy outputs are compared with autoregressive decoding's, request
// by request.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include <nlohmann/json.hpp>

#include "specdec/core/sampling_params.hpp"
#include "specdec/core/types.hpp"
#include "specdec/engine/any_decoder.hpp"
#include "specdec/methods/method_registry.hpp"

namespace specdec::bench {

struct GridOptions {
  std::vector<std::string> methods;  // registry specs; autoregressive decoding runs first in every cell
  std::vector<std::int32_t> batches{1};
  std::vector<std::int64_t> contexts{0};  // 0: the prompts as they are
  std::int32_t waves = 0;
  std::int64_t max_new_tokens = 64;
  SamplingParams sampling{0.0f, 0, 1.0f, 0};
  bool warmup = true;  // one untimed short run of every method first
};

struct GridCell {
  std::string method;
  std::int64_t context = 0;
  std::int32_t batch = 0;
  std::int64_t requests = 0, tokens = 0;
  double seconds = 0.0, prefill_seconds = 0.0;
  double tokens_per_second = 0.0, decode_tokens_per_second = 0.0;
  double speedup = 1.0, decode_speedup = 1.0;  // over autoregressive decoding in the same cell
  double tau = 0.0;                            // tokens per round (1 for autoregressive decoding)
  double occupancy = 0.0;                      // requests per step, on average
  std::int64_t differing = 0;                  // greedy outputs unlike autoregressive decoding's
  double ttft_ms = 0.0;                        // median time to first token over the requests
};

inline nlohmann::json to_json(const GridCell& c) {
  return {{"method", c.method},
          {"context", c.context},
          {"batch", c.batch},
          {"requests", c.requests},
          {"tokens", c.tokens},
          {"seconds", c.seconds},
          {"prefill_seconds", c.prefill_seconds},
          {"tokens_per_second", c.tokens_per_second},
          {"decode_tokens_per_second", c.decode_tokens_per_second},
          {"speedup", c.speedup},
          {"decode_speedup", c.decode_speedup},
          {"tau", c.tau},
          {"median_time_to_first_token_ms", c.ttft_ms},
          {"occupancy", c.occupancy},
          {"differing", c.differing}};
}

// (prompt, context, request index) -> the request's prompt.
using ContextFill =
    std::function<std::vector<TokenId>(const std::vector<TokenId>&, std::int64_t, std::size_t)>;

// A cell's requests: the prompts cycled to at least waves x batch, each
// filled to the context, request i sampling with seed + i.
inline std::pair<std::vector<std::vector<TokenId>>, std::vector<GenerationOptions>> cell_workload(
    const std::vector<std::vector<TokenId>>& prompts, const ContextFill& fill, std::int32_t waves,
    std::int32_t batch, std::int64_t context, std::int64_t max_new_tokens, const SamplingParams& sampling) {
  const auto n = std::max(prompts.size(),
                          static_cast<std::size_t>(std::max(0, waves)) * static_cast<std::size_t>(batch));
  std::pair<std::vector<std::vector<TokenId>>, std::vector<GenerationOptions>> w;
  for (std::size_t i = 0; i < n; ++i) {
    w.first.push_back(fill(prompts[i % prompts.size()], context, i));
    GenerationOptions g;
    g.max_new_tokens = max_new_tokens;
    g.sampling = sampling;
    g.sampling.seed = sampling.seed + i;
    w.second.push_back(g);
  }
  return w;
}

// Runs the grid; `on_cell` sees each cell as it finishes (to print it).
template <class M>
std::vector<GridCell> run_methods_grid(const MethodRegistry<M>& registry, M& target, M* draft,
                                       const std::vector<std::vector<TokenId>>& prompts,
                                       const ContextFill& fill, const GridOptions& o,
                                       const std::function<void(const GridCell&)>& on_cell = {}) {
  std::vector<std::string> specs{"autoregressive"};
  specs.insert(specs.end(), o.methods.begin(), o.methods.end());
  std::vector<AnyDecoder> methods;
  for (const auto& spec : specs) {
    const auto& info = registry.find(registry.parse(spec).name);
    methods.push_back(
        registry.make(spec, target, info.models == MethodModels::kDraftModel ? draft : nullptr, o.sampling));
  }
  // An asynchronous model (cuda::LlamaModel) finishes its prefills before the
  // prefill clock stops, so that decode tokens/s leave them out for every method.
  std::function<void()> fence;
  if constexpr (requires { target.synchronize(); })
    fence = [&] {
      target.synchronize();
      if (draft != nullptr) draft->synchronize();
    };
  const auto workload = [&](std::int32_t batch, std::int64_t context) {
    return cell_workload(prompts, fill, o.waves, batch, context, o.max_new_tokens, o.sampling);
  };
  if (o.warmup) {  // first launches, allocations, graph captures
    auto [p, g] = workload(1, 0);
    for (auto& x : g) x.max_new_tokens = std::min<std::int64_t>(8, o.max_new_tokens);
    for (auto& m : methods) m.generate_batch(p, g, p.size());
  }
  std::vector<GridCell> cells;
  for (const auto context : o.contexts)
    for (const auto batch : o.batches) {
      const auto [batch_prompts, options] = workload(batch, context);
      std::vector<std::vector<TokenId>> ar_tokens;
      GridCell ar;
      for (std::size_t m = 0; m < methods.size(); ++m) {
        const auto run =
            methods[m].generate_batch(batch_prompts, options, static_cast<std::size_t>(batch), fence);
        GridCell c;
        c.method = specs[m];
        c.context = context;
        c.batch = batch;
        c.requests = static_cast<std::int64_t>(run.results.size());
        c.tokens = run.new_tokens();
        c.seconds = run.seconds;
        c.prefill_seconds = run.prefill_seconds;
        c.tokens_per_second = run.tokens_per_second();
        c.decode_tokens_per_second = run.decode_tokens_per_second();
        c.occupancy = run.mean_batch;
        std::int64_t rounds = 0, emitted = 0;
        std::vector<double> ttft;
        for (std::size_t i = 0; i < run.results.size(); ++i) {
          const auto& r = run.results[i];
          ttft.push_back(1e3 * r.stats.time_to_first_token_seconds);
          rounds += r.stats.acceptance.num_rounds;
          emitted += r.stats.acceptance.num_emitted;
          if (m == 0)
            ar_tokens.push_back(r.tokens);
          else if (o.sampling.is_greedy() && r.tokens != ar_tokens[i])
            ++c.differing;
        }
        c.tau = rounds > 0 ? static_cast<double>(emitted) / static_cast<double>(rounds) : 0.0;
        if (!ttft.empty()) {
          const auto mid = ttft.begin() + static_cast<std::ptrdiff_t>(ttft.size() / 2);
          std::nth_element(ttft.begin(), mid, ttft.end());
          c.ttft_ms = *mid;
        }
        if (m == 0) ar = c;
        c.speedup = ar.tokens_per_second > 0 ? c.tokens_per_second / ar.tokens_per_second : 0.0;
        c.decode_speedup =
            ar.decode_tokens_per_second > 0 ? c.decode_tokens_per_second / ar.decode_tokens_per_second : 0.0;
        if (on_cell) on_cell(c);
        cells.push_back(c);
      }
    }
  return cells;
}

}  // namespace specdec::bench
