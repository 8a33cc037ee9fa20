// A host engine's own Model: the reference Llama architecture (RMSNorm,
// rotary embeddings, grouped-query attention, SwiGLU) in plain C++, with its
// own per-sequence KV cache, loading the same safetensors checkpoints through
// specdec::io. No libtorch: this is what an engine author writes to plug
// specdec in (docs/integration.md §1). Kept simple rather than fast: float32,
// one thread, straightforward loops.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <span>
#include <string>
#include <unordered_map>
#include <vector>

#include <fmt/format.h>

#include "specdec/core/error.hpp"
#include "specdec/core/logit_rows.hpp"
#include "specdec/core/round.hpp"
#include "specdec/io/float_convert.hpp"
#include "specdec/io/llama_config.hpp"
#include "specdec/io/safetensors_checkpoint.hpp"

namespace host_engine {

namespace sd = specdec;

class HostLlama {
 public:
  explicit HostLlama(const std::filesystem::path& dir) : config_(sd::io::load_llama_config(dir / "config.json")) {
    const sd::io::SafetensorsCheckpoint ckpt(dir);
    const auto& c = config_;
    const auto d = c.hidden_size, hd = c.head_dim, q = c.num_attention_heads * hd, kv = c.num_key_value_heads * hd;
    embed_ = load(ckpt, "model.embed_tokens.weight", c.vocab_size * d);
    final_norm_ = load(ckpt, "model.norm.weight", d);
    lm_head_ = c.tie_word_embeddings ? embed_ : load(ckpt, "lm_head.weight", c.vocab_size * d);
    for (std::int64_t l = 0; l < c.num_hidden_layers; ++l) {
      const auto name = [&](const char* leaf) { return fmt::format("model.layers.{}.{}", l, leaf); };
      Layer layer;
      layer.attn_norm = load(ckpt, name("input_layernorm.weight"), d);
      layer.wq = load(ckpt, name("self_attn.q_proj.weight"), q * d);
      layer.wk = load(ckpt, name("self_attn.k_proj.weight"), kv * d);
      layer.wv = load(ckpt, name("self_attn.v_proj.weight"), kv * d);
      layer.wo = load(ckpt, name("self_attn.o_proj.weight"), d * q);
      layer.mlp_norm = load(ckpt, name("post_attention_layernorm.weight"), d);
      layer.w_gate = load(ckpt, name("mlp.gate_proj.weight"), c.intermediate_size * d);
      layer.w_up = load(ckpt, name("mlp.up_proj.weight"), c.intermediate_size * d);
      layer.w_down = load(ckpt, name("mlp.down_proj.weight"), d * c.intermediate_size);
      layers_.push_back(std::move(layer));
    }
    // cos/sin tables as Hugging Face builds them: inv_freq over the first half,
    // repeated for the second.
    cos_.resize(static_cast<std::size_t>(c.max_position_embeddings * hd));
    sin_.resize(cos_.size());
    for (std::int64_t p = 0; p < c.max_position_embeddings; ++p)
      for (std::int64_t j = 0; j < hd; ++j) {
        const auto i = j % (hd / 2);
        const float inv_freq =
            static_cast<float>(1.0 / std::pow(c.rope_theta, static_cast<double>(2 * i) / static_cast<double>(hd)));
        const float angle = static_cast<float>(p) * inv_freq;
        cos_[static_cast<std::size_t>(p * hd + j)] = std::cos(angle);
        sin_[static_cast<std::size_t>(p * hd + j)] = std::sin(angle);
      }
  }

  const sd::io::LlamaConfig& config() const { return config_; }

  // ---- the Model concept -------------------------------------------------
  std::int64_t vocab_size() const { return config_.vocab_size; }
  std::int64_t hidden_size() const { return config_.hidden_size; }
  std::int64_t max_context() const { return config_.max_position_embeddings; }

  void open(std::int32_t seq, const sd::CachePolicy& policy = {}) {
    if (policy.kind != sd::CachePolicy::Kind::kDense)
      throw sd::UnsupportedError("HostLlama: only dense caches");
    auto& cache = caches_[seq];
    const auto per_layer = config_.num_key_value_heads * config_.max_position_embeddings * config_.head_dim;
    cache.k.resize(static_cast<std::size_t>(config_.num_hidden_layers * per_layer));
    cache.v.resize(cache.k.size());
    cache.length = cache.staged = 0;
  }
  void close(std::int32_t seq) {
    if (caches_.erase(seq) == 0) throw sd::InvalidArgumentError(fmt::format("HostLlama: sequence {} is not open", seq));
  }

