// SPIRe's draft model (Neelam et al., arXiv 2504.06419, §3) on libtorch: a
// Feedback Transformer of a few decoder layers at the target's width.
//
//  - Pruned initialisation (§3.2): draft layer i starts as target layer
//    first_layer + i (the target's last layers), the final norm as the
//    target's. The token embedding and the LM head are the target's, shared
//    and frozen, and not stored with the draft (for specdec's 6-layer target
//    a 2-layer draft is a third of the body; with its own embedding it would
//    not fit models/).
//  - Sink + window attention (§3.1, the StreamingLLM mask) with positions in
//    the text: a step at position t sees the memories of positions p < t
//    with p < sink or p >= t - window (window 0: every p < t, the dense
//    ablation).
//  - Feedback memory (§3.3; Fan et al., arXiv 2002.09402): layer i attends
//    to memories m^i, not to its own inputs; a drafted token's memory is
//    m_t^i = sum_l softmax(w_i)_l x_t^l over its activations x^0 (the
//    embedding) .. x^layers, with learnt mixing weights w [layers,
//    layers + 1]. Without feedback (ablation) m_t^i = x_t^(i-1), a plain
//    transformer's keys.
//  - Target activations as past memory (§3.3, Figure 2): the memory of every
//    verified position is the target's input to the layer the draft layer
//    was pruned from, m_t^i = y_t^(first_layer + i - 1). Training therefore
//    runs k passes for every k-th prefix, not one per position
//    (forward_train); inference remembers the target's activations of each
//    commit (remember) and stages the drafted tokens' feedback memories
//    (step). The ablation substitutes the draft's embeddings E(x_t).
//  - MixedLoss(omega) (§3.4) = omega * CE(p_target, q) + (1 - omega) * (-alpha),
//    alpha = sum_i min(p_target,i, q_i), the expected acceptance of a draft
//    token (Leviathan et al., arXiv 2211.17192, §3.1); the ablation trains
//    on the data's next token (hard cross-entropy).
//
// Inference keeps one cache per sequence (open / close), so the requests of
// a batch draft in one forward (step: one token per sequence, shared GEMMs).
// The SpireHead concept of draft/spire_drafter.hpp is the interface the
// backend-free SpireDrafter uses.
#pragma once

#include <ATen/ATen.h>

#include <cstdint>
#include <filesystem>
#include <memory>
#include <span>
#include <string>
#include <unordered_map>
#include <utility>
#include <vector>

#include "specdec/core/tensor_view.hpp"
#include "specdec/core/types.hpp"
#include "specdec/io/llama_config.hpp"
#include "specdec/torch/llama_model.hpp"
#include "specdec/torch/packed_linear.hpp"

namespace specdec::torch_backend {

struct SpireConfig {
  std::int64_t layers = 2;        // draft decoder layers
  std::int64_t first_layer = 4;   // the target layer draft layer 0 was pruned from (>= 1)
  std::int64_t sink = 1, window = 64;  // memories a step attends to; window 0 = all (dense)
  bool feedback = true;           // memories mix all of a token's layers (false: its layer input)
  bool target_memory = true;      // past memories are the target's activations (false: embeddings)
  bool pruned_init = true;        // recorded: initialised from the target (false: random)
  io::LlamaConfig target;         // the target's architecture (shapes, vocabulary, RoPE)
  std::string describe() const;
};

// What one training forward returns: the loss and its parts, per rollout
// depth (1 .. k) the share of positions whose top-1 draft token is the
// target's and the mean expected acceptance sum_i min(p_i, q_i), and the
// draft's logits [B, T, vocab] at every position (tests hold inference
// against them).
struct SpireTrainOutput {
  at::Tensor loss, ce, alpha;
  std::vector<double> top1, acceptance;
  at::Tensor logits;
};

class SpireDraft {
 public:
  // Layers first_layer .. first_layer + layers - 1 of `target` (pruned
  // initialisation), or N(0, 0.02) weights with `config.pruned_init` false;
  // mixing weights favour each layer's own input (w_i,i = 2, else 0).
  // Throws InvalidArgumentError for layers the target does not have.
  static SpireDraft init(SpireConfig config, const LlamaModel& target, std::uint64_t seed);
  // spire_config.json + model.safetensors from `dir`; the target provides
  // the embedding and the LM head and must have the architecture recorded.
  static SpireDraft load(const std::filesystem::path& dir, const LlamaModel& target);
  void save(const std::filesystem::path& dir, DType storage) const;

  const SpireConfig& config() const { return config_; }
  std::int64_t num_parameters() const;  // trainable (embedding and LM head excluded)
  std::vector<std::pair<std::string, at::Tensor>> named_parameters() const;
  std::vector<at::Tensor> parameters() const;
  void set_requires_grad(bool on);

