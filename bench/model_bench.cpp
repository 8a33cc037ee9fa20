// The reference model's CPU forward, the cost that decides whether
// speculation pays (models issue): one decode step against the time to stream
// the weights once, and a forward over n new tokens against one token.
//
//   ./build/bench/model_bench --benchmark_min_time=2
//
// dtype 0 packs the weights in f32, 1 in bf16 (issue 15). ForwardVsStep
// times an n-token forward and a decode step back to back and reports the
// median ratio of the pairs. ReadWeights reads
// the same bytes a decode step must (every weight matrix, in that precision)
// with a plain reduction on the same threads: the streaming floor a step is
// measured against. StreamWeights (f32 matrix-vector products) is the
// bandwidth figure earlier results quote.
//
// Random weights of the default target's shape (`specdec train --preset
// target`: 6 layers, hidden 512, 8 heads / 4 kv heads, MLP 1408, vocab 8000);
// values do not change the cost. Every forward runs after a 128-token prefix
// and is rolled back, so all iterations see the same cache length.
#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <benchmark/benchmark.h>

#include <algorithm>
#include <chrono>
#include <vector>

#include "specdec/core/logit_rows.hpp"
#include "specdec/torch/llama_model.hpp"

namespace sd = specdec;
namespace tb = specdec::torch_backend;

