// cuda::LlamaModel (include/specdec/cuda/llama_model.hpp): weights, caches and
// scratch in device memory, the forward as a sequence of launches on the
// model's stream (llama_kernels.hpp). Host code over the CUDA runtime.
#include "specdec/cuda/llama_model.hpp"

#include <cuda_runtime.h>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "llama_kernels.hpp"
#include "specdec/core/error.hpp"
#include "specdec/cpu/llama_model.hpp"
#include "specdec/cuda/forward_plan.hpp"
#include "specdec/io/float_convert.hpp"
#include "specdec/io/safetensors_checkpoint.hpp"
#include "specdec/io/weights.hpp"

namespace specdec::cuda {
namespace {

void check(cudaError_t e, const char* what) {
  if (e != cudaSuccess)
    throw DeviceError(fmt::format("cuda::LlamaModel: {} failed: {}", what, cudaGetErrorString(e)));
}
void check_launch(bool ok, const char* what) {
  if (!ok)
    throw DeviceError(fmt::format("cuda::LlamaModel: launching {} failed: {}", what,
                                  detail::last_launch_error()));
}

std::size_t element_bytes(DType d) {
  return d == DType::kBF16 ? 2 : 4;
}
std::size_t aligned(std::size_t n) {
  return (n + 255) / 256 * 256;
}

std::string layer_name(std::size_t i, const char* leaf) {
  return fmt::format("model.layers.{}.{}", i, leaf);
}

// Device memory that grows and never shrinks (the forward's scratch).
struct Scratch {
  void* ptr = nullptr;
  std::size_t bytes = 0;
  template <class T>
  T* get(std::size_t count, cudaStream_t stream) {
    const std::size_t want = std::max<std::size_t>(count * sizeof(T), 16);
    if (want > bytes) {
      check(cudaStreamSynchronize(stream), "cudaStreamSynchronize (growing scratch)");
      check(cudaFree(ptr), "cudaFree");
      ptr = nullptr;
      bytes = 0;
      check(cudaMalloc(&ptr, want), "cudaMalloc (scratch)");
      bytes = want;
    }
    return static_cast<T*>(ptr);
  }
};

}  // namespace

struct LlamaModel::Impl {
  io::LlamaConfig config;
  DType dtype = DType::kBF16;
  int device = 0;
  cudaStream_t stream = nullptr;
  std::mutex mutex;  // forwards, accepts and cache changes, one at a time

  // Every weight in one allocation, each tensor 256-byte aligned.
  void* weights = nullptr;
  std::size_t weight_bytes = 0;
  struct Layer {
    std::size_t attn_norm = 0, qkv = 0, o = 0, mlp_norm = 0, gate_up = 0, down = 0;
  };
  std::vector<Layer> layers;
  std::size_t embed = 0, lm_head = 0, final_norm = 0;
  float* rope_cos = nullptr;  // [max_position, head_dim]
  float* rope_sin = nullptr;

  // One cache per open sequence: keys and values [layers, kv_heads, rows,
  // head_dim] f32, of max_position_embeddings rows (dense) or sink + window +
  // staging room (sink + window, grown for a forward that stages more and
  // shrunk back at its accept). A sink + window cache with positions within
  // the cache also keeps its sink's keys as rotated at their own positions,
  // [layers, kv_heads, sink, head_dim]. Closed sequences' slots are reused.
  std::vector<float*> slot_k, slot_v, slot_sink;
  std::vector<std::int64_t> slot_rows, slot_sink_rows;
  std::vector<std::int32_t> free_slots;
  std::unordered_map<std::int32_t, CacheState> sequences;
  float** slot_k_dev = nullptr;  // the slots' bases, as the kernels read them
  float** slot_v_dev = nullptr;
  std::size_t slot_table_size = 0;

  Scratch x, qkv, attn, act, logits, hidden, plan, path;

  // CUDA graphs of forwards. A forward's launches depend on its row count,
  // its outputs and the addresses of the buffers it uses only (the plan is
  // read from device memory), so a forward of a shape seen before replays
  // the graph captured then: one launch instead of 6 per layer, which bound
  // a small model's step. A shape is captured the second time it is met, so
  // that shapes met once (ragged batches) cost no capture. Off unless asked
  // for: while this thread captures, another thread's work on the legacy
  // default stream (which waits for this blocking stream) fails the capture.
  struct GraphKey {
    std::array<const void*, 9> buffers{};
    std::int64_t rows = 0;
    std::int32_t hidden_layer = 0;
    bool logits = false, hidden = false;
    bool operator==(const GraphKey&) const = default;
  };
  static constexpr std::size_t kMaxGraphs = 16;
  bool use_graphs = false;
  std::vector<std::pair<GraphKey, cudaGraphExec_t>> graphs;  // oldest first
  std::vector<GraphKey> seen_once;                             // oldest first
  void* pinned = nullptr;  // the forward's plan (or the accept's path), copied in once
  std::size_t pinned_bytes = 0;
  cudaEvent_t uploaded = nullptr;  // the last copy from `pinned` has been read

