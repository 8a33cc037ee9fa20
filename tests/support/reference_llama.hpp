// A Llama forward in plain loops, for checking the models against: random
// weights written as a Hugging Face checkpoint, and the logits of a context
// computed from scratch in double precision, with causal attention or under
// a sink + window cache. Slow; for tiny configs.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <limits>
#include <random>
#include <span>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "specdec/core/tensor_view.hpp"
#include "specdec/core/types.hpp"
#include "specdec/io/file_io.hpp"
#include "specdec/io/float_convert.hpp"
#include "specdec/io/llama_config.hpp"
#include "specdec/io/safetensors_checkpoint.hpp"

namespace specdec::testing {

// A tiny Llama of vocabulary 97: 4 query and 2 key/value heads, `inner` MLP
// width, 128 positions.
inline io::LlamaConfig tiny_llama_config(std::int64_t hidden, std::int64_t inner, std::int64_t layers,
                                         bool tied = false) {
  io::LlamaConfig c;
  c.vocab_size = 97;
  c.hidden_size = hidden;
  c.intermediate_size = inner;
  c.num_hidden_layers = layers;
  c.num_attention_heads = 4;
  c.num_key_value_heads = 2;
  c.head_dim = hidden / 4;
  c.max_position_embeddings = 128;
  c.rms_norm_eps = 1e-5;
  c.tie_word_embeddings = tied;
  return c;
}

class ReferenceLlama {
 public:
  // Weights N(0, 0.1) (norms 1 + N(0, 0.1)), rounded through bf16 when
  // `bf16_weights` (norms stay f32), as a model keeping bf16 weights holds
  // them.
  ReferenceLlama(const io::LlamaConfig& c, std::uint32_t seed, bool bf16_weights) : c_(c) {
    std::mt19937 gen(seed);
    std::normal_distribution<float> normal(0.0f, 0.1f);
    const auto matrix = [&](std::int64_t rows, std::int64_t cols) {
      Matrix m{rows, cols, std::vector<float>(static_cast<std::size_t>(rows * cols))};
      for (float& x : m.w) x = bf16_weights ? io::bf16_to_f32(io::f32_to_bf16(normal(gen))) : normal(gen);
      return m;
    };
    const auto norm = [&] {
      Matrix m{1, c.hidden_size, std::vector<float>(static_cast<std::size_t>(c.hidden_size))};
      for (float& x : m.w) x = 1.0f + normal(gen);
      return m;
    };
    const auto d = c.hidden_size, q = c.num_attention_heads * c.head_dim,
               kv = c.num_key_value_heads * c.head_dim;
    embed_ = matrix(c.vocab_size, d);
    for (std::int64_t i = 0; i < c.num_hidden_layers; ++i)
      layers_.push_back({norm(), matrix(q, d), matrix(kv, d), matrix(kv, d), matrix(d, q), norm(),
                         matrix(c.intermediate_size, d), matrix(c.intermediate_size, d),
                         matrix(d, c.intermediate_size)});
    final_norm_ = norm();
    if (!c.tie_word_embeddings) lm_head_ = matrix(c.vocab_size, d);
  }

  const io::LlamaConfig& config() const { return c_; }

  // config.json and model.safetensors (f32) in `dir`.
  void save(const std::filesystem::path& dir) const {
    std::filesystem::create_directories(dir);
    const std::string json = io::llama_config_to_json(c_);
    io::write_file_atomically(dir / "config.json", {std::as_bytes(std::span(json.data(), json.size()))});
    std::vector<io::NamedTensor> t;
    const auto add = [&](std::string name, const Matrix& m) {
      auto* p = const_cast<float*>(m.w.data());
      t.emplace_back(std::move(name), m.rows == 1 ? TensorView(p, DType::kF32, {m.cols})
                                                  : TensorView(p, DType::kF32, {m.rows, m.cols}));
    };
    add("model.embed_tokens.weight", embed_);
    for (std::size_t i = 0; i < layers_.size(); ++i) {
      const auto n = [&](const char* leaf) { return fmt::format("model.layers.{}.{}", i, leaf); };
      const Layer& l = layers_[i];
      add(n("input_layernorm.weight"), l.attn_norm);
      add(n("self_attn.q_proj.weight"), l.wq);
      add(n("self_attn.k_proj.weight"), l.wk);
      add(n("self_attn.v_proj.weight"), l.wv);
      add(n("self_attn.o_proj.weight"), l.wo);
      add(n("post_attention_layernorm.weight"), l.mlp_norm);
      add(n("mlp.gate_proj.weight"), l.wg);
      add(n("mlp.up_proj.weight"), l.wu);
      add(n("mlp.down_proj.weight"), l.wd);
    }
    add("model.norm.weight", final_norm_);
    if (!c_.tie_word_embeddings) add("lm_head.weight", lm_head_);
    io::save_safetensors_checkpoint(dir, t);
  }

  // The logits after the last token of `context`.
  std::vector<double> last_logits(const std::vector<TokenId>& context) const {
    const std::vector<std::int64_t> prefill(context.size(), 0);
    return all_logits(context, prefill, 0, std::numeric_limits<std::int64_t>::max() / 2, false).back();
  }