namespace {

sd::DType dtype_arg(std::int64_t a) { return a == 0 ? sd::DType::kF32 : sd::DType::kBF16; }

// A random model of a preset's shape with a 128-token prefix cached.
tb::LlamaModel with_prefix(const char* preset, sd::DType dtype) {
  at::set_num_threads(2);
  auto mm = tb::LlamaModel::random(sd::io::default_model_config(preset, 8000), 1);
  mm.set_inference_dtype(dtype);
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

// Each made on first use only (a run filtered to one dtype builds one).
tb::LlamaModel& model(sd::DType dtype = sd::DType::kF32) {
  if (dtype == sd::DType::kF32) {
    static tb::LlamaModel f32 = with_prefix("target", sd::DType::kF32);
    return f32;
  }
  static tb::LlamaModel bf16 = with_prefix("target", sd::DType::kBF16);
  return bf16;
}

// The default draft's shape (2 layers, hidden 192, vocab 8000): what one
// drafting step costs.
tb::LlamaModel& draft_model(sd::DType dtype) {
  if (dtype == sd::DType::kF32) {
    static tb::LlamaModel f32 = with_prefix("draft", sd::DType::kF32);
    return f32;
  }
  static tb::LlamaModel bf16 = with_prefix("draft", sd::DType::kBF16);
  return bf16;
}

// The weight matrices a decode step must read at least once (the tied
// embedding is read as the LM head; one embedding row is negligible).
std::vector<at::Tensor> weight_matrices(const tb::LlamaModel& m) {
  std::vector<at::Tensor> out;
  for (const auto& [name, t] : m.named_parameters())
    if (t.dim() == 2) out.push_back(t);
  return out;
}

double weight_bytes(const tb::LlamaModel& m, sd::DType dtype = sd::DType::kF32) {
  double bytes = 0;
  for (const auto& t : weight_matrices(m)) bytes += static_cast<double>(t.numel() * sd::dtype_size(dtype));
  return bytes;
}

// The median of the timings of a run's iterations.
double median(std::vector<double> v) {
  std::nth_element(v.begin(), v.begin() + static_cast<std::ptrdiff_t>(v.size() / 2), v.end());
  return v[v.size() / 2];
}

// n new tokens after the 128-token prefix.
struct NewTokens {
  std::vector<sd::TokenId> tokens;
  std::vector<std::int64_t> positions;
  explicit NewTokens(std::int64_t n) {
    for (std::int64_t i = 0; i < n; ++i) {
      tokens.push_back(static_cast<sd::TokenId>(100 + i));
      positions.push_back(128 + i);
    }
  }
};

void forward_bench(benchmark::State& state, tb::LlamaModel& m) {
  const auto n = state.range(1);
  const NewTokens input(n);
  const sd::SequenceInput in{0, input.tokens, input.positions};
  sd::HostRows logits;
  sd::ForwardRequest request{std::span(&in, 1)};
  request.logits = logits.view(n, m.vocab_size());
  m.forward(request);  // packs the weights
  m.rollback(0, 128);
  for (auto _ : state) {
    m.forward(request);
    benchmark::DoNotOptimize(request.logits.data());
    m.rollback(0, 128);
  }
  state.counters["tokens"] = static_cast<double>(n);
  state.counters["weight_MB"] = weight_bytes(m, m.inference_dtype()) / 1e6;
}
void BM_Model_Forward(benchmark::State& state) { forward_bench(state, model(dtype_arg(state.range(0)))); }
void BM_Draft_Forward(benchmark::State& state) { forward_bench(state, draft_model(dtype_arg(state.range(0)))); }

BENCHMARK(BM_Draft_Forward)
    ->ArgNames({"dtype", "new_tokens"})
    ->ArgsProduct({{0, 1}, {1, 4}})
    ->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Model_Forward)
    ->ArgNames({"dtype", "new_tokens"})
    ->ArgsProduct({{0, 1}, {1, 2, 4, 5, 8, 16}})
    ->Unit(benchmark::kMillisecond);

// A forward over n tokens against a decode step, the two timed back to back
// in every iteration: the ratio of each pair, whose median is the figure the
// verification goals are stated in (issue 15: 5 tokens <= 1.2x a step, 16
// <= 2x). Pairs taken milliseconds apart see the same machine; separate
// benchmarks run seconds apart, and this machine's speed drifts between
// them. The iteration's time is the n-token forward.
void forward_vs_step(benchmark::State& state, tb::LlamaModel& m) {
  const auto n = state.range(1);
  const NewTokens input(n);
  const sd::SequenceInput many{0, input.tokens, input.positions},
      one{0, std::span(input.tokens).first(1), std::span(input.positions).first(1)};
  sd::HostRows logits_many, logits_one;
  sd::ForwardRequest request_many{std::span(&many, 1)}, request_one{std::span(&one, 1)};
  request_many.logits = logits_many.view(n, m.vocab_size());
  request_one.logits = logits_one.view(1, m.vocab_size());
  const auto timed = [&](const sd::ForwardRequest& r) {
    const auto start = std::chrono::steady_clock::now();
    m.forward(r);
    const std::chrono::duration<double> took = std::chrono::steady_clock::now() - start;
    m.rollback(0, 128);
    return took.count();
  };
  timed(request_many);  // packs the weights
  std::vector<double> steps, forwards, ratios;
  for (auto _ : state) {
    const double step = timed(request_one);
    const double forward = timed(request_many);
    steps.push_back(step);
    forwards.push_back(forward);
    ratios.push_back(forward / step);
    state.SetIterationTime(forward);
  }
  state.counters["step_ms"] = median(steps) * 1e3;
  state.counters["forward_ms"] = median(forwards) * 1e3;
  state.counters["ratio"] = median(ratios);
}
void BM_Model_ForwardVsStep(benchmark::State& state) { forward_vs_step(state, model(dtype_arg(state.range(0)))); }
BENCHMARK(BM_Model_ForwardVsStep)
    ->ArgNames({"dtype", "new_tokens"})
    ->ArgsProduct({{0, 1}, {1, 2, 5, 16}})
    ->UseManualTime()
    ->Unit(benchmark::kMillisecond);

// A chain:k=4 round against a decode step, as the engine runs them: four
// one-token draft steps, then the target's 5-token verification; and the
// target's one-token step of autoregressive decoding, which runs with no
// draft between. Each timed alone, back to back every iteration, medians.
// The verification here pays for what the draft's steps evicted of the
// target's weights from the cache, as it does in `specdec bench`.
void BM_Round_VerifyAfterDraft(benchmark::State& state) {
  auto& target = model(sd::DType::kBF16);
  auto& draft = draft_model(sd::DType::kBF16);
  const bool with_draft = state.range(0) != 0;
  const NewTokens input(5);
  const sd::SequenceInput five{0, input.tokens, input.positions},
      one{0, std::span(input.tokens).first(1), std::span(input.positions).first(1)};
  sd::HostRows logits_five, logits_one, logits_draft;
  sd::ForwardRequest verify{std::span(&five, 1)}, step{std::span(&one, 1)};
  verify.logits = logits_five.view(5, target.vocab_size());
  step.logits = logits_one.view(1, target.vocab_size());
  std::vector<sd::SequenceInput> draft_inputs;
  for (int i = 0; i < 4; ++i)
    draft_inputs.push_back({0, std::span(input.tokens).subspan(static_cast<std::size_t>(i), 1),
                            std::span(input.positions).subspan(static_cast<std::size_t>(i), 1)});
  const auto timed = [](tb::LlamaModel& m, sd::ForwardRequest& r) {
    const auto start = std::chrono::steady_clock::now();
    m.forward(r);
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  };
  timed(target, verify);  // packs the weights
  target.rollback(0, 128);
  std::vector<double> steps, drafts, verifies, ratios;
  for (auto _ : state) {
    const double s1 = timed(target, step);
    target.rollback(0, 128);
    const double s2 = timed(target, step);  // a step after a step, as in decoding
    target.rollback(0, 128);
    double d = 0;
    if (with_draft) {
      for (auto& in : draft_inputs) {
        sd::ForwardRequest r{std::span(&in, 1)};
        r.logits = logits_draft.view(1, draft.vocab_size());
        d += timed(draft, r);
      }
      draft.rollback(0, 128);
    }
    const double v = timed(target, verify);
    target.rollback(0, 128);
    (void)s1;
    steps.push_back(s2);
    drafts.push_back(d);
    verifies.push_back(v);
    ratios.push_back(v / s2);
    state.SetIterationTime(v);
  }
  state.counters["step_ms"] = median(steps) * 1e3;
  state.counters["draft4_ms"] = median(drafts) * 1e3;
  state.counters["verify_ms"] = median(verifies) * 1e3;
  state.counters["ratio"] = median(ratios);
}
BENCHMARK(BM_Round_VerifyAfterDraft)->ArgName("draft")->Arg(0)->Arg(1)->UseManualTime()->Unit(benchmark::kMillisecond);

// Reading the bytes of every weight matrix in the given precision once, with
// a vectorized f32 sum (at::sum, on the same two threads) over buffers of
// that many bytes: the floor of a decode step. (Summing the bf16 values
// themselves would measure ATen's bf16 conversion, not the memory.)
void read_weights(benchmark::State& state, const tb::LlamaModel& m) {
  const auto dtype = dtype_arg(state.range(0));
  std::vector<at::Tensor> buffers;
  for (const auto& t : weight_matrices(m))
    buffers.push_back(at::rand({t.numel() * static_cast<std::int64_t>(sd::dtype_size(dtype)) / 4}));
  for (auto _ : state)
    for (const auto& b : buffers) benchmark::DoNotOptimize(at::sum(b).data_ptr());
  const double bytes = weight_bytes(m, dtype);
  state.counters["GBps"] = benchmark::Counter(bytes, benchmark::Counter::kIsIterationInvariantRate);
  state.counters["MB"] = bytes / 1e6;
}
void BM_Model_ReadWeights(benchmark::State& state) { read_weights(state, model()); }
void BM_Draft_ReadWeights(benchmark::State& state) { read_weights(state, draft_model(sd::DType::kF32)); }
BENCHMARK(BM_Draft_ReadWeights)->ArgName("dtype")->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond);
BENCHMARK(BM_Model_ReadWeights)->ArgName("dtype")->Arg(0)->Arg(1)->Unit(benchmark::kMillisecond);