  ~Impl() {
    if (stream != nullptr) (void)cudaStreamSynchronize(stream);
    for (const auto& g : graphs) (void)cudaGraphExecDestroy(g.second);
    for (const auto* slots : {&slot_k, &slot_v, &slot_sink})
      for (float* p : *slots) (void)cudaFree(p);
    for (Scratch* s : {&x, &qkv, &attn, &act, &logits, &hidden, &plan, &path}) (void)cudaFree(s->ptr);
    (void)cudaFree(slot_k_dev);
    (void)cudaFree(slot_v_dev);
    (void)cudaFree(rope_cos);
    (void)cudaFree(rope_sin);
    (void)cudaFree(weights);
    (void)cudaFreeHost(pinned);
    if (uploaded != nullptr) (void)cudaEventDestroy(uploaded);
    if (stream != nullptr) (void)cudaStreamDestroy(stream);
  }

  std::int64_t q_dim() const { return config.num_attention_heads * config.head_dim; }
  std::int64_t kv_dim() const { return config.num_key_value_heads * config.head_dim; }
  detail::AttentionShape attention_shape() const {
    return {static_cast<std::int32_t>(config.num_attention_heads),
            static_cast<std::int32_t>(config.num_key_value_heads), static_cast<std::int32_t>(config.head_dim),
            static_cast<std::int32_t>(config.num_hidden_layers)};
  }
  const void* at(std::size_t offset) const { return static_cast<const char*>(weights) + offset; }
  const float* at_f32(std::size_t offset) const { return static_cast<const float*>(at(offset)); }

  // Lays the weights out (offsets, total bytes) and allocates them.
  void allocate_weights() {
    const auto& c = config;
    const auto d = static_cast<std::size_t>(c.hidden_size), v = static_cast<std::size_t>(c.vocab_size),
               inner = static_cast<std::size_t>(c.intermediate_size);
    const auto qkv_rows = static_cast<std::size_t>(q_dim() + 2 * kv_dim());
    const std::size_t e = element_bytes(dtype);
    std::size_t at_byte = 0;
    const auto place = [&](std::size_t bytes) {
      const std::size_t where = at_byte;
      at_byte = aligned(at_byte + bytes);
      return where;
    };
    embed = place(v * d * e);
    for (std::int64_t i = 0; i < c.num_hidden_layers; ++i) {
      Layer l;
      l.attn_norm = place(d * sizeof(float));
      l.qkv = place(qkv_rows * d * e);
      l.o = place(d * static_cast<std::size_t>(q_dim()) * e);
      l.mlp_norm = place(d * sizeof(float));
      l.gate_up = place(2 * inner * d * e);
      l.down = place(d * inner * e);
      layers.push_back(l);
    }
    final_norm = place(d * sizeof(float));
    lm_head = c.tie_word_embeddings ? embed : place(v * d * e);
    weight_bytes = at_byte;
    check(cudaMalloc(&weights, weight_bytes), "cudaMalloc (weights)");
  }

  // RoPE tables as the host models compute them (cpu::rope_tables).
  void upload_rope() {
    const auto [cos, sin] = cpu::rope_tables(config);
    const std::size_t bytes = cos.size() * sizeof(float);
    check(cudaMalloc(reinterpret_cast<void**>(&rope_cos), bytes), "cudaMalloc (rope)");
    check(cudaMalloc(reinterpret_cast<void**>(&rope_sin), bytes), "cudaMalloc (rope)");
    check(cudaMemcpy(rope_cos, cos.data(), bytes, cudaMemcpyHostToDevice), "cudaMemcpy (rope)");
    check(cudaMemcpy(rope_sin, sin.data(), bytes, cudaMemcpyHostToDevice), "cudaMemcpy (rope)");
  }

  CacheState& state(std::int32_t seq, const char* who) {
    const auto it = sequences.find(seq);
    if (it == sequences.end())
      throw InvalidArgumentError(
          fmt::format("cuda::LlamaModel::{}: sequence {} is not open (open)", who, seq));
    return it->second;
  }

  // Copies `bytes` of host data into `dst` on the stream through the pinned
  // buffer, once the previous copy from it has been read.
  void upload(void* dst, const std::vector<std::pair<const void*, std::size_t>>& parts) {
    std::size_t bytes = 0;
    for (const auto& [p, n] : parts) bytes += aligned(n);
    check(cudaEventSynchronize(uploaded), "cudaEventSynchronize (upload)");
    if (bytes > pinned_bytes) {
      check(cudaFreeHost(pinned), "cudaFreeHost");
      pinned = nullptr;
      pinned_bytes = 0;
      check(cudaMallocHost(&pinned, bytes), "cudaMallocHost");
      pinned_bytes = bytes;
    }
    // The parts are 256-aligned in `dst`, whose size need not round the last
    // part up: copy up to the end of the last part, no further.
    std::size_t at_byte = 0, end = 0;
    for (const auto& [p, n] : parts) {
      if (n > 0) std::memcpy(static_cast<char*>(pinned) + at_byte, p, n);
      end = at_byte + n;
      at_byte += aligned(n);
    }
    check(cudaMemcpyAsync(dst, pinned, end, cudaMemcpyHostToDevice, stream), "cudaMemcpyAsync (upload)");
    check(cudaEventRecord(uploaded, stream), "cudaEventRecord");
  }

