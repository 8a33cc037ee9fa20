// Feature-level draft heads over a frozen target: one trainable transformer
// layer that predicts the target's next last-layer hidden state (after the
// final norm), read out through the target's own LM head.
//
//  - Lyanna (arXiv 2602.21224, §4.1):
//      h_1     = Layer(fuse(h_0, E(t_1)))   h_0: target hidden state, t_1: bonus token
//      h_{i+1} = Layer(h_i)                 no drafted token enters the chain
//    so the chain is computed once per round whatever the tree, and its N
//    states go through the LM head in one GEMM (§4.2). Token information
//    enters at the logit level, l'_i = l_i + RMSNorm(E'(t_{i-1})) with
//    E'(t) = W_E[t] W_1 W_2 (§5.1), collapsed after training into a
//    TokenInfoTable over the hot tokens (§6.1). Ablations: first_token =
//    false (h_1 = Layer(h_0)), token_info_rank = 0 (no E').
//  - EAGLE (the baseline): f_{i+1} = Layer(fuse(f_i, E(t_{i+1}))): every step
//    consumes the previous drafted token, so a rejected token invalidates
//    what was drafted after it.
//  - EAGLE-3 (arXiv 2503.01840 §3): EAGLE's token-based autoregression, but
//    step 1 reads g = W_g [l; m; h], the outputs of a low, a middle and a
//    high target layer fused by one linear (§3.2), instead of the final
//    feature; steps >= 2 read the head's own previous output a_i (§3.1). No
//    feature loss (alpha = 0): a_i is free to be whatever helps the next
//    step, and training-time test (§3.1, below) teaches the head to read it.
//
// fuse(a, b) = W_fc [a; b] (EAGLE's concat + linear; the paper's ⊕ is not
// specified further).
//
// Training unrolls N draft steps over every position of a window at once
// (EAGLE-3's training-time test): step s at anchor t sits at position
// t + s - 1, sees the step-1 entries of positions <= t (the cache decoding
// would have) and its own chain's earlier steps.
//
// Inference keeps one sequence's key/value cache: advance() commits the true
// entries of newly verified positions, chain() / extend() stage draft steps
// after them until the next advance().
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "specdec/core/bit_matrix.hpp"
#include "specdec/core/tensor_view.hpp"
#include "specdec/core/types.hpp"
#include "specdec/draft/token_info_table.hpp"
#include "specdec/io/llama_config.hpp"
#include "specdec/torch/llama_model.hpp"
#include "specdec/torch/packed_linear.hpp"

namespace specdec::torch_backend {

enum class HeadKind { kLyanna, kEagle, kEagle3 };

struct DraftHeadConfig {
  HeadKind kind = HeadKind::kLyanna;
  bool first_token = true;              // Lyanna: fuse the bonus token into h_1
  std::int64_t token_info_rank = 64;    // Lyanna: rank d of E' (0 = no token info)
  std::vector<TokenId> hot_tokens;      // token-info rows/columns; empty = every token (dense)
  // EAGLE-3: the target layers (0-based, increasing) whose outputs step 1
  // fuses; empty for the other kinds.
  std::vector<std::int32_t> feature_layers;
  io::LlamaConfig target;               // the target's architecture (layer shapes, vocabulary, RoPE)

  bool fuses_token(std::int32_t step) const {
    return kind != HeadKind::kLyanna || (first_token && step == 1);
  }
  bool has_token_info() const { return kind == HeadKind::kLyanna && token_info_rank > 0; }
  // What the head reads of the target per token (ModelVerifier::
  // set_feature_layers): the outputs of layers first .. first + count - 1
  // side by side (EAGLE-3: the span covering feature_layers), or (-1, 1)
  // the final-norm hidden state.
  std::int32_t feature_layer_first() const { return feature_layers.empty() ? -1 : feature_layers.front(); }
  std::int32_t feature_layer_count() const {
    return feature_layers.empty() ? 1 : feature_layers.back() - feature_layers.front() + 1;
  }
  // The EAGLE-3 layers for a target of `num_layers` layers: the second, the
  // middle and the last (a 6-layer target: 1, 3, 5).
  static std::vector<std::int32_t> default_feature_layers(std::int64_t num_layers);
  std::string describe() const;
};

// What one training forward returns: the loss alpha * MSE + beta * CE, its
// parts, and per draft step the fraction of positions whose top-1 token
// equals the target's and the fraction where steps 1..s all do; and per
// step the predicted hidden states [B, T, hidden] and logits (with token
// info) [B, T, vocab], for tests that hold inference against training.
struct HeadTrainOutput {
  at::Tensor loss, mse, ce;
  std::vector<double> top1, chain_top1;
  std::vector<at::Tensor> hidden, logits;
};

class DraftHead {
 public:
  // Fresh weights: N(0, 0.02) linears (residual outputs / sqrt(2)), unit norm
  // gains, token-info gain 0.1. `target` provides the frozen embedding and LM
  // head and must match config.target.
  static DraftHead random(DraftHeadConfig config, const LlamaModel& target, std::uint64_t seed);
  // head_config.json + head.safetensors from `dir`.
  static DraftHead load(const std::filesystem::path& dir, const LlamaModel& target);
  void save(const std::filesystem::path& dir, DType storage) const;