  void forward(const sd::ForwardRequest& request) {
    const auto& c = config_;
    std::int64_t total = 0;
    for (const auto& s : request.sequences) {
      const auto& cache = cache_of(s.seq_id);
      const auto before = s.extend_staged ? cache.staged : 0;
      const auto n = static_cast<std::int64_t>(s.tokens.size());
      if (static_cast<std::int64_t>(s.positions.size()) != n)
        throw sd::ShapeError(fmt::format("HostLlama: {} tokens but {} positions", n, s.positions.size()));
      if (!s.mask.empty() && s.mask.size != before + n)
        throw sd::ShapeError(fmt::format("HostLlama: a {}x{} mask over {} staged + {} new tokens", s.mask.size,
                                         s.mask.size, before, n));
      if (cache.length + before + n > c.max_position_embeddings)
        throw sd::ShapeError(fmt::format("HostLlama: sequence {} would exceed the context of {}", s.seq_id,
                                         c.max_position_embeddings));
      for (std::size_t i = 0; i < s.tokens.size(); ++i) {
        if (s.tokens[i] < 0 || s.tokens[i] >= c.vocab_size)
          throw sd::ShapeError(fmt::format("HostLlama: token {} outside the vocabulary", s.tokens[i]));
        if (s.positions[i] < 0 || s.positions[i] >= c.max_position_embeddings)
          throw sd::ShapeError(fmt::format("HostLlama: position {} outside the context", s.positions[i]));
      }
      total += n;
    }
    float* logits = request.logits.empty() ? nullptr : sd::host_output(request.logits, total, c.vocab_size, "HostLlama");
    float* hidden = request.hidden.empty() ? nullptr : sd::host_output(request.hidden, total, c.hidden_size, "HostLlama");
    if (hidden != nullptr && request.hidden_layer != -1)
      throw sd::UnsupportedError("HostLlama: hidden states after the final norm only");
    std::int64_t row = 0;
    for (const auto& s : request.sequences) {
      run_sequence(s, logits ? logits + row * c.vocab_size : nullptr, hidden ? hidden + row * c.hidden_size : nullptr);
      row += static_cast<std::int64_t>(s.tokens.size());
    }
  }

  void accept(std::int32_t seq, std::span<const std::int32_t> path) {
    auto& cache = cache_of(seq);
    for (std::size_t i = 0; i < path.size(); ++i)
      if (path[i] < 0 || path[i] >= cache.staged || (i > 0 && path[i] <= path[i - 1]))
        throw sd::InvalidArgumentError("HostLlama::accept: the path must increase within the staged tokens");
    const auto hd = config_.head_dim, cap = config_.max_position_embeddings;
    for (std::int64_t l = 0; l < config_.num_hidden_layers; ++l)
      for (std::int64_t h = 0; h < config_.num_key_value_heads; ++h)
        for (std::size_t i = 0; i < path.size(); ++i) {  // path[i] >= i: copying forward never overwrites a source
          const auto from = ((l * config_.num_key_value_heads + h) * cap + cache.length + path[i]) * hd;
          const auto to = ((l * config_.num_key_value_heads + h) * cap + cache.length + static_cast<std::int64_t>(i)) * hd;
          std::copy_n(cache.k.data() + from, hd, cache.k.data() + to);
          std::copy_n(cache.v.data() + from, hd, cache.v.data() + to);
        }
    cache.length += static_cast<std::int64_t>(path.size());
    cache.staged = 0;
  }

  void rollback(std::int32_t seq, std::int64_t length) {
    auto& cache = cache_of(seq);
    if (length < 0 || length > cache.length)
      throw sd::InvalidArgumentError(fmt::format("HostLlama::rollback: {} outside [0, {}]", length, cache.length));
    cache.length = length;
    cache.staged = 0;
  }