  // Runs `enqueue` (a forward's launches on `stream`) directly, or as the
  // graph of `key`: replayed when captured before, captured when met the
  // second time.
  template <class Enqueue>
  void run(const GraphKey& key, Enqueue enqueue) {
    if (!use_graphs) return enqueue();
    for (const auto& [k, exec] : graphs)
      if (k == key) return check(cudaGraphLaunch(exec, stream), "cudaGraphLaunch");
    const auto once = std::find(seen_once.begin(), seen_once.end(), key);
    if (once == seen_once.end()) {
      if (seen_once.size() == kMaxGraphs) seen_once.erase(seen_once.begin());
      seen_once.push_back(key);
      return enqueue();
    }
    seen_once.erase(once);
    cudaGraph_t graph = nullptr;
    check(cudaStreamBeginCapture(stream, cudaStreamCaptureModeThreadLocal), "cudaStreamBeginCapture");
    try {
      enqueue();
    } catch (...) {  // end the capture, so that the stream works again
      if (cudaStreamEndCapture(stream, &graph) == cudaSuccess && graph != nullptr) (void)cudaGraphDestroy(graph);
      throw;
    }
    check(cudaStreamEndCapture(stream, &graph), "cudaStreamEndCapture");
    cudaGraphExec_t exec = nullptr;
    const cudaError_t made = cudaGraphInstantiate(&exec, graph, 0);
    (void)cudaGraphDestroy(graph);
    check(made, "cudaGraphInstantiate");
    if (graphs.size() == kMaxGraphs) {
      (void)cudaGraphExecDestroy(graphs.front().second);
      graphs.erase(graphs.begin());
    }
    graphs.emplace_back(key, exec);
    check(cudaGraphLaunch(exec, stream), "cudaGraphLaunch");
  }

  // Floats of a cache of `rows` rows per layer and kv head.
  std::size_t cache_floats(std::int64_t rows) const {
    return static_cast<std::size_t>(config.num_hidden_layers * config.num_key_value_heads * rows *
                                    config.head_dim);
  }

  // A slot of `rows` rows: a free one of that size, or a new one.
  std::int32_t new_slot(std::int64_t rows) {
    for (auto it = free_slots.begin(); it != free_slots.end(); ++it)
      if (slot_rows[static_cast<std::size_t>(*it)] == rows) {
        const auto s = *it;
        free_slots.erase(it);
        return s;
      }
    float* k = nullptr;
    float* v = nullptr;
    allocate_cache(rows, k, v);
    slot_k.push_back(k);
    slot_v.push_back(v);
    slot_sink.push_back(nullptr);
    slot_rows.push_back(rows);
    slot_sink_rows.push_back(0);
    upload_slot_table();
    return static_cast<std::int32_t>(slot_k.size() - 1);
  }

  void allocate_cache(std::int64_t rows, float*& k, float*& v) {
    const std::size_t bytes = cache_floats(rows) * sizeof(float);
    check(cudaMalloc(reinterpret_cast<void**>(&k), bytes), "cudaMalloc (cache)");
    if (cudaMalloc(reinterpret_cast<void**>(&v), bytes) != cudaSuccess) {
      (void)cudaFree(k);
      check(cudaGetLastError(), "cudaMalloc (cache)");
    }
  }

  // The kernels' table of slot bases (grown to hold every slot), after the
  // stream's work that reads the old one.
  void upload_slot_table() {
    check(cudaStreamSynchronize(stream), "cudaStreamSynchronize (cache table)");
    if (slot_k.size() > slot_table_size) {
      (void)cudaFree(slot_k_dev);
      (void)cudaFree(slot_v_dev);
      slot_k_dev = slot_v_dev = nullptr;
      slot_table_size = std::max<std::size_t>(16, 2 * slot_k.size());
      check(cudaMalloc(reinterpret_cast<void**>(&slot_k_dev), slot_table_size * sizeof(float*)),
            "cudaMalloc");
      check(cudaMalloc(reinterpret_cast<void**>(&slot_v_dev), slot_table_size * sizeof(float*)),
            "cudaMalloc");
    }
    check(cudaMemcpy(slot_k_dev, slot_k.data(), slot_k.size() * sizeof(float*), cudaMemcpyHostToDevice),
          "cudaMemcpy (cache table)");
    check(cudaMemcpy(slot_v_dev, slot_v.data(), slot_v.size() * sizeof(float*), cudaMemcpyHostToDevice),
          "cudaMemcpy (cache table)");
  }

