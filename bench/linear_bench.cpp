// The linear layers of an 8-layer d = 512 model on the CPU: a stack of 56 f32
// weight matrices, alternately [1408, 512] and [512, 1408] (161 MB, far more
// than the last-level cache), applied in turn to an [m, 512] input, as a
// forward over m new tokens does. Time per iteration is one pass over the
// whole stack (milliseconds); the counter GBps is weight bytes / time.
//
//  - BM_PackedLinear_Layers/dtype:D/m:M  PackedLinear (weights packed once;
//                                dtype 0 = f32 on the row kernel (AVX-512F or
//                                AVX2), 1 = bf16 on the AVX512_BF16 row
//                                kernel, 2 = bf16 on oneDNN, 3 = f32 on
//                                oneDNN; GBps counts the bytes of the dtype)
//  - BM_TorchLinear_Layers/m:M   at::linear (libtorch 1.13's OpenBLAS path)
//  - BM_StreamWeights            at::mv over the same stack: the bandwidth
//                                reference, one read of every weight
//  - BM_PackedLinear_Shape/out/in/m  one matrix of the default target's own
//                                shapes (µs per matrix, weights from DRAM)
//
// Everything runs with at::set_num_threads(2) (oneDNN uses the same OpenMP
// runtime). Run with the machine otherwise idle, e.g.
//   build/bench/linear_bench --benchmark_repetitions=5 --benchmark_report_aggregates_only=true
#include <cmath>
#include <cstdint>
#include <utility>
#include <vector>

#include <ATen/ATen.h>
#include <ATen/Parallel.h>
#include <benchmark/benchmark.h>

#include "specdec/torch/packed_linear.hpp"