 private:
  struct Layer {
    std::vector<float> attn_norm, wq, wk, wv, wo, mlp_norm, w_gate, w_up, w_down;
  };
  struct Cache {
    std::vector<float> k, v;  // [layers, kv_heads, context, head_dim]
    std::int64_t length = 0, staged = 0;
  };

  static std::vector<float> load(const sd::io::SafetensorsCheckpoint& ckpt, const std::string& name, std::int64_t n) {
    const auto view = ckpt.view(name);
    if (view.numel() != n)
      throw sd::ModelLoadError(fmt::format("HostLlama: {} has {} values, expected {}", name, view.numel(), n));
    std::vector<float> out(static_cast<std::size_t>(n));
    const auto* p = static_cast<const std::uint16_t*>(view.data());
    switch (view.dtype()) {
      case sd::DType::kF32: std::memcpy(out.data(), view.data(), out.size() * sizeof(float)); break;
      case sd::DType::kF16: for (std::size_t i = 0; i < out.size(); ++i) out[i] = sd::io::f16_to_f32(p[i]); break;
      case sd::DType::kBF16: for (std::size_t i = 0; i < out.size(); ++i) out[i] = sd::io::bf16_to_f32(p[i]); break;
      default: throw sd::ModelLoadError(fmt::format("HostLlama: {} is {}", name, sd::dtype_name(view.dtype())));
    }
    return out;
  }

  Cache& cache_of(std::int32_t seq) {
    const auto it = caches_.find(seq);
    if (it == caches_.end()) throw sd::InvalidArgumentError(fmt::format("HostLlama: sequence {} is not open", seq));
    return it->second;
  }

  // y[rows] = W[rows, cols] x[cols]
  static void matvec(const std::vector<float>& w, const float* x, std::int64_t rows, std::int64_t cols, float* y) {
    for (std::int64_t r = 0; r < rows; ++r) {
      const float* wr = w.data() + r * cols;
      float acc = 0.0f;
      for (std::int64_t j = 0; j < cols; ++j) acc += wr[j] * x[j];
      y[r] = acc;
    }
  }

  void rms_norm(const float* x, const std::vector<float>& w, float* y) const {
    const auto d = config_.hidden_size;
    float ss = 0.0f;
    for (std::int64_t j = 0; j < d; ++j) ss += x[j] * x[j];
    const float r = 1.0f / std::sqrt(ss / static_cast<float>(d) + static_cast<float>(config_.rms_norm_eps));
    for (std::int64_t j = 0; j < d; ++j) y[j] = x[j] * r * w[static_cast<std::size_t>(j)];
  }

  void rope(float* x, std::int64_t position) const {
    const auto hd = config_.head_dim, half = hd / 2;
    const float* cs = cos_.data() + position * hd;
    const float* sn = sin_.data() + position * hd;
    for (std::int64_t j = 0; j < half; ++j) {
      const float a = x[j], b = x[j + half];
      x[j] = a * cs[j] - b * sn[j];
      x[j + half] = b * cs[j + half] + a * sn[j + half];
    }
  }

