// One Llama decoder layer's inference forward over a handful of new tokens,
// shared by LlamaModel and the draft heads (EAGLE, Lyanna): RMSNorm, the fused
// q|k|v projection, RoPE, attention over a KV cache, the output projection
// with the residual fused into its matmul, RMSNorm, the fused gate|up
// projection, SwiGLU, and the down projection with its residual.
//
// Everything but the four matmuls runs as plain loops over float rows: a
// decode step is a read of every weight, and at that size ATen's per-call
// dispatch, temporaries and OpenBLAS attention matmuls cost as much as the
// weights (docs/RESULTS.md, "Half precision"). Attention is threaded over
// (sequence, kv head) units on specdec's thread team (thread_team.hpp); the
// element-wise loops are compiled for AVX-512, AVX2 and baseline x86-64 and
// picked at load time. Each query's arithmetic is the same whatever the
// other rows of the call are, so a token verified among n others gets
// exactly the logits it gets decoded alone (greedy speculative = greedy
// autoregressive).
//
// Internal to src/cpu.
#pragma once

#include <cstdint>
#include <span>

#include "specdec/cpu/linear.hpp"

namespace specdec::cpu {

// The longest head a layer takes (a key is rotated on the stack).
inline constexpr std::int64_t kMaxHeadDim = 512;

// Key cache blocks (see AttentionSpan), and the slots a cache of `context`
// tokens allocates: whole blocks.
inline constexpr std::int64_t kKeyBlock = 16;
inline constexpr std::int64_t key_capacity(std::int64_t context) {
  return (context + kKeyBlock - 1) / kKeyBlock * kKeyBlock;
}

// Where key `slot`'s element `e` lives in one kv head's key cache.
inline constexpr std::int64_t key_offset(std::int64_t slot, std::int64_t e, std::int64_t head_dim) {
  return (slot / kKeyBlock * head_dim + e) * kKeyBlock + slot % kKeyBlock;
}

struct DecoderShape {
  std::int64_t hidden = 0, heads = 0, kv_heads = 0, head_dim = 0, ffn = 0;
  float rms_eps = 1e-5f;
};

// A layer's weights as inference uses them (q|k|v and gate|up fused), owned
// by the caller.
struct DecoderLayerWeights {
  const Linear* qkv = nullptr;
  const Linear* o = nullptr;
  const Linear* gate_up = nullptr;
  const Linear* down = nullptr;
  const float* attn_norm = nullptr;  // [hidden]
  const float* mlp_norm = nullptr;
};

// Where one sequence's new rows attend: its cache for this layer. Keys are
// stored transposed in blocks of kKeyBlock slots, K [kv_heads][capacity /
// kKeyBlock][head_dim][kKeyBlock], so a block's scores vectorize over its
// keys and read one contiguous run, and writing a key touches one block;
// values are rows, V [kv_heads][capacity][head_dim]. `capacity` is a multiple
// of kKeyBlock (key_capacity()). The new rows' keys and values are
// written at entries prefix .. prefix + rows - 1. Entries before `masked_from`
// are always visible; entries masked_from .. prefix + rows - 1 are visible as
// `blocked` says (rows x (prefix + rows - masked_from), 1 = hidden), or, with
// `blocked` null, all of those up to the row's own entry (causal).
struct AttentionSpan {
  std::int64_t first_row = 0, rows = 0;
  float* k = nullptr;
  float* v = nullptr;
  std::int64_t capacity = 0, prefix = 0, masked_from = 0;
  const std::uint8_t* blocked = nullptr;
};

// x [n, hidden] += attention(norm(x)); x += mlp(norm(x)), in place; n is the
// sum of the spans' rows and positions[i] is row i's position (rows of all
// spans, in order). cos/sin tables are [max_position, head_dim].
void decoder_layer_forward(const DecoderLayerWeights& layer, const DecoderShape& shape, float* x,
                           std::int64_t n, std::span<const std::int64_t> positions, const float* cos_table,
                           const float* sin_table, std::span<const AttentionSpan> spans);

// Tests only: sum each query's softmax denominator by cache slot, the order
// specdec once used, which a tree's scattered ancestors change (a tree row then
// differs from its one-token step in the last bits). The batch-invariance
// property test turns it on to show that it catches such a path.
void set_attention_sum_by_slot_for_testing(bool on);

// Rotary embedding of one head vector (rotate_half convention):
// out[j] = x[j] cos[j] - x[j + half] sin[j]; out[j + half] = x[j + half] cos + x[j] sin.
inline void rope_head(const float* x, const float* cos, const float* sin, std::int64_t hd, float* out) {
  const auto half = hd / 2;
  for (std::int64_t j = 0; j < half; ++j) {
    const float a = x[j], b = x[j + half];
    out[j] = a * cos[j] - b * sin[j];
    out[j + half] = b * cos[j + half] + a * sin[j + half];
  }
}

// y = x * rsqrt(mean(x^2) + eps) * w over n rows of d (y may be x).
void rms_norm(const float* x, std::int64_t n, std::int64_t d, const float* w, float eps, float* y);

}  // namespace specdec::cpu
