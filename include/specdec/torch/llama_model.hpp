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
//    It runs on cpu::LlamaModel (specdec/cpu/llama_model.hpp) over the
//    parameters packed once (PackedLinear: specdec's row kernel, or oneDNN
//    where the CPU lacks its instructions): libtorch's OpenBLAS path re-packs
//    weights on every small-M call, which makes a 16-token verification cost
//    3-4x a 1-token step instead of ~2x.
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

namespace specdec::cpu {
class LlamaModel;
}

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

  // ---- Model concept: per-sequence KV caches, those of cpu::LlamaModel --------
  // (specdec/cpu/llama_model.hpp has the contract). The first forward packs
  // the parameters in inference_dtype().
  void open(std::int32_t seq, const CachePolicy& policy = {});
  void close(std::int32_t seq);
  std::int64_t cached_length(std::int32_t seq) const;
  std::int64_t cache_slots(std::int32_t seq) const;
  void forward(const ForwardRequest& request);
  void accept(std::int32_t seq, std::span<const std::int32_t> path);
  void rollback(std::int32_t seq, std::int64_t length);

  ~LlamaModel();
  LlamaModel(LlamaModel&&) noexcept;
  LlamaModel& operator=(LlamaModel&&) noexcept;

 private:
  struct Layer {
    at::Tensor attn_norm, wq, wk, wv, wo, mlp_norm, w_gate, w_up, w_down;
  };
  explicit LlamaModel(io::LlamaConfig config);
  void check_tokens(const at::Tensor& tokens) const;
  at::Tensor rope(const at::Tensor& x, const at::Tensor& positions) const;  // x [n, heads, head_dim]; training
  void pack_for_inference();

  io::LlamaConfig config_;
  at::Tensor embed_, final_norm_, lm_head_;  // lm_head_ aliases embed_ when tied
  std::vector<Layer> layers_;
  DType inference_dtype_ = DType::kF32;
  std::shared_ptr<const HotLmHead> hot_lm_head_;
  at::Tensor rope_cos_, rope_sin_;  // [max_position_embeddings, head_dim]
  // The inference model: the caches, and the parameters packed by the first
  // forward() (dropped when they may change or change precision).
  std::unique_ptr<cpu::LlamaModel> inference_;
  std::shared_ptr<const PackedLinear> full_lm_head_;  // the whole vocabulary's, while packed
  std::unique_ptr<std::mutex> pack_mutex_ = std::make_unique<std::mutex>();  // the first forward packs the weights
};

}  // namespace specdec::torch_backend
