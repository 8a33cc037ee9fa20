// The host engine's own Lyanna draft head (Chen et al., arXiv 2602.21224,
// §4-6), the FeatureHead that specdec's LyannaDrafter runs
// (draft/feature_head.hpp): one Llama layer over the target's hidden states
// with a cache of its own, read out through the target's LM head, plus the
// collapsed token-info table. It loads the head directories `specdec
// train-lyanna` writes (head_config.json + head.safetensors), without
// libtorch.
//
//   advance:  commits fuse(h_{i-1}, E(t_i)) = W_fc [h; E(t)] per token
//   chain:    h_{i+1} = Layer(h_i), staged after the committed entries
//   logits:   h W_head^T, all rows at once (one-pass logits, §4.2)
#pragma once

#include <cstdint>
#include <filesystem>
#include <fstream>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "host_kernels.hpp"
#include "host_llama.hpp"
#include "specdec/core/bit_matrix.hpp"
#include "specdec/core/error.hpp"
#include "specdec/draft/token_info_table.hpp"
#include "specdec/io/safetensors.hpp"

namespace host_engine {

class HostLyannaHead {
 public:
  HostLyannaHead(const std::filesystem::path& dir, const HostLlama& target)
      : target_(&target), config_(target.config()) {
    auto w = std::make_shared<Weights>();
    std::ifstream f(dir / "head_config.json");
    if (!f) throw sd::ModelLoadError(fmt::format("{}: no head_config.json", dir.string()));
    const auto j = nlohmann::json::parse(f);
    if (j.at("kind").get<std::string>() != "lyanna")
      throw sd::ModelLoadError(fmt::format("{}: not a Lyanna head", dir.string()));
    if (j.at("target_vocab_size").get<std::int64_t>() != config_.vocab_size ||
        j.at("target_hidden_size").get<std::int64_t>() != config_.hidden_size)
      throw sd::ModelLoadError(fmt::format("{}: the head was trained for another target", dir.string()));
    w->first_token = j.at("first_token").get<bool>();
    const auto rank = j.at("token_info_rank").get<std::int64_t>();
    const sd::io::SafetensorsFile file(dir / "head.safetensors");
    const auto d = config_.hidden_size;
    if (w->first_token) w->fc = load_floats(file, "fc.weight", d * 2 * d);
    w->layer = LayerWeights::load(file, "layer.", config_);
    w->norm = load_floats(file, "norm.weight", d);
    if (rank > 0) {
      auto hot = j.at("hot_tokens").get<std::vector<sd::TokenId>>();
      if (hot.empty())  // dense: every token has token info
        for (sd::TokenId t = 0; t < config_.vocab_size; ++t) hot.push_back(t);
      w->table = collapse_token_info(file, std::move(hot), rank);
    }
    w_ = std::move(w);
    allocate_cache();
  }

  // Another head over the same weights with a cache of its own: one per
  // request when several sequences draft at once.
  HostLyannaHead fork() const {
    HostLyannaHead h = *this;
    h.allocate_cache();
    h.reset();
    return h;
  }

 private:
  void allocate_cache() {
    const auto per_cache = config_.num_key_value_heads * config_.max_position_embeddings * config_.head_dim;
    k_.assign(static_cast<std::size_t>(per_cache), 0.0f);
    v_.assign(k_.size(), 0.0f);
  }

 public:
  // ---- the FeatureHead concept (draft/feature_head.hpp) --------------------
  std::int64_t vocab_size() const { return config_.vocab_size; }
  std::int64_t hidden_size() const { return config_.hidden_size; }
  std::int64_t max_context() const { return config_.max_position_embeddings; }
  const sd::TokenInfoTable& token_info() const { return w_->table; }

  void reset() { length_ = staged_ = 0; }

  void advance(std::span<const float> target_hidden, std::span<const sd::TokenId> tokens,
               std::int64_t first_position, std::span<float> out) {
    const auto d = config_.hidden_size, n = static_cast<std::int64_t>(tokens.size());
    if (n == 0 || static_cast<std::int64_t>(target_hidden.size()) != n * d || static_cast<std::int64_t>(out.size()) != d)
      throw sd::ShapeError("HostLyannaHead::advance: sizes disagree");
    std::vector<float> x(static_cast<std::size_t>(n * d)), cat(static_cast<std::size_t>(2 * d));
    for (std::int64_t i = 0; i < n; ++i) {
      const float* h = target_hidden.data() + i * d;
      if (!w_->first_token) {  // h_1 = Layer(h_0): the bonus token is not fused
        std::copy_n(h, d, x.data() + i * d);
        continue;
      }
      const auto t = tokens[static_cast<std::size_t>(i)];
      if (t < 0 || t >= config_.vocab_size) throw sd::ShapeError(fmt::format("HostLyannaHead: token {}", t));
      std::copy_n(h, d, cat.data());
      std::copy_n(target_->embedding().data() + t * d, d, cat.data() + d);
      matvec(w_->fc, cat.data(), d, 2 * d, x.data() + i * d);
    }
    std::vector<std::int64_t> positions(static_cast<std::size_t>(n));
    for (std::int64_t i = 0; i < n; ++i) positions[static_cast<std::size_t>(i)] = first_position + i;
    layer(x, positions, 0);
    length_ += n;
    staged_ = 0;
    std::copy_n(x.data() + (n - 1) * d, d, out.data());
  }

