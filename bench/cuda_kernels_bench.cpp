// The CUDA round kernels, timed with device events over CUDA graph replays
// (Google Benchmark's manual time; see time_launches): the warp, each rule,
// warp and chain sampling fused, and the time to read the same logits once
// (the floor a memory-bound kernel meets). BM_DeviceRound times a whole
// round as the engine runs it (cuda::DeviceRound::verify: the layout's copy,
// the warp, the rule, the copy back and the one synchronisation) in host wall
// time.
//
// Shapes: V = 32000 and 128256, batch 1 to 256 chains of k = 4 or 8 drafts
// (k + 1 target rows each). Inputs are random logits and probability rows,
// never zeros; small inputs rotate among copies that together exceed the L2
// cache, so that every launch reads from device memory.
//
// Without a device every benchmark reports "skipped: no CUDA device".
//
//   cuda_kernels_bench --benchmark_out=kernels.json --benchmark_out_format=json
#include <benchmark/benchmark.h>
#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <memory>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "specdec/core/draft_tree.hpp"
#include "specdec/core/prob_matrix.hpp"
#include "specdec/core/status.hpp"
#include "specdec/core/types.hpp"
#include "specdec/cuda/block_verification.hpp"
#include "specdec/cuda/chain_speculative_sampling.hpp"
#include "specdec/cuda/device_round.hpp"
#include "specdec/cuda/greedy_verification.hpp"
#include "specdec/cuda/recursive_rejection_sampling.hpp"
#include "specdec/cuda/traversal_verification.hpp"
#include "specdec/cuda/typical_acceptance.hpp"
#include "specdec/cuda/warp.hpp"

namespace {

using specdec::TokenId;

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess) throw std::runtime_error(std::string(what) + ": " + cudaGetErrorString(e));
}
void check(specdec::Status s, const char* what) {
  if (s != specdec::Status::kOk)
    throw std::runtime_error(std::string(what) + ": " + specdec::status_string(s));
}

bool have_device() {
  int n = 0;
  return cudaGetDeviceCount(&n) == cudaSuccess && n > 0;
}

template <class T>
struct DeviceArray {
  T* ptr = nullptr;
  std::size_t size = 0;
  explicit DeviceArray(std::size_t n) : size(n) {
    check(cudaMalloc(reinterpret_cast<void**>(&ptr), std::max<std::size_t>(n, 1) * sizeof(T)), "cudaMalloc");
  }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
  ~DeviceArray() { cudaFree(ptr); }
  void upload(const std::vector<T>& host) {
    check(cudaMemcpy(ptr, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice), "upload");
  }
};

// Copies of one input so that together they exceed the L2 cache (at most 16).
constexpr std::size_t kColdBytes = std::size_t{256} << 20;
int copies_for(std::size_t bytes) {
  return static_cast<int>(std::clamp<std::size_t>(kColdBytes / std::max<std::size_t>(bytes, 1) + 1, 1, 16));
}

// `copies` device copies of `host`.
using DeviceCopies = std::vector<std::unique_ptr<DeviceArray<float>>>;
DeviceCopies device_copies(const std::vector<float>& host, int copies) {
  DeviceCopies out;
  for (int c = 0; c < copies; ++c) {
    out.push_back(std::make_unique<DeviceArray<float>>(host.size()));
    out.back()->upload(host);
  }
  return out;
}

