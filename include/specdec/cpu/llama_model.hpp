// A Llama-architecture model for inference on the CPU, without libtorch: the
// Model concept (docs/integration.md §1) over specdec's CPU kernels
// (src/cpu/decoder_layer.hpp, the row kernel, the forwards' thread team).
// RMSNorm, rotary embeddings (rotate-half, rope_theta), multi-head and
// grouped-query attention, SwiGLU, tied or untied embeddings; the same
// config.json and safetensors (Hugging Face names) as the libtorch and CUDA
// models.
//
// Per-sequence KV caches (dense, or sink + window whose window is a ring);
// new tokens with caller-chosen positions and an ancestor mask among them,
// staged after the committed prefix until accept(path) compacts them or
// rollback drops them; several sequences per forward, their projections in
// shared products and attention per sequence. Each row's arithmetic is the
// same whatever the other rows of the call, so a token verified among others
// gets exactly the logits it gets decoded alone (greedy speculative = greedy
// autoregressive, docs/acceptance.md).
//
// What it is for: a draft model on the host cores beside a target on an
// accelerator (DuoDecoding, arXiv 2503.00784 §3.1) in a build without
// libtorch, and hosts that want specdec's CPU forward without libtorch.
// torch_backend::LlamaModel runs its inference on this class (its
// parameters packed into LlamaWeights), so the two give the same logits.
#pragma once

#include <cstdint>
#include <filesystem>
#include <memory>
#include <new>
#include <shared_mutex>
#include <span>
#include <unordered_map>
#include <vector>

#include "specdec/core/round.hpp"
#include "specdec/core/tensor_view.hpp"
#include "specdec/cpu/linear.hpp"
#include "specdec/io/llama_config.hpp"

namespace specdec::cpu {

// cos and sin of every position, [max_position_embeddings, head_dim] each,
// the two halves repeated (Hugging Face's cat(freqs, freqs)):
// angle(p, i) = p * theta^(-2i / head_dim).
struct RopeTables {
  std::vector<float> cos, sin;
};
RopeTables rope_tables(const io::LlamaConfig& config);

// A decoder layer's inference weights: q|k|v and gate|up fused (fewer,
// larger products).
struct LlamaLayerWeights {
  std::unique_ptr<const Linear> qkv, o, gate_up, down;
  std::vector<float> attn_norm, mlp_norm;  // [hidden]
};
struct LlamaWeights {
  // [vocab, hidden] f32, read in place, and what keeps it (the loader's
  // vector; the libtorch model's parameter).
  std::span<const float> embedding;
  std::shared_ptr<const void> embedding_owner;
  std::vector<LlamaLayerWeights> layers;
  std::vector<float> final_norm;  // [hidden]
  // [vocab, hidden]: forward() writes every logit row with it (a draft's
  // hot-vocabulary head writes -inf outside its tokens).
  std::shared_ptr<const Linear> lm_head;
};

// Storage aligned to a cache line (64 bytes), as the caches' key blocks are.
template <class T>
struct CacheLineAllocator {
  using value_type = T;
  CacheLineAllocator() = default;
  template <class U>
  CacheLineAllocator(const CacheLineAllocator<U>&) noexcept {}
  T* allocate(std::size_t n) { return static_cast<T*>(::operator new (n * sizeof(T), std::align_val_t{64})); }
  void deallocate(T* p, std::size_t) noexcept { ::operator delete (p, std::align_val_t{64}); }
  friend bool operator==(const CacheLineAllocator&, const CacheLineAllocator&) { return true; }
};

class LlamaModel {
 public:
  // config.json + model.safetensors (or a sharded index) from `dir`, the
  // linear weights stored as `weights` (kF32, or kBF16 rounded to nearest
  // even; activations and sums stay f32) on the row kernel (RowLinear).
  // Throws ModelLoadError as the other backends' loaders do (a missing or
  // misshapen tensor, a non-finite value, a tensor of another architecture),
  // InvalidArgumentError for another precision, UnsupportedError where this
  // CPU has no row kernel for it (RowLinear::available).
  static LlamaModel load(const std::filesystem::path& dir, DType weights = DType::kF32);

  // A model without weights yet (set_weights gives them): what a backend
  // that keeps its own parameters (libtorch's) builds its inference on.
  // `rope` is [max_position_embeddings, head_dim] each. Throws ShapeError
  // for tables of another size.
  LlamaModel(io::LlamaConfig config, RopeTables rope);
  LlamaModel(LlamaModel&&) noexcept = default;
  LlamaModel& operator=(LlamaModel&&) noexcept = default;