  void chain(std::span<const float> h1, std::int64_t steps, std::int64_t position, std::span<float> out) {
    const auto d = config_.hidden_size;
    if (steps < 1 || static_cast<std::int64_t>(h1.size()) != d || static_cast<std::int64_t>(out.size()) != steps * d)
      throw sd::ShapeError("HostLyannaHead::chain: sizes disagree");
    staged_ = 0;
    std::copy(h1.begin(), h1.end(), out.begin());
    for (std::int64_t i = 1; i < steps; ++i) {
      std::vector<float> x(out.begin() + (i - 1) * d, out.begin() + i * d);
      const std::int64_t pos = position + i;
      layer(x, std::span(&pos, 1), staged_);
      ++staged_;
      std::copy(x.begin(), x.end(), out.begin() + i * d);
    }
  }

  void extend(std::span<const float>, std::span<const sd::TokenId>, std::span<const std::int64_t>,
              const sd::BitMatrix*, std::span<float>) {
    throw sd::UnsupportedError("HostLyannaHead: a Lyanna head drafts with chain(), not extend()");
  }

  void logits(std::span<const float> h, std::span<float> out) {
    const auto d = config_.hidden_size, v = config_.vocab_size;
    const auto rows = static_cast<std::int64_t>(h.size()) / d;
    if (static_cast<std::int64_t>(out.size()) != rows * v) throw sd::ShapeError("HostLyannaHead::logits: sizes");
    for (std::int64_t r = 0; r < rows; ++r) matvec(target_->lm_head(), h.data() + r * d, v, d, out.data() + r * v);
  }

 private:
  // x ([n, hidden], in place): the layer after the committed entries and the
  // first `keep_staged` staged ones (causal), then the head's final norm.
  void layer(std::vector<float>& x, std::span<const std::int64_t> positions, std::int64_t keep_staged) {
    const auto d = config_.hidden_size, n = static_cast<std::int64_t>(positions.size());
    if (length_ + keep_staged + n > config_.max_position_embeddings)
      throw sd::ShapeError("HostLyannaHead: the context is full");
    run_layer(w_->layer, config_, target_->rope(), k_.data(), v_.data(), length_, length_ + keep_staged, x, positions,
              [&](std::int64_t i, std::int64_t j) { return j <= keep_staged + i; });
    std::vector<float> h(static_cast<std::size_t>(d));
    for (std::int64_t i = 0; i < n; ++i) {
      rms_norm(x.data() + i * d, w_->norm, d, config_.rms_norm_eps, h.data());
      std::copy(h.begin(), h.end(), x.begin() + i * d);
    }
  }

  // §5.1: the bias of hot parent p over hot column c is
  // RMSNorm(W_E[p] W_1 W_2)[c], computed once here.
  sd::TokenInfoTable collapse_token_info(const sd::io::SafetensorsFile& weights, std::vector<sd::TokenId> hot,
                                         std::int64_t rank) const {
    const auto d = config_.hidden_size, h = static_cast<std::int64_t>(hot.size());
    const auto w1 = load_floats(weights, "token_info.w1", d * rank);  // [d, rank]
    const auto w2 = load_floats(weights, "token_info.w2", rank * h);  // [rank, H]
    const auto gain = load_floats(weights, "token_info.norm.weight", h);
    std::vector<float> bias(static_cast<std::size_t>(h * h)), e1(static_cast<std::size_t>(rank)),
        z(static_cast<std::size_t>(h));
    for (std::int64_t p = 0; p < h; ++p) {
      const float* e = target_->embedding().data() + hot[static_cast<std::size_t>(p)] * d;
      for (std::int64_t r = 0; r < rank; ++r) {
        float acc = 0.0f;
        for (std::int64_t k = 0; k < d; ++k) acc += e[k] * w1[static_cast<std::size_t>(k * rank + r)];
        e1[static_cast<std::size_t>(r)] = acc;
      }
      for (std::int64_t col = 0; col < h; ++col) {
        float acc = 0.0f;
        for (std::int64_t r = 0; r < rank; ++r) acc += e1[static_cast<std::size_t>(r)] * w2[static_cast<std::size_t>(r * h + col)];
        z[static_cast<std::size_t>(col)] = acc;
      }
      rms_norm(z.data(), gain, h, config_.rms_norm_eps, bias.data() + p * h);
    }
    return sd::TokenInfoTable(config_.vocab_size, std::move(hot), std::move(bias));
  }

  struct Weights {
    bool first_token = true;  // fuse the bonus token into h_1
    std::vector<float> fc, norm;
    LayerWeights layer;
    sd::TokenInfoTable table;
  };

  const HostLlama* target_;
  sd::io::LlamaConfig config_;
  std::shared_ptr<const Weights> w_;  // shared by forks
  std::vector<float> k_, v_;  // [kv_heads, context, head_dim]
  std::int64_t length_ = 0, staged_ = 0;
};

}  // namespace host_engine