// `rows` rows of random logits N(0, 3^2) (probabilities: their softmax),
// tiled from a pool of 61 distinct rows per vocabulary and seed, so that the
// largest shapes (a gigabyte of rows) are built in a moment.
std::vector<float> random_rows(std::int64_t rows, std::int64_t vocab, std::uint32_t seed, bool softmax) {
  constexpr std::int64_t kPool = 61;
  const auto v = static_cast<std::size_t>(vocab);
  std::mt19937 gen(seed);
  std::normal_distribution<float> normal(0.0f, 3.0f);
  std::vector<float> pool(kPool * v);
  for (float& x : pool) x = normal(gen);
  if (softmax)
    for (std::int64_t r = 0; r < kPool; ++r) {
      float* row = pool.data() + static_cast<std::size_t>(r) * v;
      const float m = *std::max_element(row, row + vocab);
      double sum = 0.0;
      for (std::size_t i = 0; i < v; ++i) sum += (row[i] = std::exp(row[i] - m));
      for (std::size_t i = 0; i < v; ++i) row[i] = static_cast<float>(row[i] / sum);
    }
  std::vector<float> out(static_cast<std::size_t>(rows) * v);
  for (std::int64_t r = 0; r < rows; ++r)
    std::copy_n(pool.data() + static_cast<std::size_t>(r % kPool) * v, v,
                out.data() + static_cast<std::size_t>(r) * v);
  return out;
}

// Times `launch(copy, stream)`: max(8, copies) launches, rotating over the
// input copies, captured as one CUDA graph and replayed; the time per launch
// is the graph's device time (events) over its launches. So it is the
// kernels' own time and the gaps between them on the device, not the host's
// launch latency, as an engine that replays its round as a graph sees it.
template <class Launch>
void time_launches(benchmark::State& state, int copies, Launch launch) {
  // The inputs were written on the legacy stream, which a non-blocking
  // stream does not wait for.
  check(cudaDeviceSynchronize(), "setup");
  cudaStream_t stream;
  check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking), "stream");
  for (int c = 0; c < copies; ++c) launch(c, stream);  // warm-up: module load, first touch
  check(cudaStreamSynchronize(stream), "warm-up");
  const int launches = std::max(8, copies);
  cudaGraph_t graph;
  cudaGraphExec_t exec;
  check(cudaStreamBeginCapture(stream, cudaStreamCaptureModeRelaxed), "capture");
  for (int i = 0; i < launches; ++i) launch(i % copies, stream);
  check(cudaStreamEndCapture(stream, &graph), "capture");
  check(cudaGraphInstantiate(&exec, graph, 0), "instantiate");
  check(cudaGraphLaunch(exec, stream), "graph");
  check(cudaStreamSynchronize(stream), "graph warm-up");
  cudaEvent_t start, stop;
  check(cudaEventCreate(&start), "event");
  check(cudaEventCreate(&stop), "event");
  for (auto _ : state) {
    check(cudaEventRecord(start, stream), "record");
    check(cudaGraphLaunch(exec, stream), "graph");
    check(cudaEventRecord(stop, stream), "record");
    check(cudaEventSynchronize(stop), "sync");
    float ms = 0.0f;
    check(cudaEventElapsedTime(&ms, start, stop), "elapsed");
    state.SetIterationTime(static_cast<double>(ms) * 1e-3 / launches);
  }
  check(cudaGetLastError(), "launch");
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  cudaGraphExecDestroy(exec);
  cudaGraphDestroy(graph);
  cudaStreamDestroy(stream);
}

// Args: vocab, batch, k. rows = batch * (k + 1).
struct Shape {
  std::int64_t vocab;
  std::int32_t batch, k;
  std::int64_t rows() const { return std::int64_t{batch} * (k + 1); }
  std::size_t row_floats() const { return static_cast<std::size_t>(rows() * vocab); }
};
Shape shape_of(const benchmark::State& state) {
  return {state.range(0), static_cast<std::int32_t>(state.range(1)),
          static_cast<std::int32_t>(state.range(2))};
}

void label(benchmark::State& state, const Shape& s, std::size_t bytes_read) {
  state.counters["bytes_read"] = static_cast<double>(bytes_read);
  state.counters["read_GBps"] =
      benchmark::Counter(static_cast<double>(bytes_read), benchmark::Counter::kIsIterationInvariantRate,
                         benchmark::Counter::kIs1000);
  state.SetLabel("V=" + std::to_string(s.vocab) + " batch=" + std::to_string(s.batch) +
                 " k=" + std::to_string(s.k));
}

