// Reference Llama-architecture model on libtorch (docs/design.md §2-3): RMSNorm,
// rotary embeddings, SwiGLU MLP, multi-head and grouped-query attention, tied
// or untied embeddings, with Hugging Face parameter names so checkpoints load
// and save in the Hugging Face layout.
//
// Two paths over the same weights:
//  - forward_train: a full causal forward of [batch, time] tokens from position
//    0, differentiable (libtorch autograd), used by the trainer and as the
//    numerical reference;
//  - the Model concept (forward / accept / rollback): per-sequence KV caches,
//    new tokens with positions and an ancestor mask among them (every new
//    token sees the whole committed prefix), several sequences per call with
//    their projections in shared GEMMs and attention per sequence (ragged).
//    Its linear layers run on oneDNN with weights packed once (PackedLinear):
//    libtorch's OpenBLAS path re-packs weights on every small-M call, which
//    makes a 16-token verification cost 3-4x a 1-token step instead of ~2x.
#pragma once

#include <ATen/ATen.h>

#include <algorithm>
#include <cstdint>
#include <filesystem>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <string>
#include <string_view>
#include <unordered_map>
#include <utility>
#include <vector>

#include "specdec/core/round.hpp"
#include "specdec/core/tensor_view.hpp"
#include "specdec/io/llama_config.hpp"
#include "specdec/torch/hot_lm_head.hpp"
#include "specdec/torch/packed_linear.hpp"

namespace specdec::torch_backend {

class LlamaModel {
 public:
  // Fresh weights: N(0, 0.02) linear and embedding weights, the residual
  // output projections scaled by 1/sqrt(2 * layers) (GPT-2), unit norms.
  static LlamaModel random(const io::LlamaConfig& config, std::uint64_t seed);
  // config.json + model.safetensors (or a sharded index) from `dir`; weights
  // are converted to float32 for compute.
  static LlamaModel load(const std::filesystem::path& dir);
  // Writes config.json + model.safetensors with weights stored as `storage`
  // (kF32, kF16 or kBF16).
  void save(const std::filesystem::path& dir, DType storage) const;

  const io::LlamaConfig& config() const { return config_; }
  std::int64_t vocab_size() const { return config_.vocab_size; }
  std::int64_t hidden_size() const { return config_.hidden_size; }
  std::int64_t max_context() const { return config_.max_position_embeddings; }
  std::int64_t num_parameters() const;
  // Throws ShapeError naming `tokenizer_source` unless a tokenizer of
  // `tokenizer_vocab` pieces fits this model exactly (a mismatch would feed
  // ids the embedding does not have, or never produce some the model emits).
  void check_tokenizer_vocab(std::int64_t tokenizer_vocab, std::string_view tokenizer_source) const;

  // Hugging Face names ("model.layers.0.self_attn.q_proj.weight", ...) and the
  // tensors themselves (shared, so an optimizer updates the model in place).
  std::vector<std::pair<std::string, at::Tensor>> named_parameters() const;
  std::vector<at::Tensor> parameters() const;
  // The frozen pieces a feature-level draft head shares with its target
  // (EAGLE, Lyanna): the token embedding and the LM head, both [vocab, hidden].
  const at::Tensor& embedding() const { return embed_; }
  const at::Tensor& lm_head() const { return lm_head_; }
  // Turning gradients on (training) drops the packed inference weights; the
  // next forward() packs the then-current weights again.
  void set_requires_grad(bool on);
  // The precision forward() packs the weights in: kF32 (the default and the
  // reference) or kBF16 (half the bytes per decode step; activations and
  // accumulation stay f32). Changing it drops the packed weights; the caches
  // stay. Throws InvalidArgumentError for any other dtype. See
  // inference_dtype.hpp for choosing one the CPU runs natively.
  void set_inference_dtype(DType dtype);
  DType inference_dtype() const { return inference_dtype_; }
  // A draft model's hot-vocabulary LM head (hot_lm_head.hpp, FR-Spec):
  // forward() then writes logits of the hot tokens only, -inf elsewhere.
  // nullptr restores the whole vocabulary. The head must be built from this
  // model's lm_head(); a precision change rebuilds it in the new precision.
  void set_hot_lm_head(std::shared_ptr<const HotLmHead> head);
  const std::shared_ptr<const HotLmHead>& hot_lm_head() const { return hot_lm_head_; }

  // Causal forward of tokens [batch, time] (int64) at positions 0..time-1.
  // Returns logits [batch, time, vocab]; with `hidden` non-null also the
  // final-norm hidden states [batch, time, hidden]. `matmul_dtype` kBFloat16
  // runs the weight matmuls on bf16 operands with f32 accumulation (training
  // and feature caching; see kernels::linear). With `layer_outputs`
  // non-null, also every layer's output [batch, time, hidden] (a SPIRe
  // draft's memories are the inputs of the layers it was pruned from).
  at::Tensor forward_train(const at::Tensor& tokens, at::Tensor* hidden = nullptr,
                           at::ScalarType matmul_dtype = at::kFloat,
                           std::vector<at::Tensor>* layer_outputs = nullptr) const;