  // One sequence's new tokens, layer by layer (all tokens of a layer first, so
  // each token's keys and values are in the cache before any query reads them).
  void run_sequence(const sd::SequenceInput& s, float* logits, float* hidden) {
    const auto& c = config_;
    auto& cache = cache_of(s.seq_id);
    const auto before = s.extend_staged ? cache.staged : 0;
    const auto n = static_cast<std::int64_t>(s.tokens.size());
    const auto d = c.hidden_size, hd = c.head_dim, heads = c.num_attention_heads, kvh = c.num_key_value_heads;
    const auto rep = heads / kvh, cap = c.max_position_embeddings, ffn = c.intermediate_size;
    const auto first_slot = cache.length + before;  // the new tokens' cache slots
    std::vector<float> x(static_cast<std::size_t>(n * d)), h(static_cast<std::size_t>(d)),
        q(static_cast<std::size_t>(n * heads * hd)), attn(static_cast<std::size_t>(heads * hd)),
        proj(static_cast<std::size_t>(d)), gate(static_cast<std::size_t>(ffn)), up(static_cast<std::size_t>(ffn)),
        scores(static_cast<std::size_t>(first_slot + n));
    for (std::int64_t i = 0; i < n; ++i)
      std::copy_n(embed_.data() + s.tokens[static_cast<std::size_t>(i)] * d, d, x.data() + i * d);
    // Which staged + new columns token i sees (the committed prefix always).
    const auto visible = [&](std::int64_t i, std::int64_t j) {
      return s.mask.empty() ? j <= before + i
                            : s.mask.test(static_cast<std::int32_t>(before + i), static_cast<std::int32_t>(j));
    };
    const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
    for (std::int64_t l = 0; l < c.num_hidden_layers; ++l) {
      const auto& L = layers_[static_cast<std::size_t>(l)];
      float* kc = cache.k.data() + l * kvh * cap * hd;
      float* vc = cache.v.data() + l * kvh * cap * hd;
      for (std::int64_t i = 0; i < n; ++i) {
        const auto pos = s.positions[static_cast<std::size_t>(i)];
        rms_norm(x.data() + i * d, L.attn_norm, h.data());
        float* qi = q.data() + i * heads * hd;
        matvec(L.wq, h.data(), heads * hd, d, qi);
        for (std::int64_t hh = 0; hh < heads; ++hh) rope(qi + hh * hd, pos);
        std::vector<float> k(static_cast<std::size_t>(kvh * hd)), v(k.size());
        matvec(L.wk, h.data(), kvh * hd, d, k.data());
        matvec(L.wv, h.data(), kvh * hd, d, v.data());
        for (std::int64_t j = 0; j < kvh; ++j) {
          rope(k.data() + j * hd, pos);
          std::copy_n(k.data() + j * hd, hd, kc + (j * cap + first_slot + i) * hd);
          std::copy_n(v.data() + j * hd, hd, vc + (j * cap + first_slot + i) * hd);
        }
      }
      for (std::int64_t i = 0; i < n; ++i) {
        for (std::int64_t hh = 0; hh < heads; ++hh) {
          const auto j = hh / rep;
          const float* qh = q.data() + (i * heads + hh) * hd;
          float best = -INFINITY;
          for (std::int64_t t = 0; t < first_slot + n; ++t) {
            const bool seen = t < cache.length || visible(i, t - cache.length);
            if (!seen) {
              scores[static_cast<std::size_t>(t)] = -INFINITY;
              continue;
            }
            const float* kt = kc + (j * cap + t) * hd;
            float dot = 0.0f;
            for (std::int64_t e = 0; e < hd; ++e) dot += qh[e] * kt[e];
            scores[static_cast<std::size_t>(t)] = dot * scale;
            best = std::max(best, dot * scale);
          }
          float sum = 0.0f;
          for (std::int64_t t = 0; t < first_slot + n; ++t) {
            auto& sc = scores[static_cast<std::size_t>(t)];
            sc = sc == -INFINITY ? 0.0f : std::exp(sc - best);
            sum += sc;
          }
          float* out = attn.data() + hh * hd;
          std::fill_n(out, hd, 0.0f);
          for (std::int64_t t = 0; t < first_slot + n; ++t) {
            const float w = scores[static_cast<std::size_t>(t)] / sum;
            if (w == 0.0f) continue;
            const float* vt = vc + (j * cap + t) * hd;
            for (std::int64_t e = 0; e < hd; ++e) out[e] += w * vt[e];
          }
        }
        float* xi = x.data() + i * d;
        matvec(L.wo, attn.data(), d, heads * hd, proj.data());
        for (std::int64_t e = 0; e < d; ++e) xi[e] += proj[static_cast<std::size_t>(e)];
        rms_norm(xi, L.mlp_norm, h.data());
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
    cache.staged = before + n;
    for (std::int64_t i = 0; i < n; ++i) {
      rms_norm(x.data() + i * d, final_norm_, h.data());
      if (hidden != nullptr) std::copy_n(h.data(), d, hidden + i * d);
      if (logits != nullptr) matvec(lm_head_, h.data(), c.vocab_size, d, logits + i * c.vocab_size);
    }
  }

  sd::io::LlamaConfig config_;
  std::vector<float> embed_, final_norm_, lm_head_, cos_, sin_;
  std::vector<Layer> layers_;
  std::unordered_map<std::int32_t, Cache> caches_;
};

}  // namespace host_engine