// The floor: one read of the round's target logits, as a device-to-device
// copy of half of them (a copy reads and writes: bytes read = the logits').
void BM_ReadLogitsOnce(benchmark::State& state) {
  if (!have_device()) return state.SkipWithError("skipped: no CUDA device");
  const Shape s = shape_of(state);
  const std::size_t bytes = s.row_floats() * sizeof(float);
  const int copies = copies_for(bytes);
  std::vector<std::unique_ptr<DeviceArray<char>>> in;
  for (int c = 0; c < copies; ++c) in.push_back(std::make_unique<DeviceArray<char>>(bytes));
  DeviceArray<char> out(bytes / 2);
  time_launches(state, copies, [&](int c, cudaStream_t stream) {
    check(cudaMemcpyAsync(out.ptr, in[static_cast<std::size_t>(c)]->ptr, bytes / 2, cudaMemcpyDeviceToDevice, stream),
          "copy");
  });
  label(state, s, bytes);
}

enum class WarpKind { kTemperature, kTopK, kTopP };

void BM_Warp(benchmark::State& state, WarpKind kind) {
  if (!have_device()) return state.SkipWithError("skipped: no CUDA device");
  const Shape s = shape_of(state);
  const std::size_t bytes = s.row_floats() * sizeof(float);
  const int copies = copies_for(bytes);
  const auto host = random_rows(s.rows(), s.vocab, 1, false);
  const DeviceCopies in = device_copies(host, copies);
  DeviceArray<float> probs(host.size());
  specdec::cuda::RowSampling p{.temperature = 0.8f};
  if (kind == WarpKind::kTopK) p.top_k = 50;
  if (kind == WarpKind::kTopP) p.top_p = 0.9f;
  DeviceArray<specdec::cuda::RowSampling> params(static_cast<std::size_t>(s.rows()));
  params.upload(std::vector<specdec::cuda::RowSampling>(static_cast<std::size_t>(s.rows()), p));
  DeviceArray<std::int32_t> status(static_cast<std::size_t>(s.rows()));
  time_launches(state, copies, [&](int c, cudaStream_t stream) {
    check(specdec::cuda::warp_rows(in[static_cast<std::size_t>(c)]->ptr, probs.ptr, params.ptr, status.ptr,
                                   static_cast<std::int32_t>(s.rows()), s.vocab, stream),
          "warp_rows");
  });
  label(state, s, bytes);
}

void BM_GreedyVerification(benchmark::State& state) {
  if (!have_device()) return state.SkipWithError("skipped: no CUDA device");
  const Shape s = shape_of(state);
  const std::size_t bytes = s.row_floats() * sizeof(float);
  const int copies = copies_for(bytes);
  const auto host = random_rows(s.rows(), s.vocab, 2, false);
  const DeviceCopies in = device_copies(host, copies);
  // Chains: node i's parent is i - 1.
  std::vector<std::int32_t> parents;
  std::vector<TokenId> tokens;
  for (std::int32_t b = 0; b < s.batch; ++b)
    for (std::int32_t i = 0; i < s.k; ++i) parents.push_back(i - 1), tokens.push_back(i);
  DeviceArray<std::int32_t> par(parents.size()), path(static_cast<std::size_t>(s.batch * s.k)),
      count(static_cast<std::size_t>(s.batch));
  DeviceArray<TokenId> tok(tokens.size()), emitted(static_cast<std::size_t>(s.batch));
  par.upload(parents);
  tok.upload(tokens);
  const std::size_t ws_bytes = specdec::cuda::greedy_verification_workspace_bytes(s.batch, s.k);
  DeviceArray<char> ws(ws_bytes);
  check(cudaMemset(ws.ptr, 0, ws_bytes), "memset");
  time_launches(state, copies, [&](int c, cudaStream_t stream) {
    check(specdec::cuda::greedy_verification(in[static_cast<std::size_t>(c)]->ptr, par.ptr, tok.ptr, nullptr,
                                             path.ptr, count.ptr, emitted.ptr, s.batch, s.k, s.k, s.vocab,
                                             ws.ptr, ws_bytes, stream),
          "greedy_verification");
  });
  label(state, s, bytes);
}

enum class ChainRule { kSpeculativeSampling, kBlockVerification };

