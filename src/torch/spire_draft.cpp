#include "specdec/torch/spire_draft.hpp"

#include <algorithm>
#include <cmath>
#include <fstream>
#include <limits>

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
#include "thread_team.hpp"

namespace specdec::torch_backend {
using namespace kernels;
using cpu::AttentionSpan;
using cpu::decoder_layer_forward;
using cpu::DecoderLayerWeights;
using cpu::DecoderShape;
using cpu::key_capacity;
using cpu::parallel_for;
using cpu::rms_norm;
using cpu::rope_head;

namespace {

constexpr const char* kConfigFile = "spire_config.json";
constexpr const char* kWeightsFile = "model.safetensors";

std::string layer_name(std::int64_t i, const char* rest) { return fmt::format("layers.{}.{}", i, rest); }

void check_config(const SpireConfig& c, std::int64_t target_layers) {
  if (c.layers < 1 || c.first_layer < 1 || c.first_layer + c.layers > target_layers)
    throw InvalidArgumentError(fmt::format(
        "SpireDraft: {} layer(s) pruned from target layer {} on: the target has layers 0 .. {}, and the first draft "
        "layer's memory is the output of the layer before it (first layer >= 1)",
        c.layers, c.first_layer, target_layers - 1));
  if (c.sink < 0 || c.window < 0)
    throw InvalidArgumentError(fmt::format("SpireDraft: sink {} and window {} must be >= 0", c.sink, c.window));
}

// x . y over n floats in 8 independent partial sums: a single running sum
// waits on each add (the compiler may not reorder float adds), which made
// the attention of a 64-sequence step cost as much as the rest of it.
float dot_product(const float* x, const float* y, std::int64_t n) {
  float part[8] = {};
  std::int64_t e = 0;
  for (; e + 8 <= n; e += 8)
    for (int u = 0; u < 8; ++u) part[u] += x[e + u] * y[e + u];
  float dot = 0.0f;
  for (; e < n; ++e) dot += x[e] * y[e];
  for (const float p : part) dot += p;
  return dot;
}

// softmax(w_i) of every layer's mixing weights, [layers][layers + 1].
std::vector<float> mixing(const at::Tensor& mix) {
  const auto w = at::softmax(mix.detach(), -1).contiguous();
  return {w.data_ptr<float>(), w.data_ptr<float>() + w.numel()};
}

}  // namespace

std::string SpireConfig::describe() const {
  return fmt::format("SPIRe draft: {} layer(s) from target layer {}, sink {} + {}, {}, {}, {}", layers, first_layer,
                     sink, window == 0 ? std::string("dense") : fmt::format("window {}", window),
                     feedback ? "feedback memory" : "no feedback", target_memory ? "target memory" : "embedding memory",
                     pruned_init ? "pruned init" : "random init");
}

SpireDraft::SpireDraft(SpireConfig config, const LlamaModel& target) : config_(std::move(config)) {
  const auto& t = target.config();
  if (config_.target.vocab_size != 0 &&
      (config_.target.vocab_size != t.vocab_size || config_.target.hidden_size != t.hidden_size ||
       config_.target.num_hidden_layers != t.num_hidden_layers || config_.target.head_dim != t.head_dim))
    throw ShapeError(fmt::format("SpireDraft: drafted for a target of vocabulary {}, hidden {}, {} layers, but this "
                                 "target has {}, {}, {}",
                                 config_.target.vocab_size, config_.target.hidden_size,
                                 config_.target.num_hidden_layers, t.vocab_size, t.hidden_size, t.num_hidden_layers));
  config_.target = t;
  check_config(config_, t.num_hidden_layers);
  embed_ = target.embedding();
  lm_head_ = target.lm_head();
  std::tie(rope_cos_, rope_sin_) = rope_tables(t);
}

SpireDraft SpireDraft::init(SpireConfig config, const LlamaModel& target, std::uint64_t seed) {
  SpireDraft m(std::move(config), target);
  const auto& c = m.config_.target;
  const auto d = c.hidden_size, q_dim = c.num_attention_heads * c.head_dim, kv_dim = c.num_key_value_heads * c.head_dim;
  if (m.config_.pruned_init) {
    std::unordered_map<std::string, at::Tensor> by_name;
    for (auto& [name, t] : target.named_parameters()) by_name.emplace(name, t);
    const auto take = [&](std::int64_t li, const char* rest) {
      return by_name.at(fmt::format("model.layers.{}.{}", li, rest)).detach().clone();
    };
    for (std::int64_t i = 0; i < m.config_.layers; ++i) {
      const auto li = m.config_.first_layer + i;
      m.layers_.push_back({take(li, "input_layernorm.weight"), take(li, "self_attn.q_proj.weight"),
                           take(li, "self_attn.k_proj.weight"), take(li, "self_attn.v_proj.weight"),
                           take(li, "self_attn.o_proj.weight"), take(li, "post_attention_layernorm.weight"),
                           take(li, "mlp.gate_proj.weight"), take(li, "mlp.up_proj.weight"),
                           take(li, "mlp.down_proj.weight")});
    }
    m.norm_ = by_name.at("model.norm.weight").detach().clone();
  } else {
    const auto gen = at::make_generator<at::CPUGeneratorImpl>(seed);
    const double sd = 0.02, out_sd = 0.02 / std::sqrt(2.0 * static_cast<double>(m.config_.layers));
    const auto normal = [&](std::int64_t rows, std::int64_t cols, double s) {
      return at::normal(0.0, s, {rows, cols}, gen);
    };
    for (std::int64_t i = 0; i < m.config_.layers; ++i)
      m.layers_.push_back({at::ones({d}), normal(q_dim, d, sd), normal(kv_dim, d, sd), normal(kv_dim, d, sd),
                           normal(d, q_dim, out_sd), at::ones({d}), normal(c.intermediate_size, d, sd),
                           normal(c.intermediate_size, d, sd), normal(d, c.intermediate_size, out_sd)});
    m.norm_ = at::ones({d});
  }
  // Each layer's memory starts as (mostly) its own input: what the target's
  // memory of the same layer holds for verified tokens.
  m.mix_ = at::zeros({m.config_.layers, m.config_.layers + 1});
  for (std::int64_t i = 0; i < m.config_.layers; ++i) m.mix_[i][i] = 2.0;
  return m;
}

std::vector<std::pair<std::string, at::Tensor>> SpireDraft::named_parameters() const {
  std::vector<std::pair<std::string, at::Tensor>> out;
  for (std::size_t i = 0; i < layers_.size(); ++i) {
    const auto& l = layers_[i];
    const auto li = static_cast<std::int64_t>(i);
    out.emplace_back(layer_name(li, "input_layernorm.weight"), l.attn_norm);
    out.emplace_back(layer_name(li, "self_attn.q_proj.weight"), l.wq);
    out.emplace_back(layer_name(li, "self_attn.k_proj.weight"), l.wk);
    out.emplace_back(layer_name(li, "self_attn.v_proj.weight"), l.wv);
    out.emplace_back(layer_name(li, "self_attn.o_proj.weight"), l.wo);
    out.emplace_back(layer_name(li, "post_attention_layernorm.weight"), l.mlp_norm);
    out.emplace_back(layer_name(li, "mlp.gate_proj.weight"), l.w_gate);
    out.emplace_back(layer_name(li, "mlp.up_proj.weight"), l.w_up);
    out.emplace_back(layer_name(li, "mlp.down_proj.weight"), l.w_down);
  }
  out.emplace_back("norm.weight", norm_);
  out.emplace_back("memory_mix", mix_);
  return out;
}

std::vector<at::Tensor> SpireDraft::parameters() const {
  std::vector<at::Tensor> out;
  for (auto& [name, t] : named_parameters()) out.push_back(t);
  return out;
}

std::int64_t SpireDraft::num_parameters() const {
  std::int64_t n = 0;
  for (const auto& [name, t] : named_parameters())
    // Without feedback memory the mixing logits stay stored but unread.
    if (config_.feedback || name != "memory_mix") n += t.numel();
  return n;
}

void SpireDraft::set_requires_grad(bool on) {
  for (auto& t : parameters()) t.requires_grad_(on);
  if (on) {
    packed_.clear();  // packed again from the trained weights
    packed_lm_head_.reset();
  }
}

void SpireDraft::save(const std::filesystem::path& dir, DType storage) const {
  if (storage != DType::kF32 && storage != DType::kF16 && storage != DType::kBF16)
    throw InvalidArgumentError(fmt::format("SpireDraft::save: weights are stored as f32, f16 or bf16, not {}",
                                           dtype_name(storage)));
  std::filesystem::create_directories(dir);
  std::vector<at::Tensor> keep;
  std::vector<io::NamedTensor> tensors;
  for (const auto& [name, t] : named_parameters()) {
    // The mixing weights are a handful of logits: kept exact.
    keep.push_back(t.detach().to(name == "memory_mix" ? at::kFloat : scalar_type_of(storage)).contiguous());
    tensors.emplace_back(name, view_of(keep.back()));
  }
  io::save_safetensors(dir / kWeightsFile, tensors, {{"format", "pt"}});
  nlohmann::json j;
  j["layers"] = config_.layers;
  j["first_layer"] = config_.first_layer;
  j["sink"] = config_.sink;
  j["window"] = config_.window;
  j["feedback"] = config_.feedback;
  j["target_memory"] = config_.target_memory;
  j["pruned_init"] = config_.pruned_init;
  j["target_vocab_size"] = config_.target.vocab_size;
  j["target_hidden_size"] = config_.target.hidden_size;
  j["target_layers"] = config_.target.num_hidden_layers;
  j["target_head_dim"] = config_.target.head_dim;
  io::write_text_atomically(dir / kConfigFile, j.dump(1) + "\n");
}

SpireDraft SpireDraft::load(const std::filesystem::path& dir, const LlamaModel& target) {
  const auto cfg_path = dir / kConfigFile;
  std::ifstream f(cfg_path);
  if (!f) throw ModelLoadError(fmt::format("{}: cannot open the SPIRe draft's config", cfg_path.string()));
  SpireConfig config;
  try {
    const auto j = nlohmann::json::parse(f);
    config.layers = j.at("layers").get<std::int64_t>();
    config.first_layer = j.at("first_layer").get<std::int64_t>();
    config.sink = j.at("sink").get<std::int64_t>();
    config.window = j.at("window").get<std::int64_t>();
    config.feedback = j.at("feedback").get<bool>();
    config.target_memory = j.at("target_memory").get<bool>();
    config.pruned_init = j.at("pruned_init").get<bool>();
    config.target.vocab_size = j.at("target_vocab_size").get<std::int64_t>();
    config.target.hidden_size = j.at("target_hidden_size").get<std::int64_t>();
    config.target.num_hidden_layers = j.at("target_layers").get<std::int64_t>();
    config.target.head_dim = j.at("target_head_dim").get<std::int64_t>();
  } catch (const nlohmann::json::exception& e) {
    throw ModelLoadError(fmt::format("{}: {}", cfg_path.string(), e.what()));
  }
  SpireDraft m(std::move(config), target);
  const io::SafetensorsFile ckpt(dir / kWeightsFile);
  const auto& c = m.config_.target;
  CheckedTensors fetch(ckpt, dir, kConfigFile);
  const auto d = c.hidden_size, q_dim = c.num_attention_heads * c.head_dim, kv_dim = c.num_key_value_heads * c.head_dim,
             ffn = c.intermediate_size;
  for (std::int64_t i = 0; i < m.config_.layers; ++i)
    m.layers_.push_back({fetch(layer_name(i, "input_layernorm.weight"), {d}),
                         fetch(layer_name(i, "self_attn.q_proj.weight"), {q_dim, d}),
                         fetch(layer_name(i, "self_attn.k_proj.weight"), {kv_dim, d}),
                         fetch(layer_name(i, "self_attn.v_proj.weight"), {kv_dim, d}),
                         fetch(layer_name(i, "self_attn.o_proj.weight"), {d, q_dim}),
                         fetch(layer_name(i, "post_attention_layernorm.weight"), {d}),
                         fetch(layer_name(i, "mlp.gate_proj.weight"), {ffn, d}),
                         fetch(layer_name(i, "mlp.up_proj.weight"), {ffn, d}),
                         fetch(layer_name(i, "mlp.down_proj.weight"), {d, ffn})});
  m.norm_ = fetch("norm.weight", {d});
  m.mix_ = fetch("memory_mix", {m.config_.layers, m.config_.layers + 1});
  if (fetch.used() != static_cast<std::int64_t>(ckpt.num_tensors()))
    throw ModelLoadError(fmt::format("{}: {} tensors, a SPIRe draft of {} layers has {}", dir.string(),
                                     ckpt.num_tensors(), m.config_.layers, fetch.used()));
  return m;
}

// ---- training ------------------------------------------------------------------

std::pair<at::Tensor, at::Tensor> SpireDraft::target_inputs(const LlamaModel& target, const at::Tensor& tokens,
                                                            at::ScalarType matmul_dtype) const {
  at::NoGradGuard no_grad;
  std::vector<at::Tensor> outputs;
  auto logits = target.forward_train(tokens, nullptr, matmul_dtype, &outputs);
  std::vector<at::Tensor> memory;
  for (std::int64_t i = 0; i < config_.layers; ++i)
    memory.push_back(outputs[static_cast<std::size_t>(config_.first_layer - 1 + i)]);
  return {logits, at::cat(memory, -1)};
}

SpireTrainOutput SpireDraft::forward_train(const at::Tensor& tokens, const at::Tensor& target_memory,
                                           const at::Tensor& target_logits, std::int64_t k, double omega,
                                           bool distill, at::ScalarType dt) const {
  const auto& c = config_.target;
  if (tokens.dim() != 2) throw ShapeError(fmt::format("SpireDraft::forward_train: tokens are [B, T], got {}-d", tokens.dim()));
  const auto B = tokens.size(0), T = tokens.size(1), D = c.hidden_size, H = c.num_attention_heads,
             KVH = c.num_key_value_heads, hd = c.head_dim, V = c.vocab_size, n = config_.layers;
  if (k < 1 || T % k != 0)
    throw InvalidArgumentError(fmt::format("SpireDraft::forward_train: {} positions are not rollouts of k = {}", T, k));
  if (T > c.max_position_embeddings)
    throw ShapeError(fmt::format("SpireDraft::forward_train: {} positions exceed the context {}", T,
                                 c.max_position_embeddings));
  if (config_.target_memory && (target_memory.dim() != 3 || target_memory.size(0) != B || target_memory.size(1) != T ||
                                target_memory.size(2) != n * D))
    throw ShapeError(fmt::format("SpireDraft::forward_train: target memory must be [{}, {}, {}]", B, T, n * D));
  if (target_logits.dim() != 3 || target_logits.size(0) != B || target_logits.size(1) != T || target_logits.size(2) != V)
    throw ShapeError(fmt::format("SpireDraft::forward_train: target logits must be [{}, {}, {}]", B, T, V));
  if (!(omega >= 0.0 && omega <= 1.0))
    throw InvalidArgumentError(fmt::format("SpireDraft::forward_train: omega {} must be in [0, 1]", omega));
  const auto nb = T / k;
  const double scale = 1.0 / std::sqrt(static_cast<double>(hd));
  const auto eps = c.rms_norm_eps;
  const auto heads = [&](const at::Tensor& x, std::int64_t h) { return x.view({B, x.size(1), h, hd}); };
  const auto spread = [&](at::Tensor kv) {  // [B, kvh, n, hd] -> one copy per query head
    return KVH == H ? kv : kv.repeat_interleave(H / KVH, 1);
  };

  // Past memories (the target's, or the embeddings): keys and values of
  // every position, per layer, [B, H, T, hd].
  const auto positions = at::arange(T, at::kLong);
  std::vector<at::Tensor> past_k, past_v;
  const auto emb = config_.target_memory ? at::Tensor() : at::embedding(embed_, tokens);
  for (std::int64_t i = 0; i < n; ++i) {
    const auto& l = layers_[static_cast<std::size_t>(i)];
    const auto m = config_.target_memory ? target_memory.narrow(-1, i * D, D) : emb;
    const auto a = rms_norm(m, l.attn_norm, eps);
    past_k.push_back(spread(rope(heads(linear(a, l.wk, dt), KVH), positions, rope_cos_, rope_sin_).permute({0, 2, 1, 3})));
    past_v.push_back(spread(heads(linear(a, l.wv, dt), KVH).permute({0, 2, 1, 3})));
  }
  // The sink + window mask of a query at t over keys at p (p < t).
  const auto sees = [&](const at::Tensor& p, const at::Tensor& t) {
    auto m = p < t;
    if (config_.window > 0) m = m & ((p < config_.sink) | (p >= t - config_.window));
    return m;
  };
  const auto starts = (at::arange(nb, at::kLong) * k).unsqueeze(1);  // [nb, 1]
  std::vector<std::vector<at::Tensor>> own_k(static_cast<std::size_t>(n)), own_v(static_cast<std::size_t>(n));
  const auto mix = at::softmax(mix_, -1);  // [n, n + 1]
  std::vector<at::Tensor> pass_logits;
  for (std::int64_t j = 0; j < k; ++j) {
    const auto q_pos = starts.squeeze(1) + j;  // [nb]
    const auto t = q_pos.unsqueeze(1);          // [nb, 1]
    // Past memories of positions before the rollout; its own of b k .. t - 1.
    const auto past_mask = sees(positions.unsqueeze(0), t) & (positions.unsqueeze(0) < starts);  // [nb, T]
    std::vector<at::Tensor> own_masks;
    for (std::int64_t jj = 0; jj < j; ++jj) own_masks.push_back(sees(starts + jj, t));  // [nb, 1]
    auto any = past_mask.any(-1, /*keepdim=*/true);
    if (j > 0) any = at::ones_like(any);
    const auto past_block = past_mask.logical_not().view({1, 1, nb, T});
    at::Tensor x = at::embedding(embed_, tokens.index_select(1, q_pos));  // [B, nb, D]
    std::vector<at::Tensor> xs{x};
    for (std::int64_t i = 0; i < n; ++i) {
      const auto& l = layers_[static_cast<std::size_t>(i)];
      const auto a = rms_norm(x, l.attn_norm, eps);
      const auto q = rope(heads(linear(a, l.wq, dt), H), q_pos, rope_cos_, rope_sin_).permute({0, 2, 1, 3});  // [B, H, nb, hd]
      std::vector<at::Tensor> scores{(at::matmul(q, past_k[static_cast<std::size_t>(i)].transpose(-2, -1)) * scale)
                                         .masked_fill(past_block, -1e30)};
      for (std::int64_t jj = 0; jj < j; ++jj)
        scores.push_back(((q * own_k[static_cast<std::size_t>(i)][static_cast<std::size_t>(jj)]).sum(-1, true) * scale)
                             .masked_fill(own_masks[static_cast<std::size_t>(jj)].logical_not().view({1, 1, nb, 1}), -1e30));
      // A query that sees nothing (position 0) attends to nothing.
      const auto p = at::softmax(at::cat(scores, -1), -1) * any.view({1, 1, nb, 1}).to(at::kFloat);
      auto out = at::matmul(p.narrow(-1, 0, T), past_v[static_cast<std::size_t>(i)]);  // [B, H, nb, hd]
      for (std::int64_t jj = 0; jj < j; ++jj)
        out = out + p.narrow(-1, T + jj, 1) * own_v[static_cast<std::size_t>(i)][static_cast<std::size_t>(jj)];
      x = x + linear(out.permute({0, 2, 1, 3}).reshape({B, nb, H * hd}), l.wo, dt);
      const auto mm = rms_norm(x, l.mlp_norm, eps);
      x = x + linear(at::silu(linear(mm, l.w_gate, dt)) * linear(mm, l.w_up, dt), l.w_down, dt);
      xs.push_back(x);
    }
    pass_logits.push_back(linear(rms_norm(x, norm_, eps), lm_head_, dt));  // [B, nb, V]
    if (j + 1 == k) break;
    // This pass's memories, seen by the rollout's later passes.
    for (std::int64_t i = 0; i < n; ++i) {
      const auto& l = layers_[static_cast<std::size_t>(i)];
      at::Tensor m;
      if (config_.feedback) {
        m = xs[0] * mix[i][0];
        for (std::int64_t li = 1; li <= n; ++li) m = m + xs[static_cast<std::size_t>(li)] * mix[i][li];
      } else {
        m = xs[static_cast<std::size_t>(i)];
      }
      const auto a = rms_norm(m, l.attn_norm, eps);
      own_k[static_cast<std::size_t>(i)].push_back(
          spread(rope(heads(linear(a, l.wk, dt), KVH), q_pos, rope_cos_, rope_sin_).permute({0, 2, 1, 3})));
      own_v[static_cast<std::size_t>(i)].push_back(spread(heads(linear(a, l.wv, dt), KVH).permute({0, 2, 1, 3})));
    }
  }

  SpireTrainOutput out;
  out.logits = at::stack(pass_logits, 2).reshape({B, T, V});  // pass j of rollout b is position b k + j
  const auto log_q = at::log_softmax(out.logits, -1);
  at::Tensor p_target;
  {
    at::NoGradGuard no_grad;
    p_target = at::softmax(target_logits, -1);
  }
  const auto accept = at::minimum(p_target, log_q.exp()).sum(-1);  // [B, T]
  out.alpha = accept.mean();
  if (distill) {
    out.ce = -(p_target * log_q).sum(-1).mean();
  } else {  // the data's next token; the last position has none
    out.ce = -log_q.narrow(1, 0, T - 1).gather(-1, tokens.narrow(1, 1, T - 1).unsqueeze(-1)).mean();
  }
  out.loss = omega == 1.0 ? omega * out.ce : omega * out.ce - (1.0 - omega) * out.alpha;
  {
    at::NoGradGuard no_grad;
    const auto agree = (out.logits.argmax(-1) == target_logits.argmax(-1)).to(at::kFloat).view({B, nb, k});
    const auto acc = accept.detach().view({B, nb, k});
    for (std::int64_t j = 0; j < k; ++j) {
      out.top1.push_back(agree.select(2, j).mean().item<double>());
      out.acceptance.push_back(acc.select(2, j).mean().item<double>());
    }
  }
  return out;
}

// ---- inference -------------------------------------------------------------------

std::int64_t SpireDraft::slot_floats() const {
  const auto& c = config_.target;
  return config_.layers * 2 * c.num_key_value_heads * c.head_dim;
}

bool SpireDraft::visible(std::int64_t p, std::int64_t t) const {
  return p < t && (config_.window == 0 || p < config_.sink || p >= t - config_.window);
}

void SpireDraft::pack() {
  if (!packed_.empty()) return;
  if (!config_.target_memory)
    throw UnsupportedError("SpireDraft: a draft trained on embedding memories (an ablation) does not draft here");
  at::NoGradGuard no_grad;
  const auto t = inference_dtype_;
  for (const auto& l : layers_)
    packed_.push_back({PackedLinear(l.wq.detach(), t), PackedLinear(at::cat({l.wk, l.wv}, 0).detach(), t),
                       PackedLinear(l.wo.detach(), t), PackedLinear(at::cat({l.w_gate, l.w_up}, 0).detach(), t),
                       PackedLinear(l.w_down.detach(), t)});
  packed_lm_head_ = std::make_unique<PackedLinear>(lm_head_, t);
}

void SpireDraft::set_inference_dtype(DType dtype) {
  if (dtype != DType::kF32 && dtype != DType::kBF16)
    throw InvalidArgumentError(fmt::format("SpireDraft: inference weights are f32 or bf16, not {}", dtype_name(dtype)));
  if (dtype == inference_dtype_) return;
  inference_dtype_ = dtype;
  packed_.clear();
  packed_lm_head_.reset();
}

void SpireDraft::open(std::int32_t seq) { seqs_[seq] = Sequence{}; }

void SpireDraft::close(std::int32_t seq) {
  sequence(seq);
  seqs_.erase(seq);
}

SpireDraft::Sequence& SpireDraft::sequence(std::int32_t seq) {
  return const_cast<Sequence&>(std::as_const(*this).sequence(seq));
}

const SpireDraft::Sequence& SpireDraft::sequence(std::int32_t seq) const {
  const auto it = seqs_.find(seq);
  if (it == seqs_.end()) throw InvalidArgumentError(fmt::format("SpireDraft: sequence {} is not open", seq));
  return it->second;
}

std::int64_t SpireDraft::committed(std::int32_t seq) const { return sequence(seq).length; }
std::int64_t SpireDraft::memory_slots(std::int32_t seq) const {
  return static_cast<std::int64_t>(sequence(seq).pos.size());
}

void SpireDraft::append_memories(std::span<Sequence* const> dests, const float* m,
                                 const std::int64_t* positions) const {
  const auto& c = config_.target;
  const auto n = static_cast<std::int64_t>(dests.size());
  const auto D = c.hidden_size, KVH = c.num_key_value_heads, hd = c.head_dim, L = config_.layers;
  const auto kv_width = 2 * KVH * hd, sf = slot_floats();
  std::vector<std::int64_t> slot(static_cast<std::size_t>(n));
  for (std::int64_t r = 0; r < n; ++r) {
    Sequence& s = *dests[static_cast<std::size_t>(r)];
    slot[static_cast<std::size_t>(r)] = static_cast<std::int64_t>(s.pos.size());
    s.pos.push_back(positions[r]);
    s.kv.resize(s.pos.size() * static_cast<std::size_t>(sf));
  }
  // Each layer's keys and values of all rows in one product.
  std::vector<float> a(static_cast<std::size_t>(n * D)), kv(static_cast<std::size_t>(n * kv_width));
  for (std::int64_t l = 0; l < L; ++l) {
    const auto& layer = layers_[static_cast<std::size_t>(l)];
    for (std::int64_t r = 0; r < n; ++r)
      rms_norm(m + r * L * D + l * D, 1, D, layer.attn_norm.data_ptr<float>(), static_cast<float>(c.rms_norm_eps),
               a.data() + r * D);
    packed_[static_cast<std::size_t>(l)].kv.forward(a.data(), n, kv.data());
    for (std::int64_t r = 0; r < n; ++r) {
      float* out = dests[static_cast<std::size_t>(r)]->kv.data() + slot[static_cast<std::size_t>(r)] * sf + l * kv_width;
      const float* src = kv.data() + r * kv_width;
      const float* cos = rope_cos_.data_ptr<float>() + positions[r] * hd;
      const float* sin = rope_sin_.data_ptr<float>() + positions[r] * hd;
      for (std::int64_t g = 0; g < KVH; ++g) rope_head(src + g * hd, cos, sin, hd, out + g * hd);
      std::copy_n(src + KVH * hd, KVH * hd, out + KVH * hd);
    }
  }
}

void SpireDraft::remember(std::int32_t seq, std::span<const float> rows, std::int64_t n) {
  auto& s = sequence(seq);
  const auto width = config_.layers * config_.target.hidden_size;
  if (n < 0 || static_cast<std::int64_t>(rows.size()) != n * width)
    throw ShapeError(fmt::format("SpireDraft::remember: {} floats are not {} memory rows of {}", rows.size(), n, width));
  if (s.length + n > max_context())
    throw ShapeError(fmt::format("SpireDraft::remember: positions up to {} exceed the context {}", s.length + n,
                                 max_context()));
  pack();
  // Drop the staged memories: the committed ones are the target's.
  const auto kept = static_cast<std::int64_t>(s.pos.size()) - s.staged;
  s.pos.resize(static_cast<std::size_t>(kept));
  s.kv.resize(static_cast<std::size_t>(kept * slot_floats()));
  s.staged = 0;
  if (n == 0) return;
  std::vector<std::int64_t> positions(static_cast<std::size_t>(n));
  for (std::int64_t i = 0; i < n; ++i) positions[static_cast<std::size_t>(i)] = s.length + i;
  const std::vector<Sequence*> dests(static_cast<std::size_t>(n), &s);
  append_memories(dests, rows.data(), positions.data());
  s.length += n;
  if (config_.window == 0) return;
  // Evict what no later step (at t >= length) can see.
  const auto sf = slot_floats();
  std::size_t w = 0;
  for (std::size_t r = 0; r < s.pos.size(); ++r) {
    const auto p = s.pos[r];
    if (p >= config_.sink && p < s.length - config_.window) continue;
    if (w != r) {
      s.pos[w] = p;
      std::copy_n(s.kv.data() + static_cast<std::int64_t>(r) * sf, sf, s.kv.data() + static_cast<std::int64_t>(w) * sf);
    }
    ++w;
  }
  s.pos.resize(w);
  s.kv.resize(w * static_cast<std::size_t>(sf));
}

void SpireDraft::step(std::span<const std::int32_t> seqs, std::span<const TokenId> tokens,
                      std::span<const std::int64_t> positions, std::span<float> out) {
  const auto& c = config_.target;
  const auto S = static_cast<std::int64_t>(seqs.size());
  const auto D = c.hidden_size, H = c.num_attention_heads, KVH = c.num_key_value_heads, hd = c.head_dim,
             F = c.intermediate_size, V = c.vocab_size, L = config_.layers;
  if (static_cast<std::int64_t>(tokens.size()) != S || static_cast<std::int64_t>(positions.size()) != S ||
      static_cast<std::int64_t>(out.size()) != S * V)
    throw ShapeError(fmt::format("SpireDraft::step: {} sequences, {} tokens, {} positions and {} logits (of {} each)",
                                 S, tokens.size(), positions.size(), out.size(), V));
  std::vector<Sequence*> rows(static_cast<std::size_t>(S));
  for (std::int64_t r = 0; r < S; ++r) {
    auto& s = sequence(seqs[static_cast<std::size_t>(r)]);
    const std::int64_t t = positions[static_cast<std::size_t>(r)], tok = tokens[static_cast<std::size_t>(r)];
    if (t != s.length + s.staged)
      throw InvalidArgumentError(fmt::format("SpireDraft::step: sequence {} drafts at position {}, not {} (committed "
                                             "{} + staged {})",
                                             seqs[static_cast<std::size_t>(r)], t, s.length + s.staged, s.length,
                                             s.staged));
    if (t >= max_context())
      throw ShapeError(fmt::format("SpireDraft::step: position {} is outside the context {}", t, max_context()));
    if (tok < 0 || tok >= V) throw ShapeError(fmt::format("SpireDraft::step: token {} outside the vocabulary {}", tok, V));
    for (std::int64_t q = 0; q < r; ++q)
      if (rows[static_cast<std::size_t>(q)] == &s)
        throw InvalidArgumentError(fmt::format("SpireDraft::step: sequence {} twice in one step", seqs[static_cast<std::size_t>(r)]));
    rows[static_cast<std::size_t>(r)] = &s;
  }
  if (S == 0) return;
  pack();
  const float eps = static_cast<float>(c.rms_norm_eps);
  const float scale = 1.0f / std::sqrt(static_cast<float>(hd));
  const auto kv_width = 2 * KVH * hd, sf = slot_floats(), group = H / KVH;
  // x^0 .. x^L of every row, side by side: the feedback memories mix them.
  std::vector<float> xs(static_cast<std::size_t>((L + 1) * S * D));
  const float* embed = embed_.data_ptr<float>();
  for (std::int64_t r = 0; r < S; ++r) std::copy_n(embed + tokens[static_cast<std::size_t>(r)] * D, D, xs.data() + r * D);
  std::vector<float> x(xs.begin(), xs.begin() + S * D), a(static_cast<std::size_t>(S * D)),
      q(static_cast<std::size_t>(S * H * hd)), attn(static_cast<std::size_t>(S * H * hd)),
      gu(static_cast<std::size_t>(S * 2 * F));
  for (std::int64_t l = 0; l < L; ++l) {
    const auto& layer = layers_[static_cast<std::size_t>(l)];
    const auto& p = packed_[static_cast<std::size_t>(l)];
    rms_norm(x.data(), S, D, layer.attn_norm.data_ptr<float>(), eps, a.data());
    p.q.forward(a.data(), S, q.data());
    // The forward's thread team (as LlamaModel's layers), not OpenMP: an
    // OpenMP team spinning after its region would take the cores from the
    // team's helpers in the products that follow.
    parallel_for(S, [&](std::int64_t r) {
      thread_local std::vector<float> rotated, w;
      rotated.resize(static_cast<std::size_t>(hd));
      {
        const Sequence& s = *rows[static_cast<std::size_t>(r)];
        const auto t = positions[static_cast<std::size_t>(r)];
        const float* cos = rope_cos_.data_ptr<float>() + t * hd;
        const float* sin = rope_sin_.data_ptr<float>() + t * hd;
        const auto slots = static_cast<std::int64_t>(s.pos.size());
        w.resize(static_cast<std::size_t>(slots));
        for (std::int64_t h = 0; h < H; ++h) {
          rope_head(q.data() + (r * H + h) * hd, cos, sin, hd, rotated.data());
          const auto g = h / group;
          float* o = attn.data() + (r * H + h) * hd;
          std::fill_n(o, hd, 0.0f);
          float top = -std::numeric_limits<float>::infinity();
          for (std::int64_t j = 0; j < slots; ++j) {
            if (!visible(s.pos[static_cast<std::size_t>(j)], t)) {
              w[static_cast<std::size_t>(j)] = -std::numeric_limits<float>::infinity();
              continue;
            }
            const float* key = s.kv.data() + j * sf + l * kv_width + g * hd;
            const float dot = dot_product(rotated.data(), key, hd);
            w[static_cast<std::size_t>(j)] = dot * scale;
            top = std::max(top, dot * scale);
          }
          if (top == -std::numeric_limits<float>::infinity()) continue;  // sees nothing: attends to nothing
          float sum = 0.0f;
          for (auto& v : w) {
            v = std::exp(v - top);  // exp(-inf) = 0 for the masked slots
            sum += v;
          }
          for (std::int64_t j = 0; j < slots; ++j) {
            const float pj = w[static_cast<std::size_t>(j)] / sum;
            if (pj == 0.0f) continue;
            const float* value = s.kv.data() + j * sf + l * kv_width + KVH * hd + g * hd;
            for (std::int64_t e = 0; e < hd; ++e) o[e] += pj * value[e];
          }
        }
      }
    });
    p.o.forward_add(attn.data(), S, x.data());
    rms_norm(x.data(), S, D, layer.mlp_norm.data_ptr<float>(), eps, a.data());
    p.gate_up.forward(a.data(), S, gu.data());
    const auto act = swiglu_rows(at::from_blob(gu.data(), {S, 2 * F}), F).contiguous();
    p.down.forward_add(act.data_ptr<float>(), S, x.data());
    std::copy(x.begin(), x.end(), xs.begin() + (l + 1) * S * D);
  }
  rms_norm(x.data(), S, D, norm_.data_ptr<float>(), eps, a.data());
  packed_lm_head_->forward(a.data(), S, out.data());
  // Each token's memories, staged: the feedback mix of its activations.
  const auto mix = mixing(mix_);
  std::vector<float> m(static_cast<std::size_t>(S * L * D));
  for (std::int64_t r = 0; r < S; ++r)
    for (std::int64_t i = 0; i < L; ++i) {
      float* mi = m.data() + (r * L + i) * D;
      if (!config_.feedback) {
        std::copy_n(xs.data() + (i * S + r) * D, D, mi);
        continue;
      }
      std::fill_n(mi, D, 0.0f);
      for (std::int64_t li = 0; li <= L; ++li) {
        const float wl = mix[static_cast<std::size_t>(i * (L + 1) + li)];
        const float* xl = xs.data() + (li * S + r) * D;
        for (std::int64_t e = 0; e < D; ++e) mi[e] += wl * xl[e];
      }
    }
  append_memories(rows, m.data(), positions.data());
  for (auto* s : rows) ++s->staged;
}

}  // namespace specdec::torch_backend
