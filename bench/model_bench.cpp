// The reference model's CPU forward, the cost that decides whether
// speculation pays (models issue): one decode step against the time to stream
// the weights once, and a forward over n new tokens against one token.
//
//   ./build/bench/model_bench --benchmark_min_time=2
//
// Random weights of the default target's shape (`specdec train --preset
// target`: 6 layers, hidden 512, 8 heads / 4 kv heads, MLP 1408, vocab 8000);
// values do not change the cost. Every forward runs after a 128-token prefix
// and is rolled back, so all iterations see the same cache length.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <benchmark/benchmark.h>

#include <vector>

#include "specdec/core/logit_rows.hpp"
#include "specdec/torch/llama_model.hpp"

namespace sd = specdec;
namespace tb = specdec::torch_backend;

namespace {

// A random model of a preset's shape with a 128-token prefix cached.
tb::LlamaModel with_prefix(const char* preset) {
  at::set_num_threads(2);
  auto mm = tb::LlamaModel::random(sd::io::default_model_config(preset, 8000), 1);
  mm.open(0);
  std::vector<sd::TokenId> prefix(128);
  std::vector<std::int64_t> pos(128);
  for (int i = 0; i < 128; ++i) {
    prefix[static_cast<std::size_t>(i)] = (i * 37) % 8000;
    pos[static_cast<std::size_t>(i)] = i;
  }
  const sd::SequenceInput in{0, prefix, pos};
  mm.forward(sd::ForwardRequest{std::span(&in, 1)});  // no outputs: a prefill
  std::vector<std::int32_t> all(128);
  for (int i = 0; i < 128; ++i) all[static_cast<std::size_t>(i)] = i;
  mm.accept(0, all);
  return mm;
}

tb::LlamaModel& model() {
  static tb::LlamaModel m = with_prefix("target");
  return m;
}

// The default draft's shape (2 layers, hidden 192, vocab 8000): what one
// drafting step costs.
tb::LlamaModel& draft_model() {
  static tb::LlamaModel m = with_prefix("draft");
  return m;
}

// Bytes a decode step must read at least once: every weight matrix (the tied
// embedding is read as the LM head; one embedding row is negligible).
double weight_bytes(const tb::LlamaModel& m) {
  double bytes = 0;
  for (const auto& [name, t] : m.named_parameters())
    if (t.dim() == 2) bytes += static_cast<double>(t.numel()) * 4.0;
  return bytes;
}

void forward_bench(benchmark::State& state, tb::LlamaModel& m) {
  const auto n = state.range(0);
  std::vector<sd::TokenId> tokens(static_cast<std::size_t>(n));
  std::vector<std::int64_t> pos(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) {
    tokens[static_cast<std::size_t>(i)] = static_cast<sd::TokenId>(100 + i);
    pos[static_cast<std::size_t>(i)] = 128 + i;
  }
  const sd::SequenceInput in{0, tokens, pos};
  sd::HostRows logits;
  sd::ForwardRequest request{std::span(&in, 1)};
  request.logits = logits.view(n, m.vocab_size());
  for (auto _ : state) {
    m.forward(request);
    benchmark::DoNotOptimize(request.logits.data());
    m.rollback(0, 128);
  }
  state.counters["tokens"] = static_cast<double>(n);
}
void BM_Model_Forward(benchmark::State& state) { forward_bench(state, model()); }
void BM_Draft_Forward(benchmark::State& state) { forward_bench(state, draft_model()); }

BENCHMARK(BM_Draft_Forward)->ArgName("new_tokens")->Arg(1)->Arg(4)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Model_Forward)->ArgName("new_tokens")->Arg(1)->Arg(2)->Arg(4)->Arg(8)->Arg(16)->Unit(benchmark::kMillisecond);

// Reading every weight matrix once with a matrix-vector product: the memory
// bandwidth bound of a decode step.
void BM_Model_StreamWeights(benchmark::State& state) {
  auto& m = model();
  std::vector<at::Tensor> weights;
  for (const auto& [name, t] : m.named_parameters())
    if (t.dim() == 2) weights.push_back(t);
  const auto x_in = at::randn({512});
  const auto x_mid = at::randn({1408});
  for (auto _ : state)
    for (const auto& w : weights) benchmark::DoNotOptimize(at::mv(w, w.size(1) == 512 ? x_in : x_mid).data_ptr());
  const double bytes = weight_bytes(m);
  state.counters["GBps"] = benchmark::Counter(bytes, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["MB"] = bytes / 1e6;
}
BENCHMARK(BM_Model_StreamWeights)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