// A chain rule over probability rows (target and draft), each draft the
// argmax of its draft row. Block verification runs one block per row.
void BM_Chain(benchmark::State& state, ChainRule rule) {
  if (!have_device()) return state.SkipWithError("skipped: no CUDA device");
  const Shape s = shape_of(state);
  const auto target = random_rows(s.rows(), s.vocab, 3, true);
  const auto draft = random_rows(std::int64_t{s.batch} * s.k, s.vocab, 4, true);
  std::vector<TokenId> tokens(static_cast<std::size_t>(s.batch * s.k));
  std::mt19937 gen(5);
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    const float* q = draft.data() + i * static_cast<std::size_t>(s.vocab);
    tokens[i] = static_cast<TokenId>(std::max_element(q, q + s.vocab) - q);
  }
  const std::size_t bytes = (target.size() + draft.size()) * sizeof(float);
  const int copies = copies_for(bytes);
  const DeviceCopies p = device_copies(target, copies), q = device_copies(draft, copies);
  DeviceArray<TokenId> tok(tokens.size()), out(static_cast<std::size_t>(s.rows()));
  DeviceArray<std::int32_t> accepted(static_cast<std::size_t>(s.batch));
  tok.upload(tokens);
  std::uint64_t offset = 0;
  time_launches(state, copies, [&](int c, cudaStream_t stream) {
    const float* qc = q[static_cast<std::size_t>(c)]->ptr;
    const float* pc = p[static_cast<std::size_t>(c)]->ptr;
    check(rule == ChainRule::kSpeculativeSampling
              ? specdec::cuda::chain_speculative_sampling(qc, tok.ptr, pc, out.ptr, accepted.ptr, s.batch,
                                                          s.k, s.vocab, 7, offset, stream)
              : specdec::cuda::block_verification(qc, tok.ptr, pc, out.ptr, accepted.ptr, s.batch, s.k,
                                                  s.vocab, 7, offset, stream),
          "chain rule");
    offset += static_cast<std::uint64_t>(s.k) + 1;
  });
  label(state, s, bytes);
}

// Warp + chain speculative sampling in one: chain_speculative_sampling_from_logits
// on the target's logits at temperature 0.8, with the same draft rows and
// drafts as BM_Chain. Bytes: the target's logits (what the goal compares with).
void BM_ChainFromLogits(benchmark::State& state) {
  if (!have_device()) return state.SkipWithError("skipped: no CUDA device");
  const Shape s = shape_of(state);
  const auto target = random_rows(s.rows(), s.vocab, 3, false);
  const auto draft = random_rows(std::int64_t{s.batch} * s.k, s.vocab, 4, true);
  std::vector<TokenId> tokens(static_cast<std::size_t>(s.batch * s.k));
  for (std::size_t i = 0; i < tokens.size(); ++i) {
    const float* q = draft.data() + i * static_cast<std::size_t>(s.vocab);
    tokens[i] = static_cast<TokenId>(std::max_element(q, q + s.vocab) - q);
  }
  const int copies = copies_for((target.size() + draft.size()) * sizeof(float));
  const DeviceCopies p = device_copies(target, copies), q = device_copies(draft, copies);
  DeviceArray<TokenId> tok(tokens.size()), out(static_cast<std::size_t>(s.rows()));
  DeviceArray<std::int32_t> accepted(static_cast<std::size_t>(s.batch));
  DeviceArray<float> temperatures(static_cast<std::size_t>(s.batch));
  tok.upload(tokens);
  temperatures.upload(std::vector<float>(static_cast<std::size_t>(s.batch), 0.8f));
  const std::size_t ws_bytes = specdec::cuda::chain_from_logits_workspace_bytes(s.batch, s.k, s.vocab);
  DeviceArray<char> ws(ws_bytes);
  check(cudaMemset(ws.ptr, 0, ws_bytes), "memset");
  std::uint64_t offset = 0;
  time_launches(state, copies, [&](int c, cudaStream_t stream) {
    check(specdec::cuda::chain_speculative_sampling_from_logits(
              q[static_cast<std::size_t>(c)]->ptr, tok.ptr, p[static_cast<std::size_t>(c)]->ptr, temperatures.ptr,
              out.ptr, accepted.ptr, s.batch, s.k, s.vocab, 7, offset, ws.ptr, ws_bytes, stream),
          "chain_speculative_sampling_from_logits");
    offset += static_cast<std::uint64_t>(s.k) + 1;
  });
  label(state, s, target.size() * sizeof(float));
}