  // Gives `slot` `rows` rows per layer and kv head, keeping its first
  // min(old, new) rows of each (a sink + window cache growing for a long
  // forward, or shrinking back after it).
  void resize_slot(std::int32_t slot, std::int64_t rows) {
    const auto i = static_cast<std::size_t>(slot);
    const std::int64_t old = slot_rows[i];
    if (old == rows) return;
    float* k = nullptr;
    float* v = nullptr;
    allocate_cache(rows, k, v);
    const auto hd = static_cast<std::size_t>(config.head_dim) * sizeof(float);
    const auto heads = static_cast<std::size_t>(config.num_hidden_layers * config.num_key_value_heads);
    const auto keep = static_cast<std::size_t>(std::min(old, rows));
    for (const auto& [to, from] : {std::pair{k, slot_k[i]}, std::pair{v, slot_v[i]}})
      check(
          cudaMemcpy2DAsync(to, static_cast<std::size_t>(rows) * hd, from, static_cast<std::size_t>(old) * hd,
                            keep * hd, heads, cudaMemcpyDeviceToDevice, stream),
          "cudaMemcpy2DAsync (cache resize)");
    check(cudaStreamSynchronize(stream), "cudaStreamSynchronize (cache resize)");
    (void)cudaFree(slot_k[i]);
    (void)cudaFree(slot_v[i]);
    slot_k[i] = k;
    slot_v[i] = v;
    slot_rows[i] = rows;
    upload_slot_table();
  }

