// A host engine's own Model: the reference Llama architecture (RMSNorm,
// rotary embeddings, grouped-query attention, SwiGLU) in plain C++, with its
// own per-sequence KV cache, loading the same safetensors checkpoints through
// specdec::io. No libtorch: this is what an engine author writes to plug
// specdec in (docs/integration.md §1). Kept simple rather than fast: float32,
// one thread, straightforward loops (host_kernels.hpp).
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
#include "specdec/io/llama_config.hpp"
#include "specdec/io/safetensors_checkpoint.hpp"
#include "host_kernels.hpp"

namespace host_engine {

namespace sd = specdec;

class HostLlama {
 public:
  explicit HostLlama(const std::filesystem::path& dir)
      : config_(sd::io::load_llama_config(dir / "config.json")), rope_(config_) {
    const sd::io::SafetensorsCheckpoint ckpt(dir);
    const auto& c = config_;
    const auto d = c.hidden_size;
    embed_ = load_floats(ckpt, "model.embed_tokens.weight", c.vocab_size * d);
    final_norm_ = load_floats(ckpt, "model.norm.weight", d);
    lm_head_ = c.tie_word_embeddings ? embed_ : load_floats(ckpt, "lm_head.weight", c.vocab_size * d);
    for (std::int64_t l = 0; l < c.num_hidden_layers; ++l)
      layers_.push_back(LayerWeights::load(ckpt, fmt::format("model.layers.{}.", l), c));
  }

  const sd::io::LlamaConfig& config() const { return config_; }
  // The token embedding and the LM head ([vocab, hidden]), which a
  // feature-level draft head shares with its target.
  const std::vector<float>& embedding() const { return embed_; }
  const std::vector<float>& lm_head() const { return lm_head_; }
  const Rope& rope() const { return rope_; }

  // ---- the Model concept -------------------------------------------------
  std::int64_t vocab_size() const { return config_.vocab_size; }
  std::int64_t hidden_size() const { return config_.hidden_size; }
  std::int64_t max_context() const { return config_.max_position_embeddings; }

  // Dense, or sink + window (CachePolicy): the window is kept compact by
  // moving it down over the tokens each accept() evicts, which is simple, not
  // the fastest (specdec's LlamaModel keeps a ring).
  void open(std::int32_t seq, const sd::CachePolicy& policy = {}) {
    if (policy.kind == sd::CachePolicy::Kind::kSinkWindow && (policy.sink < 0 || policy.window < 1))
      throw sd::InvalidArgumentError("HostLlama: a sink + window cache needs sink >= 0 and window >= 1");
    auto& cache = caches_[seq];
    const auto per_layer = config_.num_key_value_heads * config_.max_position_embeddings * config_.head_dim;
    cache.k.resize(static_cast<std::size_t>(config_.num_hidden_layers * per_layer));
    cache.v.resize(cache.k.size());
    cache.length = cache.staged = cache.evicted = cache.sink_shift = 0;
    cache.policy = policy;
    const auto sink_values = config_.num_hidden_layers * config_.num_key_value_heads * policy.sink * config_.head_dim;
    cache.sink_keys.assign(cache.sparse() ? static_cast<std::size_t>(sink_values) : 0, 0.0f);
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
    if (hidden != nullptr && (request.hidden_layer != -1 || request.hidden_layers != 1))
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
    const auto old_length = cache.length;
    cache.length += static_cast<std::int64_t>(path.size());
    cache.staged = 0;
    if (!cache.sparse()) return;
    const auto& p = cache.policy;
    for (std::int64_t lh = 0; lh < config_.num_hidden_layers * config_.num_key_value_heads; ++lh)
      for (auto t = old_length; t < std::min(cache.length, p.sink); ++t)  // the sink's keys as rotated at t
        std::copy_n(cache.k.data() + (lh * cap + t) * hd, hd, cache.sink_keys.data() + (lh * p.sink + t) * hd);
    const auto drop = cache.length - p.sink - p.window;
    if (drop <= 0) return;
    for (std::int64_t lh = 0; lh < config_.num_hidden_layers * config_.num_key_value_heads; ++lh) {
      const auto from = (lh * cap + p.sink + drop) * hd, to = (lh * cap + p.sink) * hd;
      std::copy_n(cache.k.data() + from, p.window * hd, cache.k.data() + to);  // to < from: a forward copy is safe
      std::copy_n(cache.v.data() + from, p.window * hd, cache.v.data() + to);
    }
    cache.length -= drop;
    cache.evicted += drop;
  }