// Chains of k i.i.d. drafts as flat trees (one row per slot, the root first,
// for target and draft alike), each draft the argmax of its draft row; on the
// device, with room for the tree rules' outputs.
struct ChainTrees {
  explicit ChainTrees(const Shape& s)
      : target(random_rows(s.rows(), s.vocab, 3, true)), draft(random_rows(s.rows(), s.vocab, 4, true)) {
    std::vector<std::int32_t> parents;
    std::vector<TokenId> tokens;
    std::vector<std::uint8_t> draws;
    for (std::int32_t b = 0; b < s.batch; ++b) {
      for (std::int32_t i = 0; i < s.k; ++i) {
        parents.push_back(i - 1);
        const float* row =
            draft.data() + (static_cast<std::size_t>(b) * (s.k + 1) + i) * static_cast<std::size_t>(s.vocab);
        tokens.push_back(static_cast<TokenId>(std::max_element(row, row + s.vocab) - row));
      }
      for (std::int32_t i = 0; i <= s.k; ++i) draws.push_back(1);
    }
    copies = copies_for(bytes());
    p = device_copies(target, copies);
    q = device_copies(draft, copies);
    par = std::make_unique<DeviceArray<std::int32_t>>(parents.size());
    tok = std::make_unique<DeviceArray<TokenId>>(tokens.size());
    dr = std::make_unique<DeviceArray<std::uint8_t>>(draws.size());
    par->upload(parents);
    tok->upload(tokens);
    dr->upload(draws);
  }
  std::size_t bytes() const { return (target.size() + draft.size()) * sizeof(float); }

  std::vector<float> target, draft;
  int copies = 1;
  DeviceCopies p, q;
  std::unique_ptr<DeviceArray<std::int32_t>> par;
  std::unique_ptr<DeviceArray<TokenId>> tok;
  std::unique_ptr<DeviceArray<std::uint8_t>> dr;
};

// Recursive rejection sampling over chains of k i.i.d. drafts (SpecInfer's
// rule on the one-path tree): the same rows as chain speculative sampling.
void BM_RecursiveRejectionSampling(benchmark::State& state) {
  if (!have_device()) return state.SkipWithError("skipped: no CUDA device");
  const Shape s = shape_of(state);
  const ChainTrees in(s);
  DeviceArray<std::int32_t> path(static_cast<std::size_t>(s.batch * s.k)), count(static_cast<std::size_t>(s.batch)),
      used(static_cast<std::size_t>(s.batch));
  DeviceArray<TokenId> emitted(static_cast<std::size_t>(s.batch));
  std::uint64_t offset = 0;
  time_launches(state, in.copies, [&](int c, cudaStream_t stream) {
    check(specdec::cuda::recursive_rejection_sampling(
              in.par->ptr, in.tok->ptr, in.dr->ptr, in.q[static_cast<std::size_t>(c)]->ptr,
              in.p[static_cast<std::size_t>(c)]->ptr, nullptr, path.ptr, count.ptr, emitted.ptr, used.ptr, s.batch,
              s.k, s.k, s.vocab, 7, offset, stream),
          "recursive_rejection_sampling");
    offset += static_cast<std::uint64_t>(s.k) + 1;
  });
  label(state, s, in.bytes());
}