  // ---- training ------------------------------------------------------------
  // tokens [B, T] int64 with T a multiple of k; target_memory [B, T, layers *
  // hidden]: the target's inputs to layers first_layer .. (target_inputs
  // below), unused without target memory; target_logits [B, T, vocab].
  // Position t = b k + j is drafted in pass j of rollout b: it sees the
  // target's memories of positions < b k and the rollout's own memories of
  // b k .. t - 1 (passes 0 .. j - 1), under the sink + window mask.
  SpireTrainOutput forward_train(const at::Tensor& tokens, const at::Tensor& target_memory,
                                 const at::Tensor& target_logits, std::int64_t k, double omega, bool distill,
                                 at::ScalarType matmul_dtype = at::kFloat) const;
  // The frozen target's logits [B, T, vocab] and its inputs to the draft's
  // layers, [B, T, layers * hidden], for windows `tokens` [B, T].
  std::pair<at::Tensor, at::Tensor> target_inputs(const LlamaModel& target, const at::Tensor& tokens,
                                                  at::ScalarType matmul_dtype = at::kFloat) const;

  // ---- inference (SpireHead, draft/spire_drafter.hpp) ------------------------
  std::int64_t vocab_size() const { return config_.target.vocab_size; }
  std::int64_t hidden_size() const { return config_.target.hidden_size; }
  std::int64_t max_context() const { return config_.target.max_position_embeddings; }
  // The target activations a memory row holds: layers memory_layer() ..
  // memory_layer() + memory_layers() - 1's outputs (ForwardRequest).
  std::int32_t memory_layer() const { return static_cast<std::int32_t>(config_.first_layer - 1); }
  std::int32_t memory_layers() const { return static_cast<std::int32_t>(config_.layers); }
  // Opens (or reopens, empty) sequence `seq`; close frees it.
  void open(std::int32_t seq);
  void close(std::int32_t seq);
  // Drops what step() staged for `seq`, then commits n memory rows (n x
  // layers * hidden floats: the target's activations of the next n
  // positions) and evicts what no later step can see.
  void remember(std::int32_t seq, std::span<const float> rows, std::int64_t n);
  // One draft token per sequence: logits [n, vocab] into `out`; each token's
  // memory is staged. positions[i] must be seqs[i]'s committed + staged count.
  void step(std::span<const std::int32_t> seqs, std::span<const TokenId> tokens,
            std::span<const std::int64_t> positions, std::span<float> out);
  // Committed positions and memory slots held now (constant in the length
  // with a window).
  std::int64_t committed(std::int32_t seq) const;
  std::int64_t memory_slots(std::int32_t seq) const;
  // kF32 (default) or kBF16 weights for inference (LlamaModel's).
  void set_inference_dtype(DType dtype);
  DType inference_dtype() const { return inference_dtype_; }

 private:
  struct Layer {
    at::Tensor attn_norm, wq, wk, wv, wo, mlp_norm, w_gate, w_up, w_down;
  };
  struct Packed {
    PackedLinear q, kv, o, gate_up, down;
  };
  // One sequence's memories: slot s holds, for every layer, the keys
  // [kv_heads, head_dim] and then the values of the position pos[s]; the
  // committed slots first (sink, then the window), the staged after them.
  struct Sequence {
    std::vector<float> kv;
    std::vector<std::int64_t> pos;
    std::int64_t length = 0, staged = 0;
  };

  explicit SpireDraft(SpireConfig config, const LlamaModel& target);
  Sequence& sequence(std::int32_t seq);
  const Sequence& sequence(std::int32_t seq) const;
  bool visible(std::int64_t p, std::int64_t t) const;
  void pack();
  // Appends the keys and values of memories `m` [n, layers * hidden] (layer
  // l's at column l * hidden) at `positions`, row r to dests[r], n =
  // dests.size().
  void append_memories(std::span<Sequence* const> dests, const float* m, const std::int64_t* positions) const;
  std::int64_t slot_floats() const;

  SpireConfig config_;
  at::Tensor embed_, lm_head_;  // the target's, frozen
  std::vector<Layer> layers_;
  at::Tensor norm_, mix_;       // final norm [hidden]; mixing weights [layers, layers + 1]
  at::Tensor rope_cos_, rope_sin_;
  DType inference_dtype_ = DType::kF32;
  std::vector<Packed> packed_;  // empty until the first remember / step
  std::unique_ptr<PackedLinear> packed_lm_head_;
  std::unordered_map<std::int32_t, Sequence> seqs_;
};

}  // namespace specdec::torch_backend