  void rollback(std::int32_t seq, std::int64_t length) {
    auto& cache = cache_of(seq);
    const auto text_length = cache.length + cache.evicted;
    if (length < 0 || length > text_length)
      throw sd::InvalidArgumentError(fmt::format("HostLlama::rollback: {} outside [0, {}]", length, text_length));
    if (cache.evicted > 0 && length < text_length)
      throw sd::InvalidArgumentError(fmt::format(
          "HostLlama::rollback: sequence {} has evicted {} tokens; it cannot roll back", seq, cache.evicted));
    cache.length = length - cache.evicted;
    cache.staged = 0;
  }

 private:
  struct Cache {
    std::vector<float> k, v;  // [layers, kv_heads, context, head_dim]
    std::int64_t length = 0, staged = 0;  // committed slots (the sink and the window), staged after them
    sd::CachePolicy policy;
    std::int64_t evicted = 0;             // committed tokens the window dropped
    // Positions::kCache: the sink's keys rotated at their own positions, and
    // the shift the cache's copies carry (see shift_sink).
    std::vector<float> sink_keys;
    std::int64_t sink_shift = 0;
    bool sparse() const { return policy.kind == sd::CachePolicy::Kind::kSinkWindow; }
  };

  // Positions::kCache (StreamingLLM): positions within the cache are the
  // text's minus the evicted tokens, for every key but the sink's. RoPE
  // scores depend on differences only, so the window's keys keep their text
  // rotation and the sink's are rotated by their position plus `evicted`.
  void shift_sink(Cache& cache) const {
    if (!cache.sparse() || cache.policy.positions != sd::CachePolicy::Positions::kCache ||
        cache.sink_shift == cache.evicted)
      return;
    const auto hd = config_.head_dim, cap = config_.max_position_embeddings, sink = cache.policy.sink;
    for (std::int64_t lh = 0; lh < config_.num_hidden_layers * config_.num_key_value_heads; ++lh)
      for (std::int64_t t = 0; t < std::min(sink, cache.length); ++t) {
        float* key = cache.k.data() + (lh * cap + t) * hd;
        std::copy_n(cache.sink_keys.data() + (lh * sink + t) * hd, hd, key);
        rope_.apply(key, cache.evicted);
      }
    cache.sink_shift = cache.evicted;
  }

  Cache& cache_of(std::int32_t seq) {
    const auto it = caches_.find(seq);
    if (it == caches_.end()) throw sd::InvalidArgumentError(fmt::format("HostLlama: sequence {} is not open", seq));
    return it->second;
  }

  // One sequence's new tokens through every layer, then the final norm and
  // the LM head.
  void run_sequence(const sd::SequenceInput& s, float* logits, float* hidden) {
    const auto& c = config_;
    auto& cache = cache_of(s.seq_id);
    shift_sink(cache);
    const auto before = s.extend_staged ? cache.staged : 0;
    const auto n = static_cast<std::int64_t>(s.tokens.size());
    const auto d = c.hidden_size;
    const auto per_layer = c.num_key_value_heads * c.max_position_embeddings * c.head_dim;
    std::vector<float> x(static_cast<std::size_t>(n * d)), h(static_cast<std::size_t>(d));
    for (std::int64_t i = 0; i < n; ++i)
      std::copy_n(embed_.data() + s.tokens[static_cast<std::size_t>(i)] * d, d, x.data() + i * d);
    // Which staged + new slots token i sees (the committed prefix always).
    const auto visible = [&](std::int64_t i, std::int64_t j) {
      return s.mask.empty() ? j <= before + i
                            : s.mask.test(static_cast<std::int32_t>(before + i), static_cast<std::int32_t>(j));
    };
    for (std::int64_t l = 0; l < c.num_hidden_layers; ++l)
      run_layer(layers_[static_cast<std::size_t>(l)], c, rope_, cache.k.data() + l * per_layer,
                cache.v.data() + l * per_layer, cache.length, cache.length + before, x, s.positions, visible);
    cache.staged = before + n;
    for (std::int64_t i = 0; i < n; ++i) {
      rms_norm(x.data() + i * d, final_norm_, d, c.rms_norm_eps, h.data());
      if (hidden != nullptr) std::copy_n(h.data(), d, hidden + i * d);
      if (logits != nullptr) matvec(lm_head_, h.data(), c.vocab_size, d, logits + i * c.vocab_size);
    }
  }

  sd::io::LlamaConfig config_;
  Rope rope_;
  std::vector<float> embed_, final_norm_, lm_head_;
  std::vector<LayerWeights> layers_;
  std::unordered_map<std::int32_t, Cache> caches_;
};

}  // namespace host_engine