// Reading every weight matrix once with a matrix-vector product: the memory
// bandwidth bound of a decode step.
void BM_Model_StreamWeights(benchmark::State& state) {
  auto& m = model();
  const std::vector<at::Tensor> weights = weight_matrices(m);
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

// One decode step of `batch` sequences that each hold `context` cached tokens
// (bf16 weights, f32 cache): what attention costs against the weights as the
// context grows, the term SPIRe's performance model prices as KV bytes
// (docs/RESULTS.md, "MagicDec on this CPU").
void BM_Model_StepAtContext(benchmark::State& state) {
  const auto batch = state.range(0), context = state.range(1);
  static tb::LlamaModel m = [] {
    at::set_num_threads(2);
    auto mm = tb::LlamaModel::random(sd::io::default_model_config("target", 8000), 1);
    mm.set_inference_dtype(sd::DType::kBF16);
    return mm;
  }();
  std::vector<sd::TokenId> prefix(static_cast<std::size_t>(context));
  std::vector<std::int64_t> pos(prefix.size());
  std::vector<std::int32_t> all(prefix.size());
  for (std::size_t i = 0; i < prefix.size(); ++i) {
    prefix[i] = static_cast<sd::TokenId>((i * 37) % 8000);
    pos[i] = static_cast<std::int64_t>(i);
    all[i] = static_cast<std::int32_t>(i);
  }
  for (std::int32_t s = 0; s < batch; ++s) {
    m.open(s);
    const sd::SequenceInput in{s, prefix, pos};
    m.forward(sd::ForwardRequest{std::span(&in, 1)});
    m.accept(s, all);
  }
  const std::vector<sd::TokenId> token{5};
  const std::vector<std::int64_t> at{context};
  std::vector<sd::SequenceInput> inputs;
  for (std::int32_t s = 0; s < batch; ++s) inputs.push_back({s, token, at});
  sd::HostRows logits;
  sd::ForwardRequest request{inputs};
  request.logits = logits.view(batch, m.vocab_size());
  for (auto _ : state) {
    m.forward(request);
    benchmark::DoNotOptimize(request.logits.data());
  }
  for (std::int32_t s = 0; s < batch; ++s) m.close(s);
  state.counters["us_per_sequence"] =
      benchmark::Counter(static_cast<double>(batch) * 1e-6, benchmark::Counter::kIsIterationInvariantRate |
                                                                benchmark::Counter::kInvert);
}
BENCHMARK(BM_Model_StepAtContext)
    ->ArgNames({"batch", "context"})
    ->ArgsProduct({{1, 16}, {16, 256, 1000}})
    ->Unit(benchmark::kMillisecond);

BENCHMARK_MAIN();