// Traversal verification (one block per tree) over the same chains.
void BM_TraversalVerification(benchmark::State& state) {
  if (!have_device()) return state.SkipWithError("skipped: no CUDA device");
  const Shape s = shape_of(state);
  const ChainTrees in(s);
  DeviceArray<std::int32_t> path(static_cast<std::size_t>(s.batch * s.k)), count(static_cast<std::size_t>(s.batch));
  DeviceArray<TokenId> emitted(static_cast<std::size_t>(s.batch));
  const std::size_t ws_bytes = specdec::cuda::traversal_verification_workspace_bytes(s.batch, s.k, s.vocab);
  DeviceArray<char> ws(ws_bytes);
  std::uint64_t offset = 0;
  time_launches(state, in.copies, [&](int c, cudaStream_t stream) {
    check(specdec::cuda::traversal_verification(in.par->ptr, in.tok->ptr, in.dr->ptr,
                                                in.q[static_cast<std::size_t>(c)]->ptr,
                                                in.p[static_cast<std::size_t>(c)]->ptr, nullptr, path.ptr,
                                                count.ptr,
                                                emitted.ptr, s.batch, s.k, s.k, s.vocab, ws.ptr, ws_bytes, 7,
                                                offset, stream),
          "traversal_verification");
    offset += static_cast<std::uint64_t>(s.k) + 1;
  });
  label(state, s, in.bytes());
}

// Typical acceptance (lossy) over chains of k argmax drafts, Medusa's defaults.
void BM_TypicalAcceptance(benchmark::State& state) {
  if (!have_device()) return state.SkipWithError("skipped: no CUDA device");
  const Shape s = shape_of(state);
  const auto target = random_rows(s.rows(), s.vocab, 3, true);
  std::vector<std::int32_t> parents;
  std::vector<TokenId> tokens;
  for (std::int32_t b = 0; b < s.batch; ++b)
    for (std::int32_t i = 0; i < s.k; ++i) {
      parents.push_back(i - 1);
      const float* p =
          target.data() + (static_cast<std::size_t>(b) * (s.k + 1) + i) * static_cast<std::size_t>(s.vocab);
      tokens.push_back(static_cast<TokenId>(std::max_element(p, p + s.vocab) - p));
    }
  const std::size_t bytes = target.size() * sizeof(float);
  const int copies = copies_for(bytes);
  const DeviceCopies p = device_copies(target, copies);
  DeviceArray<std::int32_t> par(parents.size()), path(static_cast<std::size_t>(s.batch * s.k)),
      count(static_cast<std::size_t>(s.batch));
  DeviceArray<TokenId> tok(tokens.size()), emitted(static_cast<std::size_t>(s.batch));
  par.upload(parents);
  tok.upload(tokens);
  time_launches(state, copies, [&](int c, cudaStream_t stream) {
    check(specdec::cuda::typical_acceptance(par.ptr, tok.ptr, p[static_cast<std::size_t>(c)]->ptr, nullptr,
                                            path.ptr, count.ptr, emitted.ptr, s.batch, s.k, s.k, s.vocab,
                                            0.09f, 0.3f, 7, 0, stream),
          "typical_acceptance");
  });
  label(state, s, bytes);
}