  // ---- Model concept: per-sequence KV caches ------------------------------
  // Opens (or reopens) sequence `seq` with an empty cache. A dense cache
  // holds max_context() tokens (reusing a closed sequence's buffers). A sink
  // + window cache (CachePolicy) holds the sink, the window and a forward's
  // staged tokens: its window is a ring, so accept() writes only the tokens it
  // keeps, and its buffers grow for a forward with more staged tokens than
  // they hold (a prompt) and shrink back at the next accept(). Rolling back a
  // sink + window cache past tokens it has evicted is refused.
  void open(std::int32_t seq, const CachePolicy& policy = {});
  void close(std::int32_t seq);
  // Tokens committed to the sequence (evicted ones included), and the slots
  // its cache holds per layer and kv head now.
  std::int64_t cached_length(std::int32_t seq) const;
  std::int64_t cache_slots(std::int32_t seq) const;
  // Runs each sequence's new tokens after its committed prefix and writes the
  // logits / hidden states into the request's host buffers. Their keys and
  // values are staged after the prefix until accept() or rollback(). Forwards
  // on different sequences may run concurrently (the caches are per sequence,
  // the outputs the callers'); open and close may not.
  void forward(const ForwardRequest& request);
  // Keeps the new tokens `path` (indices into that sequence's tokens of the
  // last forward, root to leaf) and compacts their keys/values right after
  // the prefix; the rest of the staged tokens is dropped.
  void accept(std::int32_t seq, std::span<const std::int32_t> path);
  // Truncates the committed cache to `length` tokens (drops staged ones).
  void rollback(std::int32_t seq, std::int64_t length);

 private:
  struct Layer {
    at::Tensor attn_norm, wq, wk, wv, wo, mlp_norm, w_gate, w_up, w_down;
  };
  // Inference copies of a layer's linear weights: q, k, v fused into one
  // matrix and gate, up fused into another (fewer, larger GEMMs).
  struct PackedLayer {
    PackedLinear qkv, o, gate_up, down;
  };
  // A sequence's keys and values. Committed token t sits at slot t in a dense
  // cache; in a sink + window cache at t below the sink, else at sink + (t -
  // sink) % window (a ring), and only the last `window` of those are kept.
  // Staged tokens follow the committed slots in use.
  struct Cache {
    at::Tensor k;               // [layers, kv_heads, slots * head_dim]: blocks of transposed keys
    at::Tensor v;               // [layers, kv_heads, slots, head_dim]
    std::int64_t slots = 0;     // per layer and kv head, a multiple of the key block
    std::int64_t length = 0;    // committed tokens
    std::int64_t staged = 0;    // tokens of the last forward, after the committed slots
    CachePolicy policy;
    // Positions::kCache: the sink's keys as rotated at their own positions
    // ([layers * kv_heads][sink][head_dim]), and the shift of the rotation
    // the cache's sink slots carry now (the tokens evicted so far).
    std::vector<float> sink_keys;
    std::int64_t sink_shift = 0;

    bool sparse() const { return policy.kind == CachePolicy::Kind::kSinkWindow; }
    // Committed tokens in slots: the prefix every new token sees.
    std::int64_t visible() const { return sparse() ? std::min(length, policy.sink + policy.window) : length; }
    std::int64_t slot_of(std::int64_t t) const {
      return !sparse() || t < policy.sink ? t : policy.sink + (t - policy.sink) % policy.window;
    }
  };

  explicit LlamaModel(io::LlamaConfig config);
  void check_tokens(const at::Tensor& tokens) const;
  Cache& cache(std::int32_t seq);
  const Cache& cache(std::int32_t seq) const;
  Cache new_cache(std::int64_t slots) const;  // zeroed
  void resize_cache(Cache& cache, std::int64_t slots) const;
  std::int64_t sparse_slots(const CachePolicy& policy) const;  // a sink + window cache between forwards
  void shift_sink(Cache& cache) const;  // Positions::kCache: the sink's rotation for the evictions so far
  at::Tensor rope(const at::Tensor& x, const at::Tensor& positions) const;  // x [n, heads, head_dim]; training
  void pack_for_inference();

  io::LlamaConfig config_;
  at::Tensor embed_, final_norm_, lm_head_;  // lm_head_ aliases embed_ when tied
  std::vector<Layer> layers_;
  std::vector<PackedLayer> packed_;        // empty until the first forward()
  DType inference_dtype_ = DType::kF32;
  std::unique_ptr<PackedLinear> packed_lm_head_;
  std::shared_ptr<const HotLmHead> hot_lm_head_;
  at::Tensor rope_cos_, rope_sin_;  // [max_position_embeddings, head_dim]
  std::unordered_map<std::int32_t, Cache> caches_;
  std::vector<Cache> spare_caches_;  // closed sequences' buffers, reused by open()
  // open() and close() against the lookups of forwards on other sequences:
  // hosts that step engines over one model on several threads close a
  // finished request's sequence inside a step (docs/integration.md).
  std::unique_ptr<std::shared_mutex> caches_mutex_ = std::make_unique<std::shared_mutex>();
  void drop_cache(std::unordered_map<std::int32_t, Cache>::iterator it);     // caches_mutex_ held
  std::unique_ptr<std::mutex> pack_mutex_ = std::make_unique<std::mutex>();  // the first forward packs the weights
};

}  // namespace specdec::torch_backend
