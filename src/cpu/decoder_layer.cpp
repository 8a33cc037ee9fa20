#include "decoder_layer.hpp"

#include <algorithm>
#include <atomic>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include <fmt/format.h>

#include "specdec/core/error.hpp"
#include "specdec/core/warp.hpp"
#include "specdec/cpu/threads.hpp"
#include "thread_buffer.hpp"
#include "thread_team.hpp"

// The element-wise kernels are built for x86-64-v4 (AVX-512), v3 (AVX2 +
// FMA) and the baseline, and the loader picks one (GNU ifunc). Elsewhere they
// are compiled once for the target.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
// The 64-byte vector helpers below are always inlined into the clones, so the
// ABI GCC warns about (passing them by value without AVX-512) never applies.
#pragma GCC diagnostic ignored "-Wpsabi"
#define SPECDEC_CPU_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define SPECDEC_CPU_CLONES
#endif

namespace specdec::cpu {
namespace {

// silu(g) = g sigmoid(g) with e = exp(-|g|) <= 1 (exp_nonpositive, which
// vectorizes): sigmoid is 1 / (1 + e) for g >= 0 and e / (1 + e) below. The
// choice is made on g's sign bit with integer operations, so the loop
// vectorizes under -ftrapping-math too.
inline float silu(float g) {
  const std::uint32_t bits = std::bit_cast<std::uint32_t>(g);
  const float e = exp_nonpositive(std::bit_cast<float>(bits | 0x80000000u));  // exp(-|g|)
  const std::uint32_t negative = 0u - (bits >> 31);                           // all ones if g < 0
  const float numerator = std::bit_cast<float>((std::bit_cast<std::uint32_t>(e) & negative) |
                                               (std::bit_cast<std::uint32_t>(1.0f) & ~negative));
  return g * (numerator / (1.0f + e));
}

// 16 floats: one AVX-512 register in the x86-64-v4 build, two or four
// narrower ones in the others (GCC vector extensions).
constexpr std::int64_t kLanes = 16;
using Vec = float __attribute__((vector_size(kLanes * sizeof(float))));
[[gnu::always_inline]] inline Vec load(const float* p) {
  Vec v;
  std::memcpy(&v, p, sizeof v);
  return v;
}
// By reference: GCC notes an ABI change for a 64-byte vector passed by value.
[[gnu::always_inline]] inline void store(float* p, const Vec& v) {
  std::memcpy(p, &v, sizeof v);
}

// Queries attended together: they share one kv head of one sequence, so each
// key and value row is loaded once for all of them.
constexpr int kMaxGroup = 4;

// Scores of Q queries against B blocks of kKeyBlock keys from key `first`
// of one kv head's key cache ([block][hd][kKeyBlock]). Each lane sums
// q[j] k[j] over j in order: the same arithmetic for a key whatever group
// and however many blocks it is scored with.
template <int Q, int B>
[[gnu::always_inline]] inline void score_blocks(const float* const* q, const float* kt, std::int64_t hd,
                                                std::int64_t first, float* scores, std::int64_t stride) {
  const float* blocks = kt + first * hd;  // block first / kLanes starts at (first / kLanes) * hd * kLanes
  Vec acc[Q][B] = {};
  for (std::int64_t j = 0; j < hd; ++j) {
    Vec k[B];
    for (int b = 0; b < B; ++b) k[b] = load(blocks + (b * hd + j) * kLanes);
    for (int i = 0; i < Q; ++i) {
      const float qj = q[i][j];
      for (int b = 0; b < B; ++b) acc[i][b] += qj * k[b];
    }
  }
  for (int i = 0; i < Q; ++i)
    for (int b = 0; b < B; ++b) store(scores + i * stride + first + b * kLanes, acc[i][b]);
}

// Scores of Q queries against keys [0, keys) (a whole number of blocks).
// Four blocks at a time give each j 4 Q independent sums: one block alone
// left Q chains of hd dependent FMAs, bound by their latency.
template <int Q>
[[gnu::always_inline]] inline void group_scores(const float* const* q, const float* kt, std::int64_t hd,
                                                std::int64_t keys, float* scores, std::int64_t stride) {
  static_assert(kKeyBlock == kLanes);
  std::int64_t t = 0;
  for (; t + 4 * kLanes <= keys; t += 4 * kLanes) score_blocks<Q, 4>(q, kt, hd, t, scores, stride);
  for (; t < keys; t += kLanes) score_blocks<Q, 1>(q, kt, hd, t, scores, stride);
}

// out[i] = inv[i] * sum_u p[i][u] v_u over the keys, in order, Q queries x
// Blocks * 16 outputs in registers; a value row is loaded once for all.
template <int Q, int Blocks>
[[gnu::always_inline]] inline void group_values(const float* p, std::int64_t stride, const float* v,
                                                std::int64_t keys, const float* inv, float* const* out) {
  Vec acc[Q][Blocks] = {};
  for (std::int64_t u = 0; u < keys; ++u) {
    const float* vu = v + u * Blocks * kLanes;
    Vec row[Blocks];
    for (int b = 0; b < Blocks; ++b) row[b] = load(vu + b * kLanes);
    for (int i = 0; i < Q; ++i) {
      const float pu = p[i * stride + u];
      for (int b = 0; b < Blocks; ++b) acc[i][b] += pu * row[b];
    }
  }
  for (int i = 0; i < Q; ++i)
    for (int b = 0; b < Blocks; ++b) store(out[i] + b * kLanes, acc[i][b] * inv[i]);
}

template <int Q>
[[gnu::always_inline]] inline bool group_values_for(std::int64_t hd, const float* p, std::int64_t stride,
                                                    const float* v, std::int64_t keys, const float* inv,
                                                    float* const* out) {
  switch (hd) {
    case 32:
      group_values<Q, 2>(p, stride, v, keys, inv, out);
      return true;
    case 48:
      group_values<Q, 3>(p, stride, v, keys, inv, out);
      return true;
    case 64:
      group_values<Q, 4>(p, stride, v, keys, inv, out);
      return true;
    case 128:
      group_values<Q, 8>(p, stride, v, keys, inv, out);
      return true;
    default:
      return false;
  }
}

// A thread's scratch scores; grows to the longest group it sees.
struct ScoresTag;
float* score_buffer(std::int64_t n) {
  return thread_buffer<ScoresTag>(n);
}

// Per-thread activations of one layer call (forwards on different sequences
// may run concurrently, each on its own thread).
struct Workspace {
  std::vector<float> qkv, q, attn, gate_up;
};
Workspace& workspace() {
  thread_local Workspace ws;
  return ws;
}

float* sized(std::vector<float>& v, std::int64_t n) {
  if (static_cast<std::int64_t>(v.size()) < n) v.resize(static_cast<std::size_t>(n));
  return v.data();
}

}  // namespace

namespace {
std::atomic<bool> g_sum_by_slot{false};  // set_attention_sum_by_slot_for_testing
}  // namespace

void set_attention_sum_by_slot_for_testing(bool on) {
  g_sum_by_slot.store(on, std::memory_order_relaxed);
}

// Not in the anonymous namespace: GCC's target_clones needs external linkage.
namespace detail {

SPECDEC_CPU_CLONES
void rms_norm_row(const float* x, std::int64_t d, const float* w, float eps, float* y) {
  float ss = 0.0f;
#pragma omp simd reduction(+ : ss)
  for (std::int64_t j = 0; j < d; ++j) ss += x[j] * x[j];
  const float r = 1.0f / std::sqrt(ss / static_cast<float>(d) + eps);
#pragma omp simd
  for (std::int64_t j = 0; j < d; ++j) y[j] = x[j] * r * w[j];
}

// out[j] = silu(g[j]) * u[j].
SPECDEC_CPU_CLONES
void swiglu_row(const float* g, const float* u, std::int64_t f, float* out) {
#pragma omp simd
  for (std::int64_t j = 0; j < f; ++j) out[j] = silu(g[j]) * u[j];
}

// Attention of a group of Q <= kMaxGroup queries of one kv head: q[i] its
// hd values, keys[i] how many cached entries it may see at most, and within
// those the ones marked in hidden(i, t) are masked. K (blocks of kKeyBlock
// keys) and V [capacity, hd] are that kv head's cache. Every query's
// result is bit-identical to the same query attended alone or with other
// keys masked past its own: masked keys add exact zeros to fixed lanes.
SPECDEC_CPU_CLONES
void attend_group(int group, const float* const* q, const std::int64_t* keys,
                  const std::uint8_t* const* hidden, std::int64_t hidden_from, const float* kt,
                  const float* v, std::int64_t hd, float scale, bool sum_by_slot, float* scores,
                  float* const* out) {
  constexpr float kMinusInf = -std::numeric_limits<float>::infinity();
  std::int64_t span = 0;  // the longest query's keys, in whole blocks (the cache has whole blocks)
  for (int i = 0; i < group; ++i) span = std::max(span, keys[i]);
  span = (span + kLanes - 1) / kLanes * kLanes;
  switch (group) {
    case 1:
      group_scores<1>(q, kt, hd, span, scores, span);
      break;
    case 2:
      group_scores<2>(q, kt, hd, span, scores, span);
      break;
    case 3:
      group_scores<3>(q, kt, hd, span, scores, span);
      break;
    default:
      group_scores<4>(q, kt, hd, span, scores, span);
      break;
  }
  float inv[kMaxGroup];
  for (int i = 0; i < group; ++i) {
    float* s = scores + i * span;
    for (std::int64_t t = keys[i]; t < span; ++t) s[t] = kMinusInf;  // not this query's keys
    if (hidden[i] != nullptr)
      for (std::int64_t t = hidden_from; t < keys[i]; ++t)
        if (hidden[i][t - hidden_from] != 0) s[t] = kMinusInf;
    // Scale, and the largest score (written out with vectors: the simd
    // max reduction compiled to scalar code).
    Vec top = Vec{} + kMinusInf;
    for (std::int64_t t = 0; t < span; t += kLanes) {
      const Vec scaled = load(s + t) * scale;
      store(s + t, scaled);
      top = scaled > top ? scaled : top;
    }
    float max = kMinusInf;
    for (std::int64_t l = 0; l < kLanes; ++l) max = std::max(max, top[l]);
    // exp, and the sum of the keys the query sees, by rank: the r-th seen
    // key goes to lane r % 16 of block r / 16, blocks are added in order,
    // then the lanes. A tree node's ancestors sit at scattered slots, and a
    // one-token step holds them at consecutive ones; ranking makes both the
    // same sum (summed by slot, the gaps moved them into other blocks).
    // Committed keys are all seen, so their rank is their slot.
    const std::int64_t by_slot = hidden[i] == nullptr || sum_by_slot ? span : hidden_from / kLanes * kLanes;
    Vec lanes = {};
    for (std::int64_t t = 0; t < by_slot; t += kLanes) {
      Vec e;
      for (std::int64_t l = 0; l < kLanes; ++l) e[l] = exp_nonpositive(s[t + l] - max);
      store(s + t, e);
      lanes += e;
    }
    if (by_slot < span) {  // the rest: seen keys packed by rank, masked ones skipped
      Vec packed = {};
      std::int64_t r = 0;
      for (std::int64_t t = by_slot; t < span; ++t) {
        const float e = exp_nonpositive(s[t] - max);
        s[t] = e;
        if (t >= keys[i] || (t >= hidden_from && hidden[i][t - hidden_from] != 0)) continue;
        packed[r++] = e;
        if (r == kLanes) {
          lanes += packed;
          packed = Vec{};
          r = 0;
        }
      }
      if (r > 0) lanes += packed;
    }
    float sum = 0.0f;
    for (std::int64_t l = 0; l < kLanes; ++l) sum += lanes[l];
    // A query that sees no key has no softmax: NaN, as ATen's softmax gives.
    inv[i] = max == kMinusInf ? std::numeric_limits<float>::quiet_NaN() : 1.0f / sum;
  }
  // Values of the keys any query sees (never past the cache: `span` may be).
  std::int64_t seen = 0;
  for (int i = 0; i < group; ++i) seen = std::max(seen, keys[i]);
  bool done = false;
  switch (group) {
    case 1:
      done = group_values_for<1>(hd, scores, span, v, seen, inv, out);
      break;
    case 2:
      done = group_values_for<2>(hd, scores, span, v, seen, inv, out);
      break;
    case 3:
      done = group_values_for<3>(hd, scores, span, v, seen, inv, out);
      break;
    default:
      done = group_values_for<4>(hd, scores, span, v, seen, inv, out);
      break;
  }
  if (done) return;
  for (int i = 0; i < group; ++i) {  // other head sizes: one query at a time
    const float* p = scores + i * span;
    std::fill_n(out[i], hd, 0.0f);
    for (std::int64_t u = 0; u < seen; ++u) {
      const float* vu = v + u * hd;
#pragma omp simd
      for (std::int64_t j = 0; j < hd; ++j) out[i][j] += p[u] * vu[j];
    }
#pragma omp simd
    for (std::int64_t j = 0; j < hd; ++j) out[i][j] *= inv[i];
  }
}

}  // namespace detail

void rms_norm(const float* x, std::int64_t n, std::int64_t d, const float* w, float eps, float* y) {
  for (std::int64_t i = 0; i < n; ++i) detail::rms_norm_row(x + i * d, d, w, eps, y + i * d);
}

namespace {

// RoPE on the q of kv head `kv`'s query heads (into q) and on its k (into
// the cache), and its v straight into the cache, for one span's rows.
void rope_into_cache(const DecoderShape& s, const float* qkv, const AttentionSpan& sp, std::int64_t kv,
                     std::span<const std::int64_t> positions, const float* cos_table, const float* sin_table,
                     float* q) {
  const auto hd = s.head_dim, rep = s.heads / s.kv_heads;
  const auto q_dim = s.heads * hd, kv_dim = s.kv_heads * hd, qkv_dim = q_dim + 2 * kv_dim;
  float* kt = sp.k + kv * sp.capacity * hd;  // this kv head's key blocks
  for (std::int64_t i = 0; i < sp.rows; ++i) {
    const auto row = sp.first_row + i;
    const float* r = qkv + row * qkv_dim;
    const auto pos = positions[static_cast<std::size_t>(row)];
    const float* cos = cos_table + pos * hd;
    const float* sin = sin_table + pos * hd;
    for (std::int64_t hh = kv * rep; hh < (kv + 1) * rep; ++hh)
      rope_head(r + hh * hd, cos, sin, hd, q + row * q_dim + hh * hd);
    const auto slot = sp.prefix + i;
    float key[kMaxHeadDim];
    rope_head(r + q_dim + kv * hd, cos, sin, hd, key);
    for (std::int64_t e = 0; e < hd; ++e) kt[key_offset(slot, e, hd)] = key[e];
    std::copy_n(r + q_dim + kv_dim + kv * hd, hd, sp.v + (kv * sp.capacity + slot) * hd);
  }
}

// Attention of every span's rows from the fused q|k|v rows [n, qkv_dim];
// q (RoPE applied here) and out are [n, heads * head_dim]. The work is cut by
// (span, kv head), threaded over those: each first writes its new keys and
// values into the cache (no other unit reads them), then attends its queries
// in groups of up to kMaxGroup sharing the kv head (the query heads of a kv
// head for consecutive rows).
void attention(const DecoderShape& s, const float* qkv, std::span<const std::int64_t> positions,
               const float* cos_table, const float* sin_table, float* q, std::span<const AttentionSpan> spans,
               float* out) {
  const auto h = s.heads, hd = s.head_dim, rep = s.heads / s.kv_heads;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  const bool sum_by_slot = g_sum_by_slot.load(std::memory_order_relaxed);
  std::int64_t work = 0, longest = 0;
  for (const auto& sp : spans) {
    work += sp.rows * h * (sp.prefix + sp.rows) * hd;
    longest = std::max(longest, sp.prefix + sp.rows);
  }
  const std::int64_t stride_needed = kMaxGroup * ((longest + kLanes - 1) / kLanes * kLanes);
  // Unit u is (span u / kv_heads, kv head u % kv_heads); its queries
  // (row i / rep, head kv * rep + i % rep) go in groups of kMaxGroup.
  const auto span_of = [&](std::int64_t u) -> const AttentionSpan& {
    return spans[static_cast<std::size_t>(u / s.kv_heads)];
  };
  const auto groups_of = [&](std::int64_t u) { return (span_of(u).rows * rep + kMaxGroup - 1) / kMaxGroup; };
  const auto rope = [&](std::int64_t u) {
    rope_into_cache(s, qkv, span_of(u), u % s.kv_heads, positions, cos_table, sin_table, q);
  };
  const auto attend = [&](std::int64_t u, std::int64_t group) {
    const auto& sp = span_of(u);
    const auto kv = u % s.kv_heads;
    const auto cols = sp.prefix + sp.rows - sp.masked_from;
    const auto first = group * kMaxGroup;
    const auto count = std::min<std::int64_t>(kMaxGroup, sp.rows * rep - first);
    const float* qs[kMaxGroup];
    float* outs[kMaxGroup];
    std::int64_t keys[kMaxGroup];
    const std::uint8_t* hidden[kMaxGroup];
    for (std::int64_t i = 0; i < count; ++i) {
      const auto row = (first + i) / rep, head = kv * rep + (first + i) % rep;
      qs[i] = q + (sp.first_row + row) * h * hd + head * hd;
      outs[i] = out + (sp.first_row + row) * h * hd + head * hd;
      keys[i] = sp.blocked != nullptr ? sp.prefix + sp.rows : sp.prefix + row + 1;
      hidden[i] = sp.blocked != nullptr ? sp.blocked + row * cols : nullptr;
    }
    detail::attend_group(static_cast<int>(count), qs, keys, hidden, sp.masked_from,
                         sp.k + kv * sp.capacity * hd, sp.v + kv * sp.capacity * hd, hd, scale, sum_by_slot,
                         score_buffer(stride_needed), outs);
  };
  const auto unit = [&](std::int64_t u) {
    rope(u);
    for (std::int64_t g = 0; g < groups_of(u); ++g) attend(u, g);
  };
  // Below ~32k multiply-adds a team step costs more than it saves.
  const int threads = forward_threads();
  const auto units = static_cast<std::int64_t>(spans.size()) * s.kv_heads;
  if (threads == 1 || work < 32768) {
    for (std::int64_t u = 0; u < units; ++u) unit(u);
    return;
  }
  if (units >= threads) {
    parallel_for(units, unit);
    return;
  }
  // Fewer units than threads (one sequence of a model with fewer kv heads
  // than threads): the cache writes first, then the groups over the threads.
  std::int64_t total = 0;
  for (std::int64_t u = 0; u < units; ++u) {
    rope(u);
    total += groups_of(u);
  }
  parallel_for(total, [&](std::int64_t i) {
    std::int64_t u = 0, g = i;
    while (g >= groups_of(u)) g -= groups_of(u++);
    attend(u, g);
  });
}

// Row sources for the products (Linear::RowSource): the norm before
// q|k|v and gate|up, and SwiGLU before down, computed by the product's
// threads for a verification's rows.
struct NormRows {
  const float* x;
  std::int64_t d;
  const float* w;
  float eps;
  static void fill(const void* self, std::int64_t r, float* out) {
    const auto& n = *static_cast<const NormRows*>(self);
    detail::rms_norm_row(n.x + r * n.d, n.d, n.w, n.eps, out);
  }
};
struct SwigluRows {
  const float* gate_up;  // [rows, 2 ffn]: gate | up
  std::int64_t ffn;
  static void fill(const void* self, std::int64_t r, float* out) {
    const auto& g = *static_cast<const SwigluRows*>(self);
    const float* row = g.gate_up + r * 2 * g.ffn;
    detail::swiglu_row(row, row + g.ffn, g.ffn, out);
  }
};

}  // namespace

void decoder_layer_forward(const DecoderLayerWeights& layer, const DecoderShape& s, float* x, std::int64_t n,
                           std::span<const std::int64_t> positions, const float* cos_table,
                           const float* sin_table, std::span<const AttentionSpan> spans) {
  const auto d = s.hidden, h = s.heads, kvh = s.kv_heads, hd = s.head_dim;
  const auto q_dim = h * hd, kv_dim = kvh * hd, qkv_dim = q_dim + 2 * kv_dim;
  if (hd > kMaxHeadDim)
    throw UnsupportedError(fmt::format("decoder layer: head_dim {} exceeds {}", hd, kMaxHeadDim));
  for (const auto& sp : spans)
    if (sp.capacity % kKeyBlock != 0)
      throw InvalidArgumentError(fmt::format("decoder layer: a cache of {} slots (whole blocks of {} needed)",
                                             sp.capacity, kKeyBlock));
  Workspace& ws = workspace();
  float* qkv = sized(ws.qkv, n * qkv_dim);
  float* q = sized(ws.q, n * q_dim);
  float* attn = sized(ws.attn, n * q_dim);

  const NormRows attn_rows{x, d, layer.attn_norm, s.rms_eps};
  layer.qkv->forward(Linear::RowSource{&NormRows::fill, &attn_rows}, n, qkv);
  attention(s, qkv, positions, cos_table, sin_table, q, spans, attn);
  layer.o->forward_add(attn, n, x);

  float* gu = sized(ws.gate_up, n * 2 * s.ffn);
  const NormRows mlp_rows{x, d, layer.mlp_norm, s.rms_eps};
  layer.gate_up->forward(Linear::RowSource{&NormRows::fill, &mlp_rows}, n, gu);
  const SwigluRows act{gu, s.ffn};
  layer.down->forward_add(Linear::RowSource{&SwigluRows::fill, &act}, n, x);
}

}  // namespace specdec::cpu
