// The host engine's arithmetic, shared by its Llama model and its Lyanna head:
// float32 loops, one thread, written to be read rather than to be fast.
#pragma once

#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <span>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "specdec/core/error.hpp"
#include "specdec/io/float_convert.hpp"
#include "specdec/io/llama_config.hpp"
#include "specdec/io/safetensors.hpp"

namespace host_engine {

namespace sd = specdec;

// A tensor of a safetensors file as float32, checked to hold `n` values.
template <class Checkpoint>
std::vector<float> load_floats(const Checkpoint& ckpt, const std::string& name, std::int64_t n) {
  const auto view = ckpt.view(name);
  if (view.numel() != n)
    throw sd::ModelLoadError(fmt::format("host_engine: {} has {} values, expected {}", name, view.numel(), n));
  std::vector<float> out(static_cast<std::size_t>(n));
  const auto* p = static_cast<const std::uint16_t*>(view.data());
  switch (view.dtype()) {
    case sd::DType::kF32: std::memcpy(out.data(), view.data(), out.size() * sizeof(float)); break;
    case sd::DType::kF16: for (std::size_t i = 0; i < out.size(); ++i) out[i] = sd::io::f16_to_f32(p[i]); break;
    case sd::DType::kBF16: for (std::size_t i = 0; i < out.size(); ++i) out[i] = sd::io::bf16_to_f32(p[i]); break;
    default: throw sd::ModelLoadError(fmt::format("host_engine: {} is {}", name, sd::dtype_name(view.dtype())));
  }
  return out;
}

// y[rows] = W[rows, cols] x[cols]. Each row's sum keeps 16 partial sums,
// added in a fixed order at the end: one running sum is a chain of
// dependent adds the compiler may not reorder, 16 of them vectorise (the
// host engine's test of six methods went from 106 s to 30 s), and the
// result is the same on every machine.
inline void matvec(const std::vector<float>& w, const float* x, std::int64_t rows, std::int64_t cols, float* y) {
  constexpr std::int64_t kLanes = 16;
  for (std::int64_t r = 0; r < rows; ++r) {
    const float* wr = w.data() + r * cols;
    float lanes[kLanes] = {};
    std::int64_t j = 0;
    for (; j + kLanes <= cols; j += kLanes)
      for (std::int64_t l = 0; l < kLanes; ++l) lanes[l] += wr[j + l] * x[j + l];
    float acc = 0.0f;
    for (const float l : lanes) acc += l;
    for (; j < cols; ++j) acc += wr[j] * x[j];
    y[r] = acc;
  }
}

// y = x / rms(x) * w over `d` values.
inline void rms_norm(const float* x, const std::vector<float>& w, std::int64_t d, double eps, float* y) {
  float ss = 0.0f;
  for (std::int64_t j = 0; j < d; ++j) ss += x[j] * x[j];
  const float r = 1.0f / std::sqrt(ss / static_cast<float>(d) + static_cast<float>(eps));
  for (std::int64_t j = 0; j < d; ++j) y[j] = x[j] * r * w[static_cast<std::size_t>(j)];
}

// Rotary embeddings as Hugging Face's Llama builds them: inv_freq over the
// first half of a head, repeated for the second, rotate_half.
class Rope {
 public:
  explicit Rope(const sd::io::LlamaConfig& c) : hd_(c.head_dim) {
    cos_.resize(static_cast<std::size_t>(c.max_position_embeddings * hd_));
    sin_.resize(cos_.size());
    for (std::int64_t p = 0; p < c.max_position_embeddings; ++p)
      for (std::int64_t j = 0; j < hd_; ++j) {
        const auto i = j % (hd_ / 2);
        const float inv_freq =
            static_cast<float>(1.0 / std::pow(c.rope_theta, static_cast<double>(2 * i) / static_cast<double>(hd_)));
        const float angle = static_cast<float>(p) * inv_freq;
        cos_[static_cast<std::size_t>(p * hd_ + j)] = std::cos(angle);
        sin_[static_cast<std::size_t>(p * hd_ + j)] = std::sin(angle);
      }
  }
  void apply(float* x, std::int64_t position) const {
    const auto half = hd_ / 2;
    const float* cs = cos_.data() + position * hd_;
    const float* sn = sin_.data() + position * hd_;
    for (std::int64_t j = 0; j < half; ++j) {
      const float a = x[j], b = x[j + half];
      x[j] = a * cs[j] - b * sn[j];
      x[j + half] = b * cs[j + half] + a * sn[j + half];
    }
  }

 private:
  std::int64_t hd_;
  std::vector<float> cos_, sin_;
};

// One Llama decoder layer's weights, loaded under `prefix` ("model.layers.3.").
struct LayerWeights {
  std::vector<float> attn_norm, wq, wk, wv, wo, mlp_norm, w_gate, w_up, w_down;