  // The logits after every token of `context` under a sink + window cache
  // (CachePolicy, StreamingLLM arXiv 2309.17453 §3.2): token t was run when
  // `committed[t]` tokens were committed, so it sees the sink (tokens below
  // `sink`), the last `window` committed tokens, and the tokens from
  // committed[t] to itself (its forward's, causally). Keys and queries are
  // rotated at text positions, or with `cache_positions` at positions within
  // the cache: shifted down by the committed tokens evicted, but the sink's.
  std::vector<std::vector<double>> all_logits(const std::vector<TokenId>& context,
                                              const std::vector<std::int64_t>& committed, std::int64_t sink,
                                              std::int64_t window, bool cache_positions) const {
    const auto n = static_cast<std::int64_t>(context.size());
    const std::int64_t d = c_.hidden_size, hd = c_.head_dim, heads = c_.num_attention_heads,
                       kvh = c_.num_key_value_heads;
    const auto sees = [&](std::int64_t t, std::int64_t j) {
      return j <= t && (j >= committed[t] || j < sink || j >= committed[t] - window);
    };
    const auto evicted = [&](std::int64_t t) {
      return cache_positions ? std::max<std::int64_t>(0, committed[t] - sink - window) : 0;
    };
    std::vector<std::vector<double>> x(static_cast<std::size_t>(n));
    for (std::int64_t t = 0; t < n; ++t) x[t] = row(embed_, context[static_cast<std::size_t>(t)]);
    for (const Layer& l : layers_) {
      std::vector<std::vector<double>> q(x.size()), k(x.size()), v(x.size());
      for (std::int64_t t = 0; t < n; ++t) {
        const auto h = rms_norm(x[t], l.attn_norm);
        q[t] = rope(matvec(l.wq, h), t - evicted(t), heads);
        k[t] = matvec(l.wk, h);  // rotated per query below
        v[t] = matvec(l.wv, h);
      }
      for (std::int64_t t = 0; t < n; ++t) {
        std::vector<std::vector<double>> kt(static_cast<std::size_t>(t + 1));
        for (std::int64_t j = 0; j <= t; ++j)
          if (sees(t, j)) kt[j] = rope(k[j], j < sink ? j : j - evicted(t), kvh);
        std::vector<double> att(static_cast<std::size_t>(heads * hd), 0.0);
        for (std::int64_t hh = 0; hh < heads; ++hh) {
          const std::int64_t g = hh / (heads / kvh);
          std::vector<double> s(static_cast<std::size_t>(t + 1), -INFINITY);
          double m = -INFINITY;
          for (std::int64_t j = 0; j <= t; ++j) {
            if (!sees(t, j)) continue;
            double dot = 0.0;
            for (std::int64_t e = 0; e < hd; ++e) dot += q[t][hh * hd + e] * kt[j][g * hd + e];
            s[j] = dot / std::sqrt(static_cast<double>(hd));
            m = std::max(m, s[j]);
          }
          double z = 0.0;
          for (auto& e : s) z += (e = std::exp(e - m));
          for (std::int64_t j = 0; j <= t; ++j)
            for (std::int64_t e = 0; e < hd; ++e) att[hh * hd + e] += s[j] / z * v[j][g * hd + e];
        }
        const auto o = matvec(l.wo, att);
        for (std::int64_t e = 0; e < d; ++e) x[t][e] += o[e];
        const auto h = rms_norm(x[t], l.mlp_norm);
        const auto gate = matvec(l.wg, h), up = matvec(l.wu, h);
        std::vector<double> a(gate.size());
        for (std::size_t e = 0; e < a.size(); ++e) a[e] = gate[e] / (1.0 + std::exp(-gate[e])) * up[e];
        const auto down = matvec(l.wd, a);
        for (std::int64_t e = 0; e < d; ++e) x[t][e] += down[e];
      }
    }
    std::vector<std::vector<double>> out;
    for (std::int64_t t = 0; t < n; ++t)
      out.push_back(matvec(c_.tie_word_embeddings ? embed_ : lm_head_, rms_norm(x[t], final_norm_)));
    return out;
  }

 private:
  struct Matrix {
    std::int64_t rows = 0, cols = 0;
    std::vector<float> w;
  };
  struct Layer {
    Matrix attn_norm, wq, wk, wv, wo, mlp_norm, wg, wu, wd;
  };

  static std::vector<double> row(const Matrix& m, std::int64_t r) {
    return {m.w.begin() + r * m.cols, m.w.begin() + (r + 1) * m.cols};
  }
  static std::vector<double> matvec(const Matrix& m, const std::vector<double>& x) {
    std::vector<double> y(static_cast<std::size_t>(m.rows), 0.0);
    for (std::int64_t r = 0; r < m.rows; ++r)
      for (std::int64_t k = 0; k < m.cols; ++k) y[r] += m.w[static_cast<std::size_t>(r * m.cols + k)] * x[k];
    return y;
  }
  std::vector<double> rms_norm(const std::vector<double>& x, const Matrix& w) const {
    double s = 0.0;
    for (const double e : x) s += e * e;
    const double r = 1.0 / std::sqrt(s / static_cast<double>(x.size()) + c_.rms_norm_eps);
    std::vector<double> y(x.size());
    for (std::size_t i = 0; i < x.size(); ++i) y[i] = x[i] * r * w.w[i];
    return y;
  }
  // Rotate-half RoPE on `heads` heads at position p.
  std::vector<double> rope(std::vector<double> x, std::int64_t p, std::int64_t heads) const {
    const std::int64_t hd = c_.head_dim, half = hd / 2;
    for (std::int64_t h = 0; h < heads; ++h)
      for (std::int64_t i = 0; i < half; ++i) {
        const double a = static_cast<double>(p) *
                         std::pow(c_.rope_theta, -2.0 * static_cast<double>(i) / static_cast<double>(hd));
        const double x1 = x[h * hd + i], x2 = x[h * hd + i + half];
        x[h * hd + i] = x1 * std::cos(a) - x2 * std::sin(a);
        x[h * hd + i + half] = x2 * std::cos(a) + x1 * std::sin(a);
      }
    return x;
  }

  io::LlamaConfig c_;
  Matrix embed_, final_norm_, lm_head_;
  std::vector<Layer> layers_;
};

}  // namespace specdec::testing