  const DraftHeadConfig& config() const { return config_; }
  std::int64_t num_parameters() const;
  std::vector<std::pair<std::string, at::Tensor>> named_parameters() const;
  std::vector<at::Tensor> parameters() const;
  void set_requires_grad(bool on);

  // ---- training ----------------------------------------------------------
  // tokens [B, T + N] int64; target_hidden [B, T + N, hidden] (after the
  // final norm) and target_logits [B, T + N, vocab] of the frozen target on
  // those tokens. Anchors t = 1..T; step s predicts target_hidden[t + s - 1].
  // An EAGLE-3 head also needs target_layers [B, T + N, L * hidden], the
  // outputs of config().feature_layers side by side (undefined otherwise).
  HeadTrainOutput forward_train(const at::Tensor& tokens, const at::Tensor& target_hidden,
                                const at::Tensor& target_logits, std::int64_t steps, double alpha,
                                double beta, at::ScalarType matmul_dtype = at::kFloat,
                                const at::Tensor& target_layers = at::Tensor()) const;
  // The outputs of config().feature_layers picked from a LlamaModel::
  // forward_train's layer outputs: [B, T, L * hidden] (undefined for a head
  // that reads no layers).
  at::Tensor pick_layers(const std::vector<at::Tensor>& layer_outputs) const;