// One engine round on the device: `batch` sampled chains of k drafts (each
// slot drawn i.i.d. from its draft row, drafts the rows' argmax), requests
// at T = 1, the target's logits already in logits() and the drafters' rows
// in device memory, as a drafter on the device leaves them. Host wall time
// per round: the layout's copy in, set_draft_rows' device-to-device copies,
// the warp, the rule and the copy back, with the round's synchronisation.
void BM_DeviceRound(benchmark::State& state, specdec::cuda::DeviceRule rule) {
  if (!have_device()) return state.SkipWithError("skipped: no CUDA device");
  const Shape s = shape_of(state);
  const auto logits = random_rows(s.rows(), s.vocab, 3, false);
  const auto draft = random_rows(std::int64_t{s.batch} * s.k, s.vocab, 4, true);
  const auto v = static_cast<std::size_t>(s.vocab);
  std::vector<specdec::DraftTree> trees(static_cast<std::size_t>(s.batch));
  for (std::int32_t b = 0; b < s.batch; ++b) {
    auto& t = trees[static_cast<std::size_t>(b)];
    t.clear(0);
    for (std::int32_t i = 0; i < s.k; ++i) {
      const float* q = draft.data() + (static_cast<std::size_t>(b * s.k + i)) * v;
      t.set_children_source(i - 1, i, specdec::ChildMode::kSampledWithReplacement);
      t.add_node(i - 1, static_cast<TokenId>(std::max_element(q, q + s.vocab) - q), 0.5f);
    }
  }
  DeviceArray<float> draft_dev(draft.size());
  draft_dev.upload(draft);
  std::vector<specdec::ProbRows> rows;
  for (std::int32_t b = 0; b < s.batch; ++b)
    rows.emplace_back(draft_dev.ptr + static_cast<std::size_t>(b * s.k) * v, s.k, s.vocab);
  std::vector<specdec::cuda::DeviceRoundItem> items;
  for (std::int32_t b = 0; b < s.batch; ++b)
    items.push_back({&trees[static_cast<std::size_t>(b)], {}, {7, static_cast<std::uint64_t>(b), 0}});
  specdec::cuda::DeviceRound round;
  std::vector<specdec::VerifyResult> out(static_cast<std::size_t>(s.batch));
  std::vector<std::int32_t> used(out.size());
  specdec::cuda::DeviceRoundLayout layout(items);
  check(cudaMemcpy(round.logits(layout.forward_rows(), s.vocab), logits.data(), logits.size() * sizeof(float),
                   cudaMemcpyHostToDevice),
        "logits");
  for (auto _ : state) {
    layout.assign(items);  // each round's trees and streams are new
    round.set_draft_rows(layout, rows, s.vocab);
    round.verify(layout, rule, s.vocab, true, out, used);
    for (auto& item : items) item.stream.offset += static_cast<std::uint64_t>(s.k) + 1;
  }
  label(state, s, static_cast<std::size_t>(s.rows()) * v * sizeof(float));
}

void round_shapes(benchmark::internal::Benchmark* b) {
  for (const std::int64_t vocab : {32000, 128256})
    for (const std::int64_t batch : {1, 64}) b->Args({vocab, batch, 4});
  b->ArgNames({"V", "batch", "k"})->UseRealTime()->Unit(benchmark::kMicrosecond);
}

void shapes(benchmark::internal::Benchmark* b) {
  for (const std::int64_t vocab : {32000, 128256})
    for (const std::int64_t batch : {1, 8, 64, 256})
      for (const std::int64_t k : {4, 8}) b->Args({vocab, batch, k});
  b->ArgNames({"V", "batch", "k"})->UseManualTime()->Unit(benchmark::kMicrosecond);
}

BENCHMARK(BM_ReadLogitsOnce)->Apply(shapes);
BENCHMARK_CAPTURE(BM_Warp, temperature, WarpKind::kTemperature)->Apply(shapes);
BENCHMARK_CAPTURE(BM_Warp, top_k_50, WarpKind::kTopK)->Apply(shapes);
BENCHMARK_CAPTURE(BM_Warp, top_p_0_9, WarpKind::kTopP)->Apply(shapes);
BENCHMARK(BM_GreedyVerification)->Apply(shapes);
BENCHMARK_CAPTURE(BM_Chain, speculative_sampling, ChainRule::kSpeculativeSampling)->Apply(shapes);
BENCHMARK_CAPTURE(BM_Chain, block_verification, ChainRule::kBlockVerification)->Apply(shapes);
BENCHMARK(BM_ChainFromLogits)->Apply(shapes);
BENCHMARK(BM_TraversalVerification)->Apply(shapes);
BENCHMARK(BM_TypicalAcceptance)->Apply(shapes);
BENCHMARK(BM_RecursiveRejectionSampling)->Apply(shapes);
BENCHMARK_CAPTURE(BM_DeviceRound, speculative_sampling, specdec::cuda::DeviceRule::kSpeculative)
    ->Apply(round_shapes);
BENCHMARK_CAPTURE(BM_DeviceRound, recursive_rejection, specdec::cuda::DeviceRule::kRecursiveRejection)
    ->Apply(round_shapes);

}  // namespace

BENCHMARK_MAIN();