  // Replaces the weights (the caches stay). Throws ShapeError for weights of
  // other shapes than the config's, UnsupportedError for an odd head_dim or
  // one above 512 (the forward's limits). Not concurrently with forward().
  void set_weights(LlamaWeights weights);
  bool has_weights() const { return weights_.lm_head != nullptr; }
  void drop_weights() { weights_ = {}; }
  // Replaces the LM head only (a draft's hot-vocabulary head, or back to the
  // whole vocabulary). Throws ShapeError for one of another shape, and
  // InvalidArgumentError without weights.
  void set_lm_head(std::shared_ptr<const Linear> head);

  const io::LlamaConfig& config() const { return config_; }
  std::int64_t vocab_size() const { return config_.vocab_size; }
  std::int64_t hidden_size() const { return config_.hidden_size; }
  std::int64_t max_context() const { return config_.max_position_embeddings; }
  // The tables the forward rotates with (the libtorch model's training
  // forward reads them too).
  const RopeTables& rope() const { return rope_; }

  // ---- the Model concept -----------------------------------------------------
  // Opens (or reopens) sequence `seq` with an empty cache. A dense cache holds
  // max_context() tokens (reusing a closed sequence's buffers). A sink +
  // window cache holds the sink, the window and a forward's staged tokens:
  // its window is a ring, so accept() writes only the tokens it keeps, and its
  // buffers grow for a forward with more staged tokens than they hold (a
  // prompt) and shrink back at the next accept(). Rolling back a sink +
  // window cache past tokens it has evicted is refused.
  void open(std::int32_t seq, const CachePolicy& policy = {});
  void close(std::int32_t seq);
  // Tokens committed to the sequence (evicted ones included), and the slots
  // its cache holds per layer and kv head now.
  std::int64_t cached_length(std::int32_t seq) const;
  std::int64_t cache_slots(std::int32_t seq) const;
  // Runs each sequence's new tokens after its committed prefix and writes the
  // logits / hidden states into the request's host buffers. Their keys and
  // values are staged after the prefix until accept() or rollback(). Forwards
  // on different sequences may run concurrently (the caches are per
  // sequence, the outputs the callers'); open and close may run beside them.
  void forward(const ForwardRequest& request);
  // Keeps the new tokens `path` (indices into that sequence's tokens of the
  // last forward, root to leaf) and compacts their keys and values right
  // after the prefix; the rest of the staged tokens is dropped.
  void accept(std::int32_t seq, std::span<const std::int32_t> path);
  // Truncates the committed cache to `length` tokens (drops staged ones).
  void rollback(std::int32_t seq, std::int64_t length);

 private:
  // A sequence's keys and values. Committed token t sits at slot t in a dense
  // cache; in a sink + window cache at t below the sink, else at sink + (t -
  // sink) % window (a ring), and only the last `window` of those are kept.
  // Staged tokens follow the committed slots in use.
  struct Cache {
    std::vector<float, CacheLineAllocator<float>>
        k;  // [layers, kv_heads, slots * head_dim]: blocks of transposed keys
    std::vector<float, CacheLineAllocator<float>> v;  // [layers, kv_heads, slots, head_dim]
    std::int64_t slots = 0;                           // per layer and kv head, a multiple of the key block
    std::int64_t length = 0;                          // committed tokens
    std::int64_t staged = 0;                          // tokens of the last forward, after the committed slots
    CachePolicy policy;
    // Positions::kCache: the sink's keys as rotated at their own positions
    // ([layers * kv_heads][sink][head_dim]), and the shift of the rotation
    // the cache's sink slots carry now (the tokens evicted so far).
    std::vector<float> sink_keys;
    std::int64_t sink_shift = 0;

    bool sparse() const { return policy.kind == CachePolicy::Kind::kSinkWindow; }
    // Committed tokens in slots: the prefix every new token sees.
    std::int64_t visible() const;
    std::int64_t slot_of(std::int64_t t) const;
  };

  Cache& cache(std::int32_t seq);
  const Cache& cache(std::int32_t seq) const;
  Cache new_cache(std::int64_t slots) const;  // zeroed
  void resize_cache(Cache& cache, std::int64_t slots) const;
  std::int64_t sparse_slots(const CachePolicy& policy) const;  // a sink + window cache between forwards
  void shift_sink(Cache& cache) const;  // Positions::kCache: the sink's rotation for the evictions so far
  void drop_cache(std::unordered_map<std::int32_t, Cache>::iterator it);  // caches_mutex_ held

  io::LlamaConfig config_;
  RopeTables rope_;
  LlamaWeights weights_;
  std::unordered_map<std::int32_t, Cache> caches_;
  std::vector<Cache> spare_caches_;  // closed sequences' buffers, reused by open()
  // open() and close() against the lookups of forwards on other sequences:
  // hosts that step engines over one model on several threads close a
  // finished request's sequence inside a step (docs/integration.md).
  std::unique_ptr<std::shared_mutex> caches_mutex_ = std::make_unique<std::shared_mutex>();
};

}  // namespace specdec::cpu