  template <class Checkpoint>
  static LayerWeights load(const Checkpoint& ckpt, const std::string& prefix, const sd::io::LlamaConfig& c) {
    const auto d = c.hidden_size, q = c.num_attention_heads * c.head_dim, kv = c.num_key_value_heads * c.head_dim;
    LayerWeights l;
    l.attn_norm = load_floats(ckpt, prefix + "input_layernorm.weight", d);
    l.wq = load_floats(ckpt, prefix + "self_attn.q_proj.weight", q * d);
    l.wk = load_floats(ckpt, prefix + "self_attn.k_proj.weight", kv * d);
    l.wv = load_floats(ckpt, prefix + "self_attn.v_proj.weight", kv * d);
    l.wo = load_floats(ckpt, prefix + "self_attn.o_proj.weight", d * q);
    l.mlp_norm = load_floats(ckpt, prefix + "post_attention_layernorm.weight", d);
    l.w_gate = load_floats(ckpt, prefix + "mlp.gate_proj.weight", c.intermediate_size * d);
    l.w_up = load_floats(ckpt, prefix + "mlp.up_proj.weight", c.intermediate_size * d);
    l.w_down = load_floats(ckpt, prefix + "mlp.down_proj.weight", d * c.intermediate_size);
    return l;
  }
};

// Runs the n rows of x ([n, hidden], in place) through one layer. Their keys
// and values go to cache slots first_slot + i (caches [kv_heads, context,
// head_dim]); row i attends to every slot before `committed` and to slot
// committed + j when visible(i, j) (j over the staged and new slots). Every
// row's keys are written before any row attends.
inline void run_layer(const LayerWeights& L, const sd::io::LlamaConfig& c, const Rope& rope, float* kc, float* vc,
                      std::int64_t committed, std::int64_t first_slot, std::span<float> x,
                      std::span<const std::int64_t> positions,
                      const std::function<bool(std::int64_t, std::int64_t)>& visible) {
  const auto d = c.hidden_size, hd = c.head_dim, heads = c.num_attention_heads, kvh = c.num_key_value_heads;
  const auto rep = heads / kvh, cap = c.max_position_embeddings, ffn = c.intermediate_size;
  const auto n = static_cast<std::int64_t>(positions.size());
  const auto end = first_slot + n;
  std::vector<float> h(static_cast<std::size_t>(d)), q(static_cast<std::size_t>(n * heads * hd)),
      kv(static_cast<std::size_t>(kvh * hd)), attn(static_cast<std::size_t>(heads * hd)),
      proj(static_cast<std::size_t>(d)), gate(static_cast<std::size_t>(ffn)), up(static_cast<std::size_t>(ffn)),
      scores(static_cast<std::size_t>(end));
  for (std::int64_t i = 0; i < n; ++i) {
    const auto pos = positions[static_cast<std::size_t>(i)];
    rms_norm(x.data() + i * d, L.attn_norm, d, c.rms_norm_eps, h.data());
    float* qi = q.data() + i * heads * hd;
    matvec(L.wq, h.data(), heads * hd, d, qi);
    for (std::int64_t hh = 0; hh < heads; ++hh) rope.apply(qi + hh * hd, pos);
    matvec(L.wk, h.data(), kvh * hd, d, kv.data());
    for (std::int64_t j = 0; j < kvh; ++j) {
      rope.apply(kv.data() + j * hd, pos);
      std::copy_n(kv.data() + j * hd, hd, kc + (j * cap + first_slot + i) * hd);
    }
    matvec(L.wv, h.data(), kvh * hd, d, kv.data());
    for (std::int64_t j = 0; j < kvh; ++j) std::copy_n(kv.data() + j * hd, hd, vc + (j * cap + first_slot + i) * hd);
  }
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  for (std::int64_t i = 0; i < n; ++i) {
    for (std::int64_t hh = 0; hh < heads; ++hh) {
      const auto j = hh / rep;
      const float* qh = q.data() + (i * heads + hh) * hd;
      float best = -INFINITY;
      for (std::int64_t t = 0; t < end; ++t) {
        auto& s = scores[static_cast<std::size_t>(t)];
        if (t >= committed && !visible(i, t - committed)) {
          s = -INFINITY;
          continue;
        }
        const float* kt = kc + (j * cap + t) * hd;
        float dot = 0.0f;
        for (std::int64_t e = 0; e < hd; ++e) dot += qh[e] * kt[e];
        s = dot * scale;
        best = std::max(best, s);
      }
      float sum = 0.0f;
      for (std::int64_t t = 0; t < end; ++t) {
        auto& s = scores[static_cast<std::size_t>(t)];
        s = s == -INFINITY ? 0.0f : std::exp(s - best);
        sum += s;
      }
      float* out = attn.data() + hh * hd;
      std::fill_n(out, hd, 0.0f);
      for (std::int64_t t = 0; t < end; ++t) {
        const float w = scores[static_cast<std::size_t>(t)] / sum;
        if (w == 0.0f) continue;
        const float* vt = vc + (j * cap + t) * hd;
        for (std::int64_t e = 0; e < hd; ++e) out[e] += w * vt[e];
      }
    }
    float* xi = x.data() + i * d;
    matvec(L.wo, attn.data(), d, heads * hd, proj.data());
    for (std::int64_t e = 0; e < d; ++e) xi[e] += proj[static_cast<std::size_t>(e)];
    rms_norm(xi, L.mlp_norm, d, c.rms_norm_eps, h.data());
    matvec(L.w_gate, h.data(), ffn, d, gate.data());
    matvec(L.w_up, h.data(), ffn, d, up.data());
    for (std::int64_t e = 0; e < ffn; ++e) {
      const float g = gate[static_cast<std::size_t>(e)];
      gate[static_cast<std::size_t>(e)] = g / (1.0f + std::exp(-g)) * up[static_cast<std::size_t>(e)];
    }
    matvec(L.w_down, gate.data(), d, ffn, proj.data());
    for (std::int64_t e = 0; e < d; ++e) xi[e] += proj[static_cast<std::size_t>(e)];
  }
}

}  // namespace host_engine
