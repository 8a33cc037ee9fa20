#include "specdec/torch/draft_head.hpp"

#include <chrono>
#include <cmath>
#include <fstream>
#include <limits>
#include <tuple>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "checked_tensors.hpp"
#include "decoder_layer.hpp"
#include "kernels.hpp"
#include "specdec/core/error.hpp"
#include "specdec/io/file_io.hpp"
#include "specdec/io/safetensors.hpp"
#include "specdec/torch/tensor_interop.hpp"

namespace specdec::torch_backend {
using namespace kernels;
using cpu::AttentionSpan;
using cpu::decoder_layer_forward;
using cpu::DecoderLayerWeights;
using cpu::DecoderShape;
using cpu::key_capacity;
using cpu::rms_norm;
using cpu::rope_head;

namespace {

using Clock = std::chrono::steady_clock;
double since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

const char* kind_name(HeadKind k) {
  switch (k) {
    case HeadKind::kLyanna:
      return "lyanna";
    case HeadKind::kEagle:
      return "eagle";
    case HeadKind::kEagle3:
      return "eagle3";
  }
  return "?";
}

constexpr const char* kConfigFile = "head_config.json";
constexpr const char* kWeightsFile = "head.safetensors";

}  // namespace

std::vector<std::int32_t> DraftHeadConfig::default_feature_layers(std::int64_t num_layers) {
  if (num_layers < 3)
    throw InvalidArgumentError(
        fmt::format("EAGLE-3 fuses a low, a middle and a high layer; the target has {}", num_layers));
  const auto n = static_cast<std::int32_t>(num_layers);
  return {1, n / 2, n - 1};
}

std::string DraftHeadConfig::describe() const {
  if (kind == HeadKind::kEagle) return "EAGLE-style head (token-based autoregression over target features)";
  if (kind == HeadKind::kEagle3)
    return fmt::format("EAGLE-3 head (target layers {} fused; its own outputs fed back)",
                       fmt::join(feature_layers, ", "));
  const auto hot = hot_tokens.empty() ? target.vocab_size : static_cast<std::int64_t>(hot_tokens.size());
  return fmt::format("Lyanna head ({}, {})", first_token ? "first-token fusion" : "no first-token fusion",
                     token_info_rank > 0 ? fmt::format("token info of rank {} over {} of {} tokens",
                                                       token_info_rank, hot, target.vocab_size)
                                         : std::string("no token info"));
}

DraftHead::DraftHead(DraftHeadConfig config, const LlamaModel& target) : config_(std::move(config)) {
  const auto& t = target.config();
  if (config_.target.vocab_size != 0 &&
      (config_.target.vocab_size != t.vocab_size || config_.target.hidden_size != t.hidden_size))
    throw ShapeError(fmt::format("DraftHead: the head was made for a target with vocabulary {} and hidden size {}, "
                                 "this target has {} and {}",
                                 config_.target.vocab_size, config_.target.hidden_size, t.vocab_size, t.hidden_size));
  config_.target = t;
  if (config_.token_info_rank < 0)
    throw InvalidArgumentError(fmt::format("DraftHead: token-info rank {} must be >= 0", config_.token_info_rank));
  const auto& layers = config_.feature_layers;
  if (config_.kind == HeadKind::kEagle3) {
    if (layers.empty())
      throw InvalidArgumentError("DraftHead: an EAGLE-3 head fuses at least one target layer");
    for (std::size_t i = 0; i < layers.size(); ++i)
      if (layers[i] < 0 || layers[i] >= t.num_hidden_layers || (i > 0 && layers[i] <= layers[i - 1]))
        throw InvalidArgumentError(
            fmt::format("DraftHead: EAGLE-3 feature layers {} must increase within the target's layers 0..{}",
                        fmt::join(layers, ", "), t.num_hidden_layers - 1));
  } else if (!layers.empty()) {
    throw InvalidArgumentError(fmt::format("DraftHead: only an EAGLE-3 head reads target layers ({} given)",
                                           fmt::join(layers, ", ")));
  }
  embed_ = target.embedding();
  lm_head_ = target.lm_head();
  std::tie(rope_cos_, rope_sin_) = rope_tables(t);
  if (config_.has_token_info()) {
    std::vector<std::int64_t> hot;
    if (config_.hot_tokens.empty())
      for (std::int64_t i = 0; i < t.vocab_size; ++i) hot.push_back(i);
    else
      hot.assign(config_.hot_tokens.begin(), config_.hot_tokens.end());
    hot_ids_ = at::tensor(hot, at::kLong);
    if (hot_ids_.min().item<std::int64_t>() < 0 || hot_ids_.max().item<std::int64_t>() >= t.vocab_size)
      throw InvalidArgumentError(fmt::format("DraftHead: a hot token is outside the vocabulary of {}", t.vocab_size));
    hot_mask_ = at::zeros({t.vocab_size}).index_fill_(0, hot_ids_, 1.0);
    if (hot_mask_.sum().item<std::int64_t>() != hot_ids_.numel())
      throw InvalidArgumentError("DraftHead: the hot token list repeats a token");
  }
  reset();
}

DraftHead DraftHead::random(DraftHeadConfig config, const LlamaModel& target, std::uint64_t seed) {
  DraftHead m(std::move(config), target);
  const auto& c = m.config_.target;
  at::Generator gen = at::detail::createCPUGenerator(seed);
  const auto normal = [&](std::int64_t rows, std::int64_t cols, double sd) {
    return at::normal(0.0, sd, {rows, cols}, gen);
  };
  const double sd = 0.02, out_sd = 0.02 / std::sqrt(2.0);
  const auto d = c.hidden_size, q_dim = c.num_attention_heads * c.head_dim, kv_dim = c.num_key_value_heads * c.head_dim;
  if (m.config_.fuses_token(1)) m.w_.fc = normal(d, 2 * d, sd);
  if (m.config_.kind == HeadKind::kEagle3)
    m.w_.feature_fc = normal(d, static_cast<std::int64_t>(m.config_.feature_layers.size()) * d, sd);
  m.w_.attn_norm = at::ones({d});
  m.w_.wq = normal(q_dim, d, sd);
  m.w_.wk = normal(kv_dim, d, sd);
  m.w_.wv = normal(kv_dim, d, sd);
  m.w_.wo = normal(d, q_dim, out_sd);
  m.w_.mlp_norm = at::ones({d});
  m.w_.w_gate = normal(c.intermediate_size, d, sd);
  m.w_.w_up = normal(c.intermediate_size, d, sd);
  m.w_.w_down = normal(d, c.intermediate_size, out_sd);
  m.w_.norm = at::ones({d});
  if (m.config_.has_token_info()) {
    const auto r = m.config_.token_info_rank, h = m.hot_ids_.numel();
    m.w_.ti_w1 = normal(d, r, sd);
    m.w_.ti_w2 = normal(r, h, sd);
    m.w_.ti_norm = at::full({h}, 0.1);  // a small bias at first: random token info is noise
  }
  m.collapse_token_info();
  return m;
}

std::vector<std::pair<std::string, at::Tensor>> DraftHead::named_parameters() const {
  std::vector<std::pair<std::string, at::Tensor>> out;
  if (w_.fc.defined()) out.emplace_back("fc.weight", w_.fc);
  if (w_.feature_fc.defined()) out.emplace_back("feature_fc.weight", w_.feature_fc);
  out.emplace_back("layer.input_layernorm.weight", w_.attn_norm);
  out.emplace_back("layer.self_attn.q_proj.weight", w_.wq);
  out.emplace_back("layer.self_attn.k_proj.weight", w_.wk);
  out.emplace_back("layer.self_attn.v_proj.weight", w_.wv);
  out.emplace_back("layer.self_attn.o_proj.weight", w_.wo);
  out.emplace_back("layer.post_attention_layernorm.weight", w_.mlp_norm);
  out.emplace_back("layer.mlp.gate_proj.weight", w_.w_gate);
  out.emplace_back("layer.mlp.up_proj.weight", w_.w_up);
  out.emplace_back("layer.mlp.down_proj.weight", w_.w_down);
  out.emplace_back("norm.weight", w_.norm);
  if (w_.ti_w1.defined()) {
    out.emplace_back("token_info.w1", w_.ti_w1);
    out.emplace_back("token_info.w2", w_.ti_w2);
    out.emplace_back("token_info.norm.weight", w_.ti_norm);
  }
  return out;
}

std::vector<at::Tensor> DraftHead::parameters() const {
  std::vector<at::Tensor> out;
  for (auto& [name, t] : named_parameters()) out.push_back(t);
  return out;
}

std::int64_t DraftHead::num_parameters() const {
  std::int64_t n = 0;
  for (const auto& t : parameters()) n += t.numel();
  return n;
}

void DraftHead::set_requires_grad(bool on) {
  for (auto& t : parameters()) t.requires_grad_(on);
  if (on) packed_ = Packed{};  // weights are about to change
}

void DraftHead::save(const std::filesystem::path& dir, DType storage) const {
  if (storage != DType::kF32 && storage != DType::kF16 && storage != DType::kBF16)
    throw InvalidArgumentError(fmt::format("DraftHead::save: weights are stored as f32, f16 or bf16, not {}",
                                           dtype_name(storage)));
  std::filesystem::create_directories(dir);
  std::vector<at::Tensor> keep;
  std::vector<io::NamedTensor> tensors;
  for (const auto& [name, t] : named_parameters()) {
    keep.push_back(t.detach().to(scalar_type_of(storage)).contiguous());
    tensors.emplace_back(name, view_of(keep.back()));
  }
  io::save_safetensors(dir / kWeightsFile, tensors, {{"format", "pt"}});
  nlohmann::json j;
  j["kind"] = kind_name(config_.kind);
  j["first_token"] = config_.first_token;
  j["token_info_rank"] = config_.token_info_rank;
  j["hot_tokens"] = config_.hot_tokens;
  j["feature_layers"] = config_.feature_layers;
  j["target_vocab_size"] = config_.target.vocab_size;
  j["target_hidden_size"] = config_.target.hidden_size;
  io::write_text_atomically(dir / kConfigFile, j.dump(1) + "\n");
}

DraftHead DraftHead::load(const std::filesystem::path& dir, const LlamaModel& target) {
  const auto cfg_path = dir / kConfigFile;
  std::ifstream f(cfg_path);
  if (!f) throw ModelLoadError(fmt::format("{}: cannot open the draft head's config", cfg_path.string()));
  DraftHeadConfig config;
  try {
    const auto j = nlohmann::json::parse(f);
    const auto kind = j.at("kind").get<std::string>();
    if (kind != "lyanna" && kind != "eagle" && kind != "eagle3")
      throw ModelLoadError(fmt::format("{}: kind must be \"lyanna\", \"eagle\" or \"eagle3\", got \"{}\"",
                                       cfg_path.string(), kind));
    config.kind = kind == "lyanna"  ? HeadKind::kLyanna
                  : kind == "eagle" ? HeadKind::kEagle
                                    : HeadKind::kEagle3;
    config.feature_layers = j.value("feature_layers", std::vector<std::int32_t>{});
    config.first_token = j.at("first_token").get<bool>();
    config.token_info_rank = j.at("token_info_rank").get<std::int64_t>();
    config.hot_tokens = j.at("hot_tokens").get<std::vector<TokenId>>();
    config.target.vocab_size = j.at("target_vocab_size").get<std::int64_t>();
    config.target.hidden_size = j.at("target_hidden_size").get<std::int64_t>();
  } catch (const nlohmann::json::exception& e) {
    throw ModelLoadError(fmt::format("{}: {}", cfg_path.string(), e.what()));
  }
  DraftHead m(std::move(config), target);
  const io::SafetensorsFile ckpt(dir / kWeightsFile);
  const auto& c = m.config_.target;
  CheckedTensors fetch(ckpt, dir, kConfigFile);
  const auto d = c.hidden_size, q_dim = c.num_attention_heads * c.head_dim, kv_dim = c.num_key_value_heads * c.head_dim;
  if (m.config_.fuses_token(1)) m.w_.fc = fetch("fc.weight", {d, 2 * d});
  if (m.config_.kind == HeadKind::kEagle3)
    m.w_.feature_fc =
        fetch("feature_fc.weight", {d, static_cast<std::int64_t>(m.config_.feature_layers.size()) * d});
  m.w_.attn_norm = fetch("layer.input_layernorm.weight", {d});
  m.w_.wq = fetch("layer.self_attn.q_proj.weight", {q_dim, d});
  m.w_.wk = fetch("layer.self_attn.k_proj.weight", {kv_dim, d});
  m.w_.wv = fetch("layer.self_attn.v_proj.weight", {kv_dim, d});
  m.w_.wo = fetch("layer.self_attn.o_proj.weight", {d, q_dim});
  m.w_.mlp_norm = fetch("layer.post_attention_layernorm.weight", {d});
  m.w_.w_gate = fetch("layer.mlp.gate_proj.weight", {c.intermediate_size, d});
  m.w_.w_up = fetch("layer.mlp.up_proj.weight", {c.intermediate_size, d});
  m.w_.w_down = fetch("layer.mlp.down_proj.weight", {d, c.intermediate_size});
  m.w_.norm = fetch("norm.weight", {d});
  if (m.config_.has_token_info()) {
    const auto r = m.config_.token_info_rank, h = m.hot_ids_.numel();
    m.w_.ti_w1 = fetch("token_info.w1", {d, r});
    m.w_.ti_w2 = fetch("token_info.w2", {r, h});
    m.w_.ti_norm = fetch("token_info.norm.weight", {h});
  }
  if (fetch.used() != static_cast<std::int64_t>(ckpt.num_tensors()))
    throw ModelLoadError(fmt::format("{}: {} tensors, a {} uses {}", dir.string(), ckpt.num_tensors(),
                                     m.config_.describe(), fetch.used()));
  m.collapse_token_info();
  return m;
}

void DraftHead::collapse_token_info() {
  if (!config_.has_token_info()) {
    table_ = TokenInfoTable();
    return;
  }
  at::NoGradGuard no_grad;
  // §5.1: W_collapsed = W_E W_1 W_2, with the RMSNorm folded in, one row per
  // hot parent token, one column per hot logit.
  const auto z = at::matmul(at::matmul(embed_.index_select(0, hot_ids_), w_.ti_w1), w_.ti_w2);
  const auto b = rms_norm(z, w_.ti_norm, config_.target.rms_norm_eps).contiguous();
  std::vector<TokenId> hot(static_cast<std::size_t>(hot_ids_.numel()));
  for (std::size_t i = 0; i < hot.size(); ++i) hot[i] = static_cast<TokenId>(hot_ids_[static_cast<std::int64_t>(i)].item<std::int64_t>());
  table_ = TokenInfoTable(config_.target.vocab_size, std::move(hot),
                          std::vector<float>(b.data_ptr<float>(), b.data_ptr<float>() + b.numel()));
}

// ---- training ---------------------------------------------------------------

at::Tensor DraftHead::token_info_bias_train(const at::Tensor& parents) const {
  const auto e = at::embedding(embed_, parents);  // [B, T, d], frozen
  const auto z = at::matmul(at::matmul(e, w_.ti_w1), w_.ti_w2);
  const auto hot_parent = hot_mask_.index_select(0, parents.reshape({-1})).view({parents.size(0), parents.size(1), 1});
  return rms_norm(z, w_.ti_norm, config_.target.rms_norm_eps) * hot_parent;  // [B, T, H]; cold parents: 0
}

HeadTrainOutput DraftHead::forward_train(const at::Tensor& tokens, const at::Tensor& target_hidden,
                                         const at::Tensor& target_logits, std::int64_t steps, double alpha,
                                         double beta, at::ScalarType matmul_dtype,
                                         const at::Tensor& target_layers) const {
  const auto& c = config_.target;
  if (tokens.dim() != 2 || steps < 1 || tokens.size(1) <= steps)
    throw ShapeError(fmt::format("DraftHead::forward_train: tokens [batch, time] with time > steps ({}) needed", steps));
  const auto b = tokens.size(0), t = tokens.size(1) - steps, d = c.hidden_size, v = c.vocab_size;
  if (target_hidden.sizes() != at::IntArrayRef{b, t + steps, d} ||
      target_logits.sizes() != at::IntArrayRef{b, t + steps, v})
    throw ShapeError("DraftHead::forward_train: target hidden states / logits do not match the tokens");
  const auto h = c.num_attention_heads, kvh = c.num_key_value_heads, hd = c.head_dim, rep = h / kvh;
  const double scale = 1.0 / std::sqrt(static_cast<double>(hd));
  const auto eps = c.rms_norm_eps;
  const auto fuse = [&](const at::Tensor& features, std::int64_t token_from) {
    return linear(at::cat({features, at::embedding(embed_, tokens.narrow(1, token_from, t))}, -1), w_.fc, matmul_dtype);
  };
  // Step 1 at anchor t (position t): fuse(H_{t-1}, E(x_t)); EAGLE-3 reads
  // g_{t-1} = W_g [l; m; h]_{t-1} in place of H_{t-1} (§3.2).
  at::Tensor first_features = target_hidden.narrow(1, 0, t);
  if (config_.kind == HeadKind::kEagle3) {
    const auto width = static_cast<std::int64_t>(config_.feature_layers.size()) * d;
    if (!target_layers.defined() || target_layers.sizes() != at::IntArrayRef{b, t + steps, width})
      throw ShapeError(
          fmt::format("DraftHead::forward_train: an EAGLE-3 head needs the target's layer outputs "
                      "[{}, {}, {}]",
                      b, t + steps, width));
    first_features = linear(target_layers.narrow(1, 0, t), w_.feature_fc, matmul_dtype);
  }
  at::Tensor x = config_.fuses_token(1) ? fuse(first_features, 1) : first_features;
  const auto blocked = at::ones({t, t}, at::kBool).triu(1);
  std::vector<at::Tensor> ks, vs;
  HeadTrainOutput out;
  out.mse = at::zeros({});
  out.ce = at::zeros({});
  at::Tensor all_agree;
  for (std::int64_t s = 1; s <= steps; ++s) {
    const auto positions = at::arange(s, t + s, at::kLong);  // anchor t sits at t + s - 1
    const auto a = rms_norm(x, w_.attn_norm, eps);
    const auto q =
        rope(linear(a, w_.wq, matmul_dtype).view({b, t, h, hd}), positions, rope_cos_, rope_sin_).transpose(1, 2);
    auto k = rope(linear(a, w_.wk, matmul_dtype).view({b, t, kvh, hd}), positions, rope_cos_, rope_sin_).transpose(1, 2);
    auto vv = linear(a, w_.wv, matmul_dtype).view({b, t, kvh, hd}).transpose(1, 2);
    if (rep > 1) {
      k = k.repeat_interleave(rep, 1);
      vv = vv.repeat_interleave(rep, 1);
    }
    ks.push_back(k);
    vs.push_back(vv);
    // Keys: the step-1 entries of positions <= the anchor (the cache), then
    // this anchor's own steps 2..s (one key each).
    std::vector<at::Tensor> parts{
        (at::matmul(q, ks[0].transpose(-2, -1)) * scale).masked_fill(blocked, -std::numeric_limits<float>::infinity())};
    for (std::int64_t j = 1; j < s; ++j) parts.push_back((q * ks[static_cast<std::size_t>(j)]).sum(-1, true) * scale);
    const auto p = at::softmax(at::cat(parts, -1), -1);
    auto attn = at::matmul(p.narrow(-1, 0, t), vs[0]);
    for (std::int64_t j = 1; j < s; ++j) attn = attn + p.narrow(-1, t + j - 1, 1) * vs[static_cast<std::size_t>(j)];
    auto y = x + linear(attn.transpose(1, 2).reshape({b, t, h * hd}), w_.wo, matmul_dtype);
    const auto m = rms_norm(y, w_.mlp_norm, eps);
    y = y + linear(at::silu(linear(m, w_.w_gate, matmul_dtype)) * linear(m, w_.w_up, matmul_dtype),
                            w_.w_down, matmul_dtype);
    const auto hs = rms_norm(y, w_.norm, eps);  // the predicted target hidden state of position t + s - 1
    auto logits = linear(hs, lm_head_, matmul_dtype);
    if (config_.has_token_info())  // parent = the token at the step's own position
      logits = logits.index_add(2, hot_ids_, token_info_bias_train(tokens.narrow(1, s, t)));
    out.hidden.push_back(hs.detach());
    out.logits.push_back(logits.detach());
    const auto tgt_logits = target_logits.narrow(1, s, t);
    out.mse = out.mse + (hs - target_hidden.narrow(1, s, t)).pow(2).mean();
    out.ce = out.ce - (at::softmax(tgt_logits, -1) * at::log_softmax(logits, -1)).sum(-1).mean();
    {
      at::NoGradGuard no_grad;
      const auto agree = logits.argmax(-1).eq(tgt_logits.argmax(-1));
      all_agree = s == 1 ? agree : all_agree.logical_and(agree);
      out.top1.push_back(agree.to(at::kDouble).mean().item<double>());
      out.chain_top1.push_back(all_agree.to(at::kDouble).mean().item<double>());
    }
    if (s < steps) x = config_.fuses_token(static_cast<std::int32_t>(s + 1)) ? fuse(hs, s + 1) : hs;
  }
  out.mse = out.mse / static_cast<double>(steps);
  out.ce = out.ce / static_cast<double>(steps);
  out.loss = alpha * out.mse + beta * out.ce;
  return out;
}

at::Tensor DraftHead::pick_layers(const std::vector<at::Tensor>& layer_outputs) const {
  if (config_.feature_layers.empty()) return {};
  std::vector<at::Tensor> picked;
  for (const auto l : config_.feature_layers) {
    if (l >= static_cast<std::int32_t>(layer_outputs.size()))
      throw ShapeError(
          fmt::format("DraftHead::pick_layers: layer {} of {} layer outputs", l, layer_outputs.size()));
    picked.push_back(layer_outputs[static_cast<std::size_t>(l)]);
  }
  return at::cat(picked, -1);
}

// ---- inference ----------------------------------------------------------------

DraftHead DraftHead::fork() {
  if (!packed_.qkv) pack();  // once, here: every fork shares it
  DraftHead h = *this;       // tensors and packed weights shared
  h.k_cache_ = at::Tensor();
  h.v_cache_ = at::Tensor();
  h.length_ = h.staged_ = 0;
  h.layer_seconds_ = h.head_seconds_ = 0.0;
  return h;
}

void DraftHead::reset() {
  const auto& c = config_.target;
  if (!k_cache_.defined()) {
    const auto slots = key_capacity(c.max_position_embeddings);  // blocks of transposed keys
    k_cache_ = at::zeros({c.num_key_value_heads, slots * c.head_dim});
    v_cache_ = at::zeros({c.num_key_value_heads, slots, c.head_dim});
  }
  length_ = 0;
  staged_ = 0;
}

void DraftHead::pack() {
  at::NoGradGuard no_grad;
  const DType t = inference_dtype_;
  if (w_.fc.defined()) packed_.fc = std::make_shared<const PackedLinear>(w_.fc, t);
  if (w_.feature_fc.defined()) packed_.feature_fc = std::make_shared<const PackedLinear>(w_.feature_fc, t);
  packed_.qkv = std::make_shared<const PackedLinear>(at::cat({w_.wq, w_.wk, w_.wv}, 0), t);
  packed_.o = std::make_shared<const PackedLinear>(w_.wo, t);
  packed_.gate_up = std::make_shared<const PackedLinear>(at::cat({w_.w_gate, w_.w_up}, 0), t);
  packed_.down = std::make_shared<const PackedLinear>(w_.w_down, t);
  packed_.lm_head = std::make_shared<const PackedLinear>(lm_head_, t);
}

void DraftHead::set_inference_dtype(DType dtype) {
  if (dtype != DType::kF32 && dtype != DType::kBF16)
    throw InvalidArgumentError(
        fmt::format("DraftHead: inference weights are f32 or bf16, not {}", dtype_name(dtype)));
  if (dtype == inference_dtype_) return;
  inference_dtype_ = dtype;
  packed_ = Packed{};  // packed again, in the new precision, by the next inference call
  if (hot_lm_head_) hot_lm_head_ = hot_lm_head_->repacked(lm_head_, dtype);
}

void DraftHead::set_hot_lm_head(std::shared_ptr<const HotLmHead> head) {
  if (head && head->vocab_size() != vocab_size())
    throw InvalidArgumentError(fmt::format(
        "DraftHead::set_hot_lm_head: a head over a vocabulary of {}, the target's is {}", head->vocab_size(),
        vocab_size()));
  hot_lm_head_ = std::move(head);
}

at::Tensor DraftHead::fuse_input(const float* features, std::span<const TokenId> tokens) const {
  const auto n = static_cast<std::int64_t>(tokens.size()), d = config_.target.hidden_size;
  auto cat = at::empty({n, 2 * d});
  float* out = cat.data_ptr<float>();
  const float* e = embed_.data_ptr<float>();
  for (std::int64_t i = 0; i < n; ++i) {
    const auto tok = tokens[static_cast<std::size_t>(i)];
    if (tok < 0 || tok >= config_.target.vocab_size)
      throw ShapeError(fmt::format("DraftHead: token id {} is outside the vocabulary of {}", tok,
                                   config_.target.vocab_size));
    std::copy_n(features + i * d, d, out + i * 2 * d);
    std::copy_n(e + static_cast<std::int64_t>(tok) * d, d, out + i * 2 * d + d);
  }
  return (*packed_.fc)(cat);
}

at::Tensor DraftHead::fuse_layers(const float* span_rows, std::int64_t n) const {
  // The verifier's rows hold layers first .. first + count - 1; W_g reads
  // feature_layers of them.
  const std::int64_t d = config_.target.hidden_size, first = config_.feature_layer_first(),
                     count = config_.feature_layer_count(),
                     picked = static_cast<std::int64_t>(config_.feature_layers.size());
  auto cat = at::empty({n, picked * d});
  float* out = cat.data_ptr<float>();
  for (std::int64_t i = 0; i < n; ++i)
    for (std::int64_t j = 0; j < picked; ++j)
      std::copy_n(span_rows + (i * count + (config_.feature_layers[static_cast<std::size_t>(j)] - first)) * d,
                  d, out + (i * picked + j) * d);
  return (*packed_.feature_fc)(cat);
}

at::Tensor DraftHead::run_layer(const at::Tensor& x, std::span<const std::int64_t> positions,
                                std::int64_t keep_staged, const BitMatrix* mask) {
  const auto start = Clock::now();
  const auto& c = config_.target;
  const auto n = x.size(0);
  const auto capacity = c.max_position_embeddings;
  const auto base = length_ + keep_staged, total = base + n;
  if (total > capacity)
    throw ShapeError(fmt::format("DraftHead: {} entries exceed the context of {}", total, capacity));
  if (mask != nullptr && mask->size() != keep_staged + n)
    throw ShapeError(fmt::format("DraftHead: {} staged and {} new entries but a {}x{} mask", keep_staged, n,
                                 mask->size(), mask->size()));
  for (const auto pos : positions)
    if (pos < 0 || pos >= c.max_position_embeddings)
      throw ShapeError(fmt::format("DraftHead: position {} is outside [0, {})", pos, c.max_position_embeddings));
  // The committed entries are always visible; among the staged + new ones,
  // the mask (or causal order) decides.
  std::vector<std::uint8_t> hidden;
  if (mask != nullptr) {
    const auto span = keep_staged + n;
    hidden.assign(static_cast<std::size_t>(n * span), 0);
    bool any = false;
    for (std::int64_t i = 0; i < n; ++i)
      for (std::int64_t j = 0; j < span; ++j) {
        const bool h = !mask->test(static_cast<std::int32_t>(keep_staged + i), static_cast<std::int32_t>(j));
        hidden[static_cast<std::size_t>(i * span + j)] = h;
        any |= h;
      }
    if (!any) hidden.clear();
  }
  AttentionSpan span;
  span.rows = n;
  span.k = k_cache_.data_ptr<float>();
  span.v = v_cache_.data_ptr<float>();
  span.capacity = key_capacity(capacity);
  span.prefix = base;
  span.masked_from = length_;
  span.blocked = hidden.empty() ? nullptr : hidden.data();
  const DecoderShape shape{c.hidden_size,        c.num_attention_heads, c.num_key_value_heads,
                           c.head_dim,           c.intermediate_size,   static_cast<float>(c.rms_norm_eps)};
  const DecoderLayerWeights weights{packed_.qkv.get(),          packed_.o.get(),
                                    packed_.gate_up.get(),      packed_.down.get(),
                                    w_.attn_norm.data_ptr<float>(), w_.mlp_norm.data_ptr<float>()};
  at::Tensor y = x.contiguous().clone();  // the residual stream, updated in place
  decoder_layer_forward(weights, shape, y.data_ptr<float>(), n, positions, rope_cos_.data_ptr<float>(),
                        rope_sin_.data_ptr<float>(), std::span(&span, 1));
  staged_ = keep_staged + n;
  rms_norm(y.data_ptr<float>(), n, c.hidden_size, w_.norm.data_ptr<float>(), static_cast<float>(c.rms_norm_eps),
           y.data_ptr<float>());
  layer_seconds_ += since(start);
  return y;
}

at::Tensor DraftHead::advance(const float* target_hidden, std::span<const TokenId> tokens,
                              std::int64_t first_position) {
  at::NoGradGuard no_grad;
  if (!packed_.qkv) pack();
  const auto n = static_cast<std::int64_t>(tokens.size()), d = config_.target.hidden_size;
  if (n == 0) throw InvalidArgumentError("DraftHead::advance: no entries");
  const auto start = Clock::now();
  at::Tensor x;
  if (config_.kind == HeadKind::kEagle3) {
    const auto g = fuse_layers(target_hidden, n).contiguous();
    x = fuse_input(g.data_ptr<float>(), tokens);
  } else {
    x = config_.fuses_token(1) ? fuse_input(target_hidden, tokens)
                               : at::from_blob(const_cast<float*>(target_hidden), {n, d}, at::kFloat).clone();
  }
  layer_seconds_ += since(start);
  std::vector<std::int64_t> positions(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) positions[static_cast<std::size_t>(i)] = first_position + i;
  const auto out = run_layer(x, positions, /*keep_staged=*/0, nullptr);
  length_ += n;
  staged_ = 0;
  return out.narrow(0, n - 1, 1);
}

at::Tensor DraftHead::chain(const at::Tensor& h1, std::int64_t steps, std::int64_t position) {
  at::NoGradGuard no_grad;
  if (config_.kind != HeadKind::kLyanna) throw UnsupportedError("DraftHead::chain: an EAGLE head drafts with extend()");
  if (steps < 1) throw InvalidArgumentError(fmt::format("DraftHead::chain: {} steps", steps));
  staged_ = 0;  // a chain starts again from h_1: what an earlier chain staged is dropped
  std::vector<at::Tensor> rows{h1};
  at::Tensor x = h1;
  for (std::int64_t i = 1; i < steps; ++i) {
    const std::int64_t pos = position + i;
    x = run_layer(x, std::span(&pos, 1), staged_, nullptr);
    rows.push_back(x);
  }
  return at::cat(rows, 0);
}

at::Tensor DraftHead::extend(const at::Tensor& parent_features, std::span<const TokenId> tokens,
                             std::span<const std::int64_t> positions, const BitMatrix* mask) {
  at::NoGradGuard no_grad;
  if (!config_.fuses_token(2)) throw UnsupportedError("DraftHead::extend: a Lyanna head drafts with chain()");
  if (parent_features.size(0) != static_cast<std::int64_t>(tokens.size()) || tokens.size() != positions.size())
    throw ShapeError("DraftHead::extend: features, tokens and positions disagree");
  const auto start = Clock::now();
  const auto features = parent_features.contiguous();
  const auto x = fuse_input(features.data_ptr<float>(), tokens);
  layer_seconds_ += since(start);
  return run_layer(x, positions, staged_, mask);
}

at::Tensor DraftHead::logits(const at::Tensor& h) {
  at::NoGradGuard no_grad;
  if (!packed_.lm_head) pack();
  const auto start = Clock::now();
  at::Tensor out;
  if (hot_lm_head_) {
    const auto rows = h.contiguous();
    out = at::empty({rows.size(0), vocab_size()});
    hot_lm_head_->forward(rows.data_ptr<float>(), rows.size(0), out.data_ptr<float>());
  } else {
    out = (*packed_.lm_head)(h.contiguous());
  }
  head_seconds_ += since(start);
  return out;
}

// ---- host-row versions (FeatureHead) ---------------------------------------

namespace {

at::Tensor rows_of(std::span<const float> data, std::int64_t width, const char* who) {
  if (width <= 0 || data.size() % static_cast<std::size_t>(width) != 0)
    throw ShapeError(fmt::format("DraftHead::{}: {} floats are not rows of {}", who, data.size(), width));
  return at::from_blob(const_cast<float*>(data.data()), {static_cast<std::int64_t>(data.size()) / width, width},
                       at::kFloat);
}

void copy_out(const at::Tensor& t, std::span<float> out, const char* who) {
  const auto c = t.contiguous();
  if (static_cast<std::int64_t>(out.size()) != c.numel())
    throw ShapeError(fmt::format("DraftHead::{}: output of {} floats, the result has {}", who, out.size(), c.numel()));
  std::copy_n(c.data_ptr<float>(), c.numel(), out.data());
}

}  // namespace

void DraftHead::advance(std::span<const float> target_hidden, std::span<const TokenId> tokens,
                        std::int64_t first_position, std::span<float> out) {
  const auto d = feature_width();
  if (static_cast<std::int64_t>(target_hidden.size()) != d * static_cast<std::int64_t>(tokens.size()))
    throw ShapeError(fmt::format("DraftHead::advance: {} tokens need {} feature floats, got {}",
                                 tokens.size(), d * static_cast<std::int64_t>(tokens.size()),
                                 target_hidden.size()));
  copy_out(advance(target_hidden.data(), tokens, first_position), out, "advance");
}

void DraftHead::chain(std::span<const float> h1, std::int64_t steps, std::int64_t position, std::span<float> out) {
  copy_out(chain(rows_of(h1, hidden_size(), "chain"), steps, position), out, "chain");
}

void DraftHead::extend(std::span<const float> parent_features, std::span<const TokenId> tokens,
                       std::span<const std::int64_t> positions, const BitMatrix* mask, std::span<float> out) {
  copy_out(extend(rows_of(parent_features, hidden_size(), "extend"), tokens, positions, mask), out, "extend");
}

void DraftHead::logits(std::span<const float> h, std::span<float> out) {
  const auto rows = rows_of(h, hidden_size(), "logits").size(0);
  if (static_cast<std::int64_t>(out.size()) != rows * vocab_size())
    throw ShapeError(fmt::format("DraftHead::logits: output of {} floats for {} rows of {}", out.size(), rows,
                                 vocab_size()));
  if (rows == 0) return;
  if (!packed_.lm_head) pack();
  const auto start = Clock::now();
  if (hot_lm_head_)
    hot_lm_head_->forward(h.data(), rows, out.data());
  else
    packed_.lm_head->forward(h.data(), rows, out.data());  // straight into the caller's rows
  head_seconds_ += since(start);
}

}  // namespace specdec::torch_backend