  // The sink's unshifted keys of `slot`, for `sink` rows (none for 0).
  void reserve_sink_keys(std::int32_t slot, std::int64_t sink) {
    const auto i = static_cast<std::size_t>(slot);
    if (slot_sink_rows[i] == sink) return;
    check(cudaStreamSynchronize(stream), "cudaStreamSynchronize (sink keys)");
    (void)cudaFree(slot_sink[i]);
    slot_sink[i] = nullptr;
    slot_sink_rows[i] = 0;
    if (sink == 0) return;
    check(cudaMalloc(reinterpret_cast<void**>(&slot_sink[i]), cache_floats(sink) * sizeof(float)),
          "cudaMalloc (sink keys)");
    slot_sink_rows[i] = sink;
  }
};

namespace {

// The config checks the kernels need beyond LlamaConfig's own.
void check_config(const io::LlamaConfig& c, DType dtype) {
  if (dtype != DType::kF32 && dtype != DType::kBF16)
    throw InvalidArgumentError(
        fmt::format("cuda::LlamaModel: weights are kept in f32 or bf16, not {}", dtype_name(dtype)));
  if (c.head_dim % 2 != 0 || c.head_dim > detail::kMaxHeadDim)
    throw UnsupportedError(fmt::format("cuda::LlamaModel: head_dim {} (even and at most {} are supported)",
                                       c.head_dim, detail::kMaxHeadDim));
}

}  // namespace

std::unique_ptr<LlamaModel::Impl> LlamaModel::start(const io::LlamaConfig& config, DType dtype, int device) {
  check_config(config, dtype);
  auto impl = std::make_unique<LlamaModel::Impl>();
  impl->config = config;
  impl->dtype = dtype;
  impl->device = device;
  check(cudaSetDevice(device), "cudaSetDevice");
  check(cudaStreamCreate(&impl->stream), "cudaStreamCreate");
  check(cudaEventCreateWithFlags(&impl->uploaded, cudaEventDisableTiming), "cudaEventCreate");
  if (const char* graphs = std::getenv("SPECDEC_CUDA_GRAPHS"); graphs != nullptr && std::string_view(graphs) == "1")
    impl->use_graphs = true;
  impl->allocate_weights();
  impl->upload_rope();
  return impl;
}

LlamaModel::LlamaModel(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}

void LlamaModel::set_graphs(bool on) {
  Impl& m = *impl_;
  const std::lock_guard lock(m.mutex);
  m.use_graphs = on;
}
LlamaModel::~LlamaModel() = default;
LlamaModel::LlamaModel(LlamaModel&&) noexcept = default;
LlamaModel& LlamaModel::operator=(LlamaModel&&) noexcept = default;

LlamaModel LlamaModel::load(const std::filesystem::path& dir, DType weights, int device) {
  const io::LlamaConfig config = io::load_llama_config(dir);
  const io::SafetensorsCheckpoint ckpt(dir);
  auto impl = start(config, weights, device);
  const auto& c = impl->config;
  io::WeightReader fetch(ckpt, dir.string(), "config.json");  // each tensor as f32 on the host
  // Uploads rows (f32) to `offset`, as the weights' dtype (norms: f32).
  const auto put = [&](std::size_t offset, const std::vector<float>& host, bool keep_f32 = false) {
    void* dst = static_cast<char*>(impl->weights) + offset;
    if (keep_f32 || impl->dtype == DType::kF32) {
      check(cudaMemcpy(dst, host.data(), host.size() * sizeof(float), cudaMemcpyHostToDevice),
            "cudaMemcpy (weights)");
      return;
    }
    std::vector<std::uint16_t> b(host.size());
    io::from_f32(host.data(), static_cast<std::int64_t>(host.size()), DType::kBF16, b.data());
    check(cudaMemcpy(dst, b.data(), b.size() * sizeof(std::uint16_t), cudaMemcpyHostToDevice),
          "cudaMemcpy (weights)");
  };
  const auto concat = [](std::vector<float> a, const std::vector<float>& b) {
    a.insert(a.end(), b.begin(), b.end());
    return a;
  };
  const auto d = c.hidden_size, q_dim = impl->q_dim(), kv_dim = impl->kv_dim(), inner = c.intermediate_size;
  put(impl->embed, fetch("model.embed_tokens.weight", {c.vocab_size, d}));
  for (std::size_t i = 0; i < impl->layers.size(); ++i) {
    const auto& l = impl->layers[i];
    put(l.attn_norm, fetch(layer_name(i, "input_layernorm.weight"), {d}), true);
    put(l.qkv, concat(concat(fetch(layer_name(i, "self_attn.q_proj.weight"), {q_dim, d}),
                             fetch(layer_name(i, "self_attn.k_proj.weight"), {kv_dim, d})),
                      fetch(layer_name(i, "self_attn.v_proj.weight"), {kv_dim, d})));
    put(l.o, fetch(layer_name(i, "self_attn.o_proj.weight"), {d, q_dim}));
    put(l.mlp_norm, fetch(layer_name(i, "post_attention_layernorm.weight"), {d}), true);
    put(l.gate_up, concat(fetch(layer_name(i, "mlp.gate_proj.weight"), {inner, d}),
                          fetch(layer_name(i, "mlp.up_proj.weight"), {inner, d})));
    put(l.down, fetch(layer_name(i, "mlp.down_proj.weight"), {d, inner}));
  }
  put(impl->final_norm, fetch("model.norm.weight", {d}), true);
  if (!c.tie_word_embeddings) put(impl->lm_head, fetch("lm_head.weight", {c.vocab_size, d}));
  fetch.refuse_unread();
  return LlamaModel(std::move(impl));
}

LlamaModel LlamaModel::random(const io::LlamaConfig& config, std::uint64_t seed, DType weights, int device) {
  auto impl = start(config, weights, device);
  const auto& c = impl->config;
  const double sd = 0.02, out_sd = 0.02 / std::sqrt(2.0 * static_cast<double>(c.num_hidden_layers));
  const auto d = c.hidden_size, inner = c.intermediate_size;
  std::uint64_t tensor = 0;  // each tensor its own Philox stream
  const auto normal = [&](std::size_t offset, std::int64_t n, double s) {
    check_launch(detail::fill_normal(static_cast<char*>(impl->weights) + offset, impl->dtype == DType::kBF16,
                                     n, s, seed, tensor++, impl->stream),
                 "fill_normal");
  };
  const auto ones = [&](std::size_t offset) {
    check_launch(detail::fill_value(static_cast<char*>(impl->weights) + offset, false, d, 1.0f, impl->stream),
                 "fill_value");
  };
  normal(impl->embed, c.vocab_size * d, sd);
  for (const auto& l : impl->layers) {
    ones(l.attn_norm);
    normal(l.qkv, (impl->q_dim() + 2 * impl->kv_dim()) * d, sd);
    normal(l.o, d * impl->q_dim(), out_sd);
    ones(l.mlp_norm);
    normal(l.gate_up, 2 * inner * d, sd);
    normal(l.down, d * inner, out_sd);
  }
  ones(impl->final_norm);
  if (!c.tie_word_embeddings) normal(impl->lm_head, c.vocab_size * d, sd);
  check(cudaStreamSynchronize(impl->stream), "cudaStreamSynchronize (random weights)");
  return LlamaModel(std::move(impl));
}

const io::LlamaConfig& LlamaModel::config() const {
  return impl_->config;
}
DType LlamaModel::weight_dtype() const {
  return impl_->dtype;
}
Device LlamaModel::device() const {
  return {DeviceKind::kCUDA, impl_->device};
}
void* LlamaModel::stream() const {
  return impl_->stream;
}
void LlamaModel::synchronize() const {
  check(cudaStreamSynchronize(impl_->stream), "cudaStreamSynchronize");
}
std::int64_t LlamaModel::weight_bytes() const {
  return static_cast<std::int64_t>(impl_->weight_bytes);
}

std::int64_t LlamaModel::num_parameters() const {
  const auto& c = impl_->config;
  const auto d = c.hidden_size;
  const std::int64_t per_layer =
      2 * d + (impl_->q_dim() + 2 * impl_->kv_dim()) * d + d * impl_->q_dim() + 3 * c.intermediate_size * d;
  return c.vocab_size * d * (c.tie_word_embeddings ? 1 : 2) + c.num_hidden_layers * per_layer + d;
}

namespace {

// Staging room of a sink + window cache between forwards: a chain or a small
// tree (a forward staging more grows the cache until its accept).
constexpr std::int64_t kSparseStaging = 64;

std::int64_t round_up(std::int64_t n, std::int64_t to) {
  return (n + to - 1) / to * to;
}

// The rows a sink + window cache keeps between long forwards.
std::int64_t sparse_room(const CachePolicy& policy, std::int64_t context) {
  return std::min(policy.sink + policy.window + kSparseStaging, context);
}

}  // namespace

void LlamaModel::open(std::int32_t seq, const CachePolicy& policy) {
  const bool sparse = policy.kind == CachePolicy::Kind::kSinkWindow;
  if (policy.kind != CachePolicy::Kind::kDense && !sparse)
    throw UnsupportedError(fmt::format("cuda::LlamaModel::open: sequence {}: unknown cache policy", seq));
  if (sparse && (policy.sink < 0 || policy.window < 1))
    throw InvalidArgumentError(
        fmt::format("cuda::LlamaModel::open: sequence {}: a sink + window cache needs sink >= 0 and "
                    "window >= 1 (got {} and {})",
                    seq, policy.sink, policy.window));
  Impl& m = *impl_;
  const std::lock_guard lock(m.mutex);
  check(cudaSetDevice(m.device), "cudaSetDevice");
  const std::int64_t context = m.config.max_position_embeddings;
  const std::int64_t rows = sparse ? sparse_room(policy, context) : context;
  const auto it = m.sequences.find(seq);
  // Reopened with the same size: the same slot, emptied. Otherwise a slot
  // needs no zeroing (attention reads only rows a forward wrote), and the
  // old one is given up only once the new one is allocated.
  const bool same = it != m.sequences.end() && m.slot_rows[static_cast<std::size_t>(it->second.slot)] == rows;
  CacheState state;
  state.slot = same ? it->second.slot : m.new_slot(rows);
  state.capacity = rows;
  state.policy = policy;
  const bool sink_keys = sparse && policy.positions == CachePolicy::Positions::kCache;
  try {
    m.reserve_sink_keys(state.slot, sink_keys ? policy.sink : 0);
  } catch (...) {
    if (!same) m.free_slots.push_back(state.slot);
    throw;
  }
  if (!same && it != m.sequences.end()) m.free_slots.push_back(it->second.slot);
  m.sequences[seq] = state;
}

void LlamaModel::close(std::int32_t seq) {
  Impl& m = *impl_;
  const std::lock_guard lock(m.mutex);
  const auto it = m.sequences.find(seq);
  if (it == m.sequences.end())
    throw InvalidArgumentError(fmt::format("cuda::LlamaModel::close: sequence {} is not open", seq));
  // A sink + window cache closed between a forward that grew it and that
  // forward's accept goes back to its resting size, where new_slot finds it.
  const CacheState& c = it->second;
  if (c.sparse()) {
    check(cudaSetDevice(m.device), "cudaSetDevice");
    m.resize_slot(c.slot, sparse_room(c.policy, m.config.max_position_embeddings));
  }
  m.free_slots.push_back(it->second.slot);
  m.sequences.erase(it);
}

std::int64_t LlamaModel::cached_length(std::int32_t seq) const {
  Impl& m = *impl_;
  const std::lock_guard lock(m.mutex);
  return m.state(seq, "cached_length").length;
}

std::int64_t LlamaModel::cache_rows(std::int32_t seq) const {
  Impl& m = *impl_;
  const std::lock_guard lock(m.mutex);
  return m.state(seq, "cache_rows").capacity;
}

void LlamaModel::forward(const ForwardRequest& request) {
  Impl& m = *impl_;
  const std::lock_guard lock(m.mutex);
  check(cudaSetDevice(m.device), "cudaSetDevice");  // before a cache grows
  const auto& c = m.config;
  std::vector<CacheState> states;
  for (const auto& s : request.sequences) states.push_back(m.state(s.seq_id, "forward"));
  ForwardPlan plan = plan_forward(request, states, c.vocab_size, c.max_position_embeddings);
  // A sink + window cache staging more than its room grows first (its
  // prompt, say); the plan then reads the new sizes.
  bool grown = false;
  for (std::size_t si = 0; si < states.size(); ++si)
    if (plan.rows_needed[si] > states[si].capacity) {
      const auto rows = std::min(round_up(plan.rows_needed[si], kSparseStaging), c.max_position_embeddings);
      m.resize_slot(states[si].slot, rows);
      states[si].capacity = m.sequences[request.sequences[si].seq_id].capacity = rows;
      grown = true;
    }
  if (grown) plan = plan_forward(request, states, c.vocab_size, c.max_position_embeddings);
  const std::int64_t total = plan.total();
  const Device dev = {DeviceKind::kCUDA, m.device};
  const bool want_logits = !request.logits.empty(), want_hidden = !request.hidden.empty();
  const bool logits_dev = want_logits && output_on_device(request.logits, total, c.vocab_size, dev, "logits");
  const bool hidden_dev =
      want_hidden && output_on_device(request.hidden, total, c.hidden_size, dev, "hidden");
  const auto num_layers = static_cast<std::int32_t>(m.layers.size());
  if (want_hidden && request.hidden_layers != 1)
    throw UnsupportedError("cuda::LlamaModel::forward: one hidden layer per forward (hidden_layers = 1)");
  if (want_hidden && (request.hidden_layer >= num_layers || request.hidden_layer < -1))
    throw InvalidArgumentError(fmt::format("cuda::LlamaModel::forward: hidden_layer {} of a {}-layer model",
                                           request.hidden_layer, num_layers));
  if (total == 0) {
    for (std::size_t si = 0; si < request.sequences.size(); ++si)
      m.sequences[request.sequences[si].seq_id].staged = plan.staged_after[si];
    return;
  }

  const auto n = static_cast<std::size_t>(total);
  const auto d = static_cast<std::size_t>(c.hidden_size),
             inner = static_cast<std::size_t>(c.intermediate_size);
  const auto qkv_dim = static_cast<std::size_t>(m.q_dim() + 2 * m.kv_dim());
  cudaStream_t s = m.stream;
  float* x = m.x.get<float>(n * d, s);
  float* qkv = m.qkv.get<float>(n * qkv_dim, s);
  float* attn = m.attn.get<float>(n * static_cast<std::size_t>(m.q_dim()), s);
  float* act = m.act.get<float>(n * inner, s);
  // The plan, in one copy: tokens, rows, mask words (each part 256-aligned).
  const std::size_t tokens_bytes = n * sizeof(std::int32_t), rows_bytes = n * sizeof(TokenPlan),
                    mask_bytes = plan.mask_words.size() * sizeof(std::uint64_t);
  auto* plan_dev = m.plan.get<char>(aligned(tokens_bytes) + aligned(rows_bytes) + aligned(mask_bytes), s);
  m.upload(plan_dev, {{plan.tokens.data(), tokens_bytes},
                      {plan.rows.data(), rows_bytes},
                      {plan.mask_words.data(), mask_bytes}});
  const auto* tokens_dev = reinterpret_cast<const std::int32_t*>(plan_dev);
  const auto* rows_dev = reinterpret_cast<const TokenPlan*>(plan_dev + aligned(tokens_bytes));
  const auto* mask_dev =
      reinterpret_cast<const std::uint64_t*>(plan_dev + aligned(tokens_bytes) + aligned(rows_bytes));

  const bool w = m.dtype == DType::kBF16;  // the weights' precision
  const auto shape = m.attention_shape();
  const auto eps = static_cast<float>(c.rms_norm_eps);
  float* hidden_dst = !want_hidden ? nullptr
                      : hidden_dev ? static_cast<float*>(request.hidden.data())
                                   : m.hidden.get<float>(n * d, s);
  float* logits_dst = !want_logits ? nullptr
                      : logits_dev ? static_cast<float*>(request.logits.data())
                                   : m.logits.get<float>(n * static_cast<std::size_t>(c.vocab_size), s);
  // The launches, from the embedding to the outputs (no host memory, no
  // synchronisation: they may be captured into a graph).
  const auto enqueue = [&] {
    check_launch(detail::embed_rows(m.at(m.embed), w, tokens_dev, total, c.hidden_size, x, s), "embed_rows");
    for (std::int32_t li = 0; li < num_layers; ++li) {
      const auto& l = m.layers[static_cast<std::size_t>(li)];
      check_launch(detail::norm_linear_rows(x, m.at_f32(l.attn_norm), eps, m.at(l.qkv), w, qkv, total,
                                            static_cast<std::int64_t>(qkv_dim), c.hidden_size, s),
                   "norm_linear_rows (qkv)");
      check_launch(detail::rope_and_store(qkv, rows_dev, total, m.rope_cos, m.rope_sin, m.slot_k_dev,
                                          m.slot_v_dev, li, shape, s),
                   "rope_and_store");
      check_launch(detail::attention_rows(qkv, rows_dev, mask_dev, total, m.slot_k_dev, m.slot_v_dev, li,
                                          shape, attn, s),
                   "attention_rows");
      check_launch(detail::linear_rows(attn, m.at(l.o), w, x, total, c.hidden_size, m.q_dim(), true, s),
                   "linear_rows (o)");
      check_launch(detail::norm_swiglu_rows(x, m.at_f32(l.mlp_norm), eps, m.at(l.gate_up), w, act, total,
                                            c.intermediate_size, c.hidden_size, s),
                   "norm_swiglu_rows");
      check_launch(
          detail::linear_rows(act, m.at(l.down), w, x, total, c.hidden_size, c.intermediate_size, true, s),
          "linear_rows (down)");
      if (want_hidden && request.hidden_layer == li)
        check(cudaMemcpyAsync(hidden_dst, x, n * d * sizeof(float), cudaMemcpyDeviceToDevice, s),
              "cudaMemcpyAsync");
    }
    if (!want_logits && !want_hidden) return;  // a prefill fills the caches only
    if (want_logits)
      check_launch(detail::norm_linear_rows(x, m.at_f32(m.final_norm), eps, m.at(m.lm_head), w, logits_dst,
                                            total, c.vocab_size, c.hidden_size, s),
                   "norm_linear_rows (lm_head)");
    if (want_hidden && request.hidden_layer == -1)
      check_launch(detail::rms_norm_rows(x, m.at_f32(m.final_norm), hidden_dst, total, c.hidden_size, eps, s),
                   "rms_norm_rows");
  };
  Impl::GraphKey key;
  key.buffers = {x, qkv, attn, act, plan_dev, hidden_dst, logits_dst, m.slot_k_dev, m.slot_v_dev};
  key.rows = total;
  key.hidden_layer = want_hidden ? request.hidden_layer : 0;
  key.logits = want_logits;
  key.hidden = want_hidden;
  m.run(key, enqueue);
  // The keys and values are staged now.
  for (std::size_t si = 0; si < request.sequences.size(); ++si)
    m.sequences[request.sequences[si].seq_id].staged = plan.staged_after[si];
  if (!want_logits && !want_hidden) return;
  // Host outputs: copied back, and waited for.
  const bool to_host = (want_logits && !logits_dev) || (want_hidden && !hidden_dev);
  if (want_logits && !logits_dev)
    check(cudaMemcpyAsync(request.logits.data(), logits_dst,
                          n * static_cast<std::size_t>(c.vocab_size) * sizeof(float), cudaMemcpyDeviceToHost,
                          s),
          "cudaMemcpyAsync (logits)");
  if (want_hidden && !hidden_dev)
    check(
        cudaMemcpyAsync(request.hidden.data(), hidden_dst, n * d * sizeof(float), cudaMemcpyDeviceToHost, s),
        "cudaMemcpyAsync (hidden)");
  if (to_host) check(cudaStreamSynchronize(s), "cudaStreamSynchronize (forward)");
}

void LlamaModel::accept(std::int32_t seq, std::span<const std::int32_t> path) {
  Impl& m = *impl_;
  const std::lock_guard lock(m.mutex);
  CacheState& c = m.state(seq, "accept");
  check_accept_path(path, c);
  const std::vector<CacheMove> moves = plan_accept(path, c);
  const auto slot = static_cast<std::size_t>(c.slot);
  const auto shape = m.attention_shape();
  check(cudaSetDevice(m.device), "cudaSetDevice");
  if (!moves.empty()) {
    auto* moves_dev = m.path.get<CacheMove>(moves.size(), m.stream);
    m.upload(moves_dev, {{moves.data(), moves.size() * sizeof(CacheMove)}});
    check_launch(detail::compact_cache(m.slot_k[slot], m.slot_v[slot], c.capacity, moves_dev,
                                       static_cast<std::int32_t>(moves.size()), m.slot_sink[slot],
                                       static_cast<std::int32_t>(m.slot_sink_rows[slot]), shape, m.stream),
                 "compact_cache");
  }
  c.length += static_cast<std::int64_t>(path.size());
  c.staged = 0;
  // Positions within the cache: the sink's keys rotated by the tokens now
  // evicted (the queries and the window's keys are at text positions; RoPE
  // scores depend on differences only, so this scores as cache positions do).
  if (m.slot_sink[slot] != nullptr && c.evicted() != c.sink_shift) {
    check_launch(detail::shift_sink(m.slot_k[slot], c.capacity, m.slot_sink[slot],
                                    static_cast<std::int32_t>(c.policy.sink),
                                    static_cast<std::int32_t>(std::min(c.policy.sink, c.length)), c.evicted(),
                                    m.rope_cos, m.rope_sin, shape, m.stream),
                 "shift_sink");
    c.sink_shift = c.evicted();
  }
  if (c.sparse()) {  // back to its room after a long forward
    const auto room = sparse_room(c.policy, m.config.max_position_embeddings);
    if (c.capacity > room) {
      m.resize_slot(c.slot, room);
      c.capacity = room;
    }
  }
}

void LlamaModel::rollback(std::int32_t seq, std::int64_t length) {
  Impl& m = *impl_;
  const std::lock_guard lock(m.mutex);
  CacheState& c = m.state(seq, "rollback");
  check_rollback(seq, length, c);
  c.length = length;
  c.staged = 0;
}

}  // namespace specdec::cuda
