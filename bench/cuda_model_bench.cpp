// cuda::LlamaModel's forward on a GPU, against its floor: a decode step
// reads every weight once, so its time is at least weight_bytes / the
// device's bandwidth (BM_ReadLogitsOnce in cuda_kernels_bench measures that
// bandwidth on the same card). Host wall time per forward, synchronised.
//
//   BM_Step/<model>/batch:B/tokens:T   B sequences of T new tokens each (T = 1:
//                                      a decode step; T = 5: a k = 4 chain's
//                                      verification), device logits
//
// Models: the default target and draft of models/ (when the working
// directory holds them), and random weights of real shapes: a 1B-class
// Llama (TinyLlama-1.1B's config) and a 7B-class one (Llama-2-7B's), bf16.
// Counters: weight_GBps (weight bytes / step time: the share of the
// bandwidth a step reaches), tokens_per_second.
//
// Without a device every benchmark reports "skipped: no CUDA device".
#include <benchmark/benchmark.h>
#include <cuda_runtime.h>

#include <cstdint>
#include <filesystem>
#include <map>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

#include "specdec/cuda/llama_model.hpp"

namespace {

namespace sd = specdec;

bool have_device() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

sd::io::LlamaConfig llama_config(std::int64_t hidden, std::int64_t inner, std::int64_t layers,
                                 std::int64_t heads, std::int64_t kv_heads, std::int64_t vocab) {
  sd::io::LlamaConfig c;
  c.vocab_size = vocab;
  c.hidden_size = hidden;
  c.intermediate_size = inner;
  c.num_hidden_layers = layers;
  c.num_attention_heads = heads;
  c.num_key_value_heads = kv_heads;
  c.head_dim = hidden / heads;
  c.max_position_embeddings = 1024;
  c.rms_norm_eps = 1e-5;
  return c;
}

// Loaded once per process: the 7B-class model alone is 13.5 GB.
sd::cuda::LlamaModel* model(const std::string& name) {
  static std::map<std::string, std::unique_ptr<sd::cuda::LlamaModel>> models;
  auto& m = models[name];
  if (!m) {
    if (name == "target" || name == "draft")
      m = std::make_unique<sd::cuda::LlamaModel>(sd::cuda::LlamaModel::load("models/" + name));
    else if (name == "llama_1b")
      m = std::make_unique<sd::cuda::LlamaModel>(
          sd::cuda::LlamaModel::random(llama_config(2048, 5632, 22, 32, 4, 32000), 1));
    else
      m = std::make_unique<sd::cuda::LlamaModel>(
          sd::cuda::LlamaModel::random(llama_config(4096, 11008, 32, 32, 32, 32000), 2));
  }
  return m.get();
}

void BM_Step(benchmark::State& state, const std::string& name) {
  if (!have_device()) return state.SkipWithError("skipped: no CUDA device");
  if ((name == "target" || name == "draft") && !std::filesystem::exists("models/" + name + "/config.json"))
    return state.SkipWithError("skipped: models/ is not in the working directory");
  sd::cuda::LlamaModel& m = *model(name);
  const auto batch = static_cast<std::int32_t>(state.range(0));
  const auto tokens = static_cast<std::int32_t>(state.range(1));
  constexpr std::int64_t kPrefix = 128;  // each sequence's committed context
  // Each sequence: a 128-token prompt accepted, then the timed forward of
  // `tokens` tokens after it, rolled back every iteration.
  std::vector<std::vector<sd::TokenId>> new_tokens(static_cast<std::size_t>(batch));
  std::vector<std::vector<std::int64_t>> positions(new_tokens.size());
  std::vector<sd::SequenceInput> seqs;
  for (std::int32_t b = 0; b < batch; ++b) {
    m.open(b);
    std::vector<sd::TokenId> prompt(kPrefix);
    std::vector<std::int64_t> pos(kPrefix);
    for (std::int64_t i = 0; i < kPrefix; ++i) {
      prompt[static_cast<std::size_t>(i)] = static_cast<sd::TokenId>((i * 7 + b) % m.vocab_size());
      pos[static_cast<std::size_t>(i)] = i;
    }
    const std::vector<sd::SequenceInput> one = {{b, prompt, pos, {}, false}};
    m.forward({one, {}, {}, -1});
    std::vector<std::int32_t> all(kPrefix);
    for (std::int32_t i = 0; i < kPrefix; ++i) all[static_cast<std::size_t>(i)] = i;
    m.accept(b, all);
    auto& t = new_tokens[static_cast<std::size_t>(b)];
    auto& p = positions[static_cast<std::size_t>(b)];
    for (std::int32_t i = 0; i < tokens; ++i) {
      t.push_back(static_cast<sd::TokenId>((b + i * 13) % m.vocab_size()));
      p.push_back(kPrefix + i);
    }
    seqs.push_back({b, t, p, {}, false});
  }
  const std::int64_t rows = std::int64_t{batch} * tokens;
  float* logits = nullptr;
  if (cudaMalloc(reinterpret_cast<void**>(&logits),
                 static_cast<std::size_t>(rows * m.vocab_size()) * sizeof(float)) != cudaSuccess)
    return state.SkipWithError("cudaMalloc failed");
  const sd::ForwardRequest request{
      seqs, sd::TensorView(logits, sd::DType::kF32, {rows, m.vocab_size()}, m.device()), {}, -1};
  auto* stream = static_cast<cudaStream_t>(m.stream());
  m.forward(request);  // warm-up
  cudaStreamSynchronize(stream);
  for (auto _ : state) {
    m.forward(request);
    cudaStreamSynchronize(stream);
  }
  cudaFree(logits);
  for (std::int32_t b = 0; b < batch; ++b) m.close(b);
  state.counters["weight_GBps"] =
      benchmark::Counter(static_cast<double>(m.weight_bytes()), benchmark::Counter::kIsIterationInvariantRate,
                         benchmark::Counter::kIs1000);
  state.counters["tokens_per_second"] =
      benchmark::Counter(static_cast<double>(rows), benchmark::Counter::kIsIterationInvariantRate);
  state.counters["weight_bytes"] = static_cast<double>(m.weight_bytes());
}

void shapes(benchmark::internal::Benchmark* b) {
  for (const std::int64_t batch : {1, 64})
    for (const std::int64_t tokens : {1, 5}) b->Args({batch, tokens});
  b->ArgNames({"batch", "tokens"})->UseRealTime()->Unit(benchmark::kMicrosecond);
}

BENCHMARK_CAPTURE(BM_Step, target, std::string("target"))->Apply(shapes);
BENCHMARK_CAPTURE(BM_Step, draft, std::string("draft"))->Apply(shapes);
BENCHMARK_CAPTURE(BM_Step, llama_1b, std::string("llama_1b"))->Apply(shapes);
BENCHMARK_CAPTURE(BM_Step, llama_7b, std::string("llama_7b"))
    ->Args({1, 1})
    ->Args({1, 5})
    ->UseRealTime()
    ->Unit(benchmark::kMicrosecond);

}  // namespace

BENCHMARK_MAIN();