namespace specdec::bench {
namespace {

namespace tb = specdec::torch_backend;

constexpr int kLayers = 56;
constexpr std::int64_t kModel = 512;
constexpr std::int64_t kHidden = 1408;

// W_i [out, in], N(0, 1/in) so activations stay O(1) through the chain.
const std::vector<at::Tensor>& weights() {
  static const std::vector<at::Tensor> w = [] {
    at::manual_seed(0);
    std::vector<at::Tensor> v;
    for (int i = 0; i < kLayers; ++i) {
      const std::int64_t out = i % 2 == 0 ? kHidden : kModel;
      const std::int64_t in = i % 2 == 0 ? kModel : kHidden;
      v.push_back(at::randn({out, in}) / std::sqrt(static_cast<double>(in)));
    }
    return v;
  }();
  return w;
}

std::vector<tb::PackedLinear> pack_all(specdec::DType dtype, tb::PackedLinear::Kernel kernel) {
  std::vector<tb::PackedLinear> v;
  v.reserve(kLayers);
  for (const at::Tensor& w : weights()) v.emplace_back(w, dtype, kernel);
  return v;
}

// variant 0: f32, 1: bf16 (row kernel where available), 2: bf16 on oneDNN,
// 3: f32 on oneDNN.
const std::vector<tb::PackedLinear>& packed(std::int64_t variant = 0) {
  using K = tb::PackedLinear::Kernel;
  static const std::vector<tb::PackedLinear> f32 = pack_all(specdec::DType::kF32, K::kAuto);
  if (variant == 0) return f32;
  if (variant == 1) {
    static const std::vector<tb::PackedLinear> bf16 = pack_all(specdec::DType::kBF16, K::kAuto);
    return bf16;
  }
  if (variant == 3) {
    static const std::vector<tb::PackedLinear> f32_onednn = pack_all(specdec::DType::kF32, K::kOneDnn);
    return f32_onednn;
  }
  static const std::vector<tb::PackedLinear> onednn = pack_all(specdec::DType::kBF16, K::kOneDnn);
  return onednn;
}

double weight_bytes(specdec::DType dtype = specdec::DType::kF32) {
  double bytes = 0;
  for (const at::Tensor& w : weights()) bytes += static_cast<double>(w.numel() * specdec::dtype_size(dtype));
  return bytes;
}

void set_counters(benchmark::State& state, specdec::DType dtype = specdec::DType::kF32) {
  state.counters["GBps"] =
      benchmark::Counter(weight_bytes(dtype) / 1e9, benchmark::Counter::kIsIterationInvariantRate);
}

// One pass: x [m, 512] through all 56 layers, ping-ponging between two
// preallocated buffers (no allocation per layer).
void BM_PackedLinear_Layers(benchmark::State& state) {
  const auto dtype =
      state.range(0) == 0 || state.range(0) == 3 ? specdec::DType::kF32 : specdec::DType::kBF16;
  const std::int64_t m = state.range(1);
  const auto& layers = packed(state.range(0));
  const at::Tensor x = at::randn({m, kModel});
  std::vector<float> a(static_cast<std::size_t>(m * kHidden)), b(a.size());
  const auto pass = [&] {
    layers[0].forward(x.data_ptr<float>(), m, a.data());
    float* in = a.data();
    float* out = b.data();
    for (int i = 1; i < kLayers; ++i) {
      layers[static_cast<std::size_t>(i)].forward(in, m, out);
      std::swap(in, out);
    }
    benchmark::DoNotOptimize(in);
  };
  pass();  // creates this m's primitives
  for (auto _ : state) pass();
  set_counters(state, dtype);
}

void BM_TorchLinear_Layers(benchmark::State& state) {
  const std::int64_t m = state.range(0);
  const auto& w = weights();
  const at::Tensor x = at::randn({m, kModel});
  const auto pass = [&] {
    at::Tensor h = x;
    for (const at::Tensor& wi : w) h = at::linear(h, wi);
    benchmark::DoNotOptimize(h.data_ptr());
  };
  pass();
  for (auto _ : state) pass();
  set_counters(state);
}

void BM_StreamWeights(benchmark::State& state) {
  const auto& w = weights();
  const at::Tensor x = at::randn({kModel});
  const auto pass = [&] {
    at::Tensor h = x;
    for (const at::Tensor& wi : w) h = at::mv(wi, h);
    benchmark::DoNotOptimize(h.data_ptr());
  };
  pass();
  for (auto _ : state) pass();
  set_counters(state);
}

// One matrix of the default target's own shapes, [out, in] = (range 0,
// range 1), on m = range 2 rows. Copies of it totalling over 96 MB are used
// in turn, so every call reads its weights from DRAM as a model forward does
// (one matrix alone would sit in the 32 MB cache). Time is per matrix.
void BM_PackedLinear_Shape(benchmark::State& state) {
  const std::int64_t out = state.range(0), in = state.range(1), m = state.range(2);
  const auto bytes = static_cast<double>(out * in) * sizeof(float);
  const auto copies = static_cast<int>(std::ceil(96e6 / bytes));
  at::manual_seed(1);
  std::vector<tb::PackedLinear> mats;
  mats.reserve(static_cast<std::size_t>(copies));
  for (int i = 0; i < copies; ++i) mats.emplace_back(at::randn({out, in}) / std::sqrt(static_cast<double>(in)));
  const at::Tensor x = at::randn({m, in});
  std::vector<float> y(static_cast<std::size_t>(m * out));
  for (const auto& w : mats) w.forward(x.data_ptr<float>(), m, y.data());  // primitives, page-in
  std::size_t next = 0;
  for (auto _ : state) {
    mats[next].forward(x.data_ptr<float>(), m, y.data());
    benchmark::DoNotOptimize(y.data());
    next = next + 1 == mats.size() ? 0 : next + 1;
  }
  state.counters["GBps"] = benchmark::Counter(bytes / 1e9, benchmark::Counter::kIsIterationInvariantRate);
}

BENCHMARK(BM_StreamWeights)->Unit(benchmark::kMillisecond)->UseRealTime();
// The target's fused qkv, o, gate_up, down and the tied 8000-row LM head.
BENCHMARK(BM_PackedLinear_Shape)
    ->ArgNames({"out", "in", "m"})
    ->ArgsProduct({{1024}, {512}, {1, 5, 9, 16}})
    ->ArgsProduct({{512}, {512}, {1, 5, 9, 16}})
    ->ArgsProduct({{2816}, {512}, {1, 5, 9, 16}})
    ->ArgsProduct({{512}, {1408}, {1, 5, 9, 16}})
    ->ArgsProduct({{8000}, {512}, {1, 5, 9, 16}})
    ->Unit(benchmark::kMicrosecond)
    ->UseRealTime();
BENCHMARK(BM_PackedLinear_Layers)
    ->ArgNames({"dtype", "m"})
    ->ArgsProduct({{0, 1, 2, 3}, {1, 2, 4, 5, 8, 16}})
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();
BENCHMARK(BM_TorchLinear_Layers)
    ->ArgName("m")
    ->Arg(1)
    ->Arg(2)
    ->Arg(4)
    ->Arg(8)
    ->Arg(16)
    ->Unit(benchmark::kMillisecond)
    ->UseRealTime();

}  // namespace
}  // namespace specdec::bench

int main(int argc, char** argv) {
  at::set_num_threads(2);
  benchmark::Initialize(&argc, argv);
  if (benchmark::ReportUnrecognizedArguments(argc, argv)) return 1;
  benchmark::RunSpecifiedBenchmarks();
  benchmark::Shutdown();
  return 0;
}