  // ---- inference (one sequence) -------------------------------------------
  // Another head over the same weights with a cache of its own: one per
  // request when several sequences draft at once. This head packs its
  // inference weights first (if no call has yet), so that every fork shares
  // one packing instead of packing its own.
  DraftHead fork();
  void reset();
  // The precision the inference weights are packed in: kF32 (default) or
  // kBF16 (LlamaModel::set_inference_dtype). Changing it drops the packed
  // weights of this head (forks made before keep theirs). Throws
  // InvalidArgumentError for any other dtype.
  void set_inference_dtype(DType dtype);
  DType inference_dtype() const { return inference_dtype_; }
  // The hot-vocabulary LM head (hot_lm_head.hpp, FR-Spec): logits() then
  // computes the hot tokens' logits only, -inf elsewhere; nullptr restores
  // the whole vocabulary. Forks made afterwards share it.
  void set_hot_lm_head(std::shared_ptr<const HotLmHead> head);
  const std::shared_ptr<const HotLmHead>& hot_lm_head() const { return hot_lm_head_; }
  const at::Tensor& lm_head() const { return lm_head_; }
  std::int64_t committed() const { return length_; }
  // Commits n entries: fuse(target_hidden[i], E(tokens[i])) (or the hidden
  // state alone, Lyanna without first-token fusion) at positions
  // first_position + i; target_hidden [n, feature_width()] are the target's
  // states of the positions before (EAGLE-3: the layer span, fused by W_g
  // first). Returns the last entry's output (h_1 / f_root), [1, hidden].
  // Drops whatever was staged.
  at::Tensor advance(const float* target_hidden, std::span<const TokenId> tokens, std::int64_t first_position);
  // Lyanna: [h_1; h_2; ...; h_steps] from h_1 at `position` (the position of
  // the entry that produced it), the later states staged at position + 1, ...
  at::Tensor chain(const at::Tensor& h1, std::int64_t steps, std::int64_t position);
  // EAGLE: one tree level. Row i is fuse(parent_features[i], E(tokens[i])) at
  // positions[i]; `mask` is the ancestor mask over the staged + new entries
  // (nullptr: causal). The new entries are staged after the earlier ones.
  at::Tensor extend(const at::Tensor& parent_features, std::span<const TokenId> tokens,
                    std::span<const std::int64_t> positions, const BitMatrix* mask);
  std::int64_t staged() const { return staged_; }
  // Logits [n, vocab] = h W_head^T, all rows in one GEMM (§4.2).
  at::Tensor logits(const at::Tensor& h);
  // The collapsed token-info table, RMSNorm(W_E[t] W_1 W_2) over the hot
  // tokens (empty without token info). Computed once, at load.
  const TokenInfoTable& token_info() const { return table_; }
  // The same on host float rows (the FeatureHead concept of
  // draft/feature_head.hpp, which the backend-free drafters use).
  std::int64_t vocab_size() const { return config_.target.vocab_size; }
  std::int64_t hidden_size() const { return config_.target.hidden_size; }
  // The target features advance() reads per token, and where they come from.
  std::int32_t feature_layer_first() const { return config_.feature_layer_first(); }
  std::int32_t feature_layer_count() const { return config_.feature_layer_count(); }
  std::int64_t feature_width() const { return feature_layer_count() * hidden_size(); }
  std::int64_t max_context() const { return config_.target.max_position_embeddings; }
  void advance(std::span<const float> target_hidden, std::span<const TokenId> tokens, std::int64_t first_position,
               std::span<float> out);
  void chain(std::span<const float> h1, std::int64_t steps, std::int64_t position, std::span<float> out);
  void extend(std::span<const float> parent_features, std::span<const TokenId> tokens,
              std::span<const std::int64_t> positions, const BitMatrix* mask, std::span<float> out);
  void logits(std::span<const float> h, std::span<float> out);
  // Time spent in the transformer layer (advance, chain, extend) and in the
  // LM head since the last reset_timers(): the draft-time breakdown.
  double layer_seconds() const { return layer_seconds_; }
  double head_seconds() const { return head_seconds_; }
  void reset_timers() { layer_seconds_ = head_seconds_ = 0.0; }

 private:
  struct Weights {
    at::Tensor fc;  // [d, 2d]; undefined when no step fuses a token
    at::Tensor feature_fc;  // EAGLE-3's W_g [d, L * d]; undefined for the other kinds
    at::Tensor attn_norm, wq, wk, wv, wo, mlp_norm, w_gate, w_up, w_down, norm;
    at::Tensor ti_w1, ti_w2, ti_norm;  // [d, r], [r, H], [H]; undefined without token info
  };
  struct Packed {
    std::shared_ptr<const PackedLinear> fc, feature_fc, qkv, o, gate_up, down, lm_head;  // shared by forks
  };

  DraftHead(DraftHeadConfig config, const LlamaModel& target);
  void collapse_token_info();
  void pack();
  at::Tensor fuse_input(const float* features, std::span<const TokenId> tokens) const;
  // EAGLE-3: g = W_g [l; m; h] of n rows of the verifier's layer span.
  at::Tensor fuse_layers(const float* span_rows, std::int64_t n) const;
  // Runs n entries through the layer after the committed prefix and the
  // first `keep_staged` staged entries, visibility from `mask` (or causal).
  at::Tensor run_layer(const at::Tensor& x, std::span<const std::int64_t> positions, std::int64_t keep_staged,
                       const BitMatrix* mask);
  at::Tensor token_info_bias_train(const at::Tensor& parents) const;

  DraftHeadConfig config_;
  at::Tensor embed_, lm_head_;  // frozen, shared with the target
  at::Tensor hot_ids_, hot_mask_;  // [H] int64, [vocab] float (1 = hot)
  Weights w_;
  Packed packed_;
  std::shared_ptr<const HotLmHead> hot_lm_head_;
  TokenInfoTable table_;
  at::Tensor rope_cos_, rope_sin_;
  at::Tensor k_cache_;  // [kv_heads, slots * head_dim]: blocks of transposed keys (decoder_layer.hpp)
  at::Tensor v_cache_;  // [kv_heads, slots, head_dim]
  DType inference_dtype_ = DType::kF32;
  std::int64_t length_ = 0, staged_ = 0;
  double layer_seconds_ = 0.0, head_seconds_ = 0.0;
};

}  // namespace specdec::torch_backend
