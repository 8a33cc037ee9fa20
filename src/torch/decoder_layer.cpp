#include "decoder_layer.hpp"

#include <ATen/Parallel.h>
#include <omp.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include <fmt/format.h>

#include "kernels.hpp"
#include "specdec/core/error.hpp"

// The element-wise kernels are built for x86-64-v4 (AVX-512), v3 (AVX2 +
// FMA) and the baseline, and the loader picks one (GNU ifunc). Elsewhere they
// are compiled once for the target.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__)
#define SPECDEC_CPU_CLONES __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define SPECDEC_CPU_CLONES
#endif

namespace specdec::torch_backend {
namespace {

// exp(x) in float, written so the compiler vectorizes it: x = k ln2 + r with
// |r| <= ln2 / 2 (ln2 split in two, Cody and Waite), exp(r) by the Cephes
// expf polynomial (within ~1 ulp), 2^k put into the exponent bits. Inputs
// below -87.33 (results below FLT_MIN, and -inf) give 0; inputs are capped at
// 88 (exp(88) = 1.65e38), which no softmax or SiLU here reaches meaningfully.
inline float exp_approx(float x) {
  const bool underflow = x < -87.3365f;
  x = std::clamp(x, -87.3365f, 88.0f);
  constexpr float kRound = 12582912.0f;  // 1.5 * 2^23: adding it rounds to an integer
  const float t = x * 1.44269504088896341f + kRound;
  const float k = t - kRound;
  float r = x - k * 0.693359375f;
  r = r - k * -2.12194440e-4f;
  float p = 1.9875691500e-4f;
  p = p * r + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * r * r + r + 1.0f;
  const std::int32_t ki = std::bit_cast<std::int32_t>(t) - std::bit_cast<std::int32_t>(kRound);
  const float scale = std::bit_cast<float>((ki + 127) << 23);
  return underflow ? 0.0f : p * scale;
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
[[gnu::always_inline]] inline void store(float* p, Vec v) { std::memcpy(p, &v, sizeof v); }

// out = inv * sum_u p_u v_u over the keys with p_u != 0, in order, with the
// Blocks * 16 outputs in registers.
template <int Blocks>
[[gnu::always_inline]] inline void weighted_values(const float* p, const float* v, std::int64_t keys, float inv,
                                                   float* out) {
  Vec acc[Blocks] = {};
  for (std::int64_t u = 0; u < keys; ++u) {
    if (p[u] == 0.0f) continue;
    const float* vu = v + u * Blocks * kLanes;
    for (int b = 0; b < Blocks; ++b) acc[b] += p[u] * load(vu + b * kLanes);
  }
  for (int b = 0; b < Blocks; ++b) store(out + b * kLanes, acc[b] * inv);
}

// A thread's scratch row of scores; grows to the longest context it sees.
float* score_buffer(std::int64_t n) {
  thread_local std::vector<float> buffer;
  if (static_cast<std::int64_t>(buffer.size()) < n) buffer.resize(static_cast<std::size_t>(n));
  return buffer.data();
}

// Per-thread activations of one layer call (forwards on different sequences
// may run concurrently, each on its own thread).
struct Workspace {
  std::vector<float> xn, qkv, q, attn, gate_up, act;
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

// out[j] = silu(g[j]) * u[j], silu(g) = g / (1 + exp(-g)).
SPECDEC_CPU_CLONES
void swiglu_row(const float* g, const float* u, std::int64_t f, float* out) {
#pragma omp simd
  for (std::int64_t j = 0; j < f; ++j) out[j] = g[j] / (1.0f + exp_approx(-g[j])) * u[j];
}

// One query against `keys` cached entries: softmax of the scaled scores over
// the visible keys, times the values. Keys are stored transposed, kt
// [hd, capacity], so the scores are vectorized over keys and each is summed
// over j in order, the same arithmetic whatever else the call holds; values
// are [capacity, hd] rows. `hidden` (null: every key visible) marks key
// hidden_from + c hidden when hidden[c] is 1.
SPECDEC_CPU_CLONES
void attend(const float* q, const float* kt, const float* v, std::int64_t capacity, std::int64_t hd,
            std::int64_t keys, std::int64_t hidden_from, const std::uint8_t* hidden, float scale, float* scores,
            float* out) {
  constexpr float kMinusInf = -std::numeric_limits<float>::infinity();
  // Scores, 64 keys at a time in registers: each lane sums q[j] k[j] over j in
  // order, the same arithmetic for every key wherever it falls in a block. The
  // last block reads a few columns past `keys` (within the cache, or from a
  // zero-padded copy at its end); their lanes are dropped.
  std::int64_t t = 0;
  for (; t + 4 * kLanes <= keys; t += 4 * kLanes) {
    Vec acc[4] = {};
    for (std::int64_t j = 0; j < hd; ++j) {
      const float* row = kt + j * capacity + t;
      for (int b = 0; b < 4; ++b) acc[b] += q[j] * load(row + b * kLanes);
    }
    for (int b = 0; b < 4; ++b) store(scores + t + b * kLanes, acc[b]);
  }
  for (; t < keys; t += kLanes) {
    Vec acc = {};
    if (t + kLanes <= capacity) {
      for (std::int64_t j = 0; j < hd; ++j) acc += q[j] * load(kt + j * capacity + t);
    } else {
      for (std::int64_t j = 0; j < hd; ++j) {
        float padded[kLanes] = {};
        std::copy(kt + j * capacity + t, kt + j * capacity + keys, padded);
        acc += q[j] * load(padded);
      }
    }
    store(scores + t, acc);  // the buffer has room for a whole last block
  }
  if (hidden != nullptr)
    for (std::int64_t u = hidden_from; u < keys; ++u)
      if (hidden[u - hidden_from] != 0) scores[u] = kMinusInf;
  float max = kMinusInf;
#pragma omp simd reduction(max : max)
  for (std::int64_t u = 0; u < keys; ++u) {
    scores[u] *= scale;
    max = std::max(max, scores[u]);
  }
  float sum = 0.0f;
#pragma omp simd reduction(+ : sum)
  for (std::int64_t u = 0; u < keys; ++u) {
    const float e = exp_approx(scores[u] - max);
    scores[u] = e;
    sum += e;
  }
  // A row that sees no key has no softmax: NaN, as ATen's softmax gives.
  const float inv = max == kMinusInf ? std::numeric_limits<float>::quiet_NaN() : 1.0f / sum;
  // Values: out accumulates p_u v_u over u in order, in registers.
  switch (hd) {
    case 32: return weighted_values<2>(scores, v, keys, inv, out);
    case 48: return weighted_values<3>(scores, v, keys, inv, out);
    case 64: return weighted_values<4>(scores, v, keys, inv, out);
    case 80: return weighted_values<5>(scores, v, keys, inv, out);
    case 96: return weighted_values<6>(scores, v, keys, inv, out);
    case 128: return weighted_values<8>(scores, v, keys, inv, out);
    default: break;
  }
  std::fill_n(out, hd, 0.0f);
  for (std::int64_t u = 0; u < keys; ++u) {
    const float p = scores[u];
    if (p == 0.0f) continue;
    const float* vu = v + u * hd;
#pragma omp simd
    for (std::int64_t j = 0; j < hd; ++j) out[j] += p * vu[j];
  }
#pragma omp simd
  for (std::int64_t j = 0; j < hd; ++j) out[j] *= inv;
}

}  // namespace detail

void rms_norm(const float* x, std::int64_t n, std::int64_t d, const float* w, float eps, float* y) {
  for (std::int64_t i = 0; i < n; ++i) detail::rms_norm_row(x + i * d, d, w, eps, y + i * d);
}

namespace {

// Attention of every span's rows, threaded over (row, head) pairs; q and out
// are [n, heads * head_dim].
void attention(const DecoderShape& s, const float* q, std::span<const AttentionSpan> spans, float* out) {
  const auto h = s.heads, hd = s.head_dim, rep = s.heads / s.kv_heads;
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  std::int64_t tasks = 0, work = 0, longest = 0;
  for (const auto& sp : spans) {
    tasks += sp.rows * h;
    work += sp.rows * h * (sp.prefix + sp.rows) * hd;
    longest = std::max(longest, sp.prefix + sp.rows);
  }
  const auto run = [&](std::int64_t task) {
    std::size_t si = 0;
    while (task >= spans[si].rows * h) task -= spans[si++].rows * h;
    const auto& sp = spans[si];
    const auto i = task / h, head = task % h, kv = head / rep;
    const auto row = sp.first_row + i;
    const auto span_cols = sp.prefix + sp.rows - sp.masked_from;
    const std::int64_t keys = sp.blocked != nullptr ? sp.prefix + sp.rows : sp.prefix + i + 1;
    const std::uint8_t* hidden = sp.blocked != nullptr ? sp.blocked + i * span_cols : nullptr;
    detail::attend(q + row * h * hd + head * hd, sp.k + kv * hd * sp.capacity, sp.v + kv * sp.capacity * hd,
                   sp.capacity, hd, keys, sp.masked_from, hidden, scale, score_buffer(longest + kLanes),
                   out + row * h * hd + head * hd);
  };
  // Below ~32k multiply-adds a parallel region costs more than it saves.
  const int threads = std::max(1, at::get_num_threads());
  if (threads == 1 || work < 32768) {
    for (std::int64_t t = 0; t < tasks; ++t) run(t);
    return;
  }
#pragma omp parallel for schedule(static) num_threads(threads)
  for (std::int64_t t = 0; t < tasks; ++t) run(t);
}

}  // namespace

void decoder_layer_forward(const DecoderLayerWeights& layer, const DecoderShape& s, float* x, std::int64_t n,
                           std::span<const std::int64_t> positions, const float* cos_table, const float* sin_table,
                           std::span<const AttentionSpan> spans) {
  const auto d = s.hidden, h = s.heads, kvh = s.kv_heads, hd = s.head_dim;
  const auto q_dim = h * hd, kv_dim = kvh * hd, qkv_dim = q_dim + 2 * kv_dim;
  if (hd > kMaxHeadDim)
    throw UnsupportedError(fmt::format("decoder layer: head_dim {} exceeds {}", hd, kMaxHeadDim));
  Workspace& ws = workspace();
  float* xn = sized(ws.xn, n * d);
  float* qkv = sized(ws.qkv, n * qkv_dim);
  float* q = sized(ws.q, n * q_dim);
  float* attn = sized(ws.attn, n * q_dim);

  rms_norm(x, n, d, layer.attn_norm, s.rms_eps, xn);
  layer.qkv->forward(xn, n, qkv);
  // RoPE on q (into q) and k (into the cache); v straight into the cache.
  for (const auto& sp : spans) {
    for (std::int64_t i = 0; i < sp.rows; ++i) {
      const auto row = sp.first_row + i;
      const float* r = qkv + row * qkv_dim;
      const auto pos = positions[static_cast<std::size_t>(row)];
      const float* cos = cos_table + pos * hd;
      const float* sin = sin_table + pos * hd;
      for (std::int64_t hh = 0; hh < h; ++hh) kernels::rope_head(r + hh * hd, cos, sin, hd, q + row * q_dim + hh * hd);
      const auto slot = sp.prefix + i;
      for (std::int64_t j = 0; j < kvh; ++j) {
        float key[kMaxHeadDim];
        kernels::rope_head(r + q_dim + j * hd, cos, sin, hd, key);
        float* kt = sp.k + j * hd * sp.capacity + slot;  // transposed: column `slot`
        for (std::int64_t e = 0; e < hd; ++e) kt[e * sp.capacity] = key[e];
        std::copy_n(r + q_dim + kv_dim + j * hd, hd, sp.v + (j * sp.capacity + slot) * hd);
      }
    }
  }
  attention(s, q, spans, attn);
  layer.o->forward_add(attn, n, x);

  float* gu = sized(ws.gate_up, n * 2 * s.ffn);
  float* act = sized(ws.act, n * s.ffn);
  rms_norm(x, n, d, layer.mlp_norm, s.rms_eps, xn);
  layer.gate_up->forward(xn, n, gu);
  for (std::int64_t i = 0; i < n; ++i) detail::swiglu_row(gu + i * 2 * s.ffn, gu + i * 2 * s.ffn + s.ffn, s.ffn, act + i * s.ffn);
  layer.down->forward_add(act, n, x);
}

}  // namespace specdec::torch_backend
