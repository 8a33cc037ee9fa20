#include "specdec/torch/llama_model.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <utility>

#include <fmt/format.h>

#include "checked_tensors.hpp"
#include "kernels.hpp"
#include "specdec/core/error.hpp"
#include "specdec/core/logit_rows.hpp"
#include "specdec/cpu/llama_model.hpp"
#include "specdec/io/safetensors.hpp"
#include "specdec/io/safetensors_checkpoint.hpp"
#include "specdec/torch/tensor_interop.hpp"

namespace specdec::torch_backend {
using namespace kernels;

namespace {

std::string layer_name(std::size_t i, const char* leaf) { return fmt::format("model.layers.{}.{}", i, leaf); }

}  // namespace

// The training forward rotates with the inference model's tables, read in
// place (inference_ lives as long as the tensors).
LlamaModel::LlamaModel(io::LlamaConfig config)
    : config_(std::move(config)),
      inference_(std::make_unique<cpu::LlamaModel>(config_, cpu::rope_tables(config_))) {
  const auto& rope = inference_->rope();
  const std::vector<std::int64_t> shape{config_.max_position_embeddings, config_.head_dim};
  rope_cos_ = at::from_blob(const_cast<float*>(rope.cos.data()), shape);  // never written
  rope_sin_ = at::from_blob(const_cast<float*>(rope.sin.data()), shape);
}

LlamaModel::~LlamaModel() = default;
LlamaModel::LlamaModel(LlamaModel&&) noexcept = default;
LlamaModel& LlamaModel::operator=(LlamaModel&&) noexcept = default;

LlamaModel LlamaModel::random(const io::LlamaConfig& config, std::uint64_t seed) {
  LlamaModel m(config);
  const auto& c = m.config_;
  at::Generator gen = at::detail::createCPUGenerator(seed);
  const auto normal = [&](std::int64_t rows, std::int64_t cols, double sd) {
    return at::normal(0.0, sd, {rows, cols}, gen);
  };
  const double sd = 0.02, out_sd = 0.02 / std::sqrt(2.0 * static_cast<double>(c.num_hidden_layers));
  const auto d = c.hidden_size, q_dim = c.num_attention_heads * c.head_dim, kv_dim = c.num_key_value_heads * c.head_dim;
  m.embed_ = normal(c.vocab_size, d, sd);
  for (std::int64_t i = 0; i < c.num_hidden_layers; ++i) {
    Layer l;
    l.attn_norm = at::ones({d});
    l.wq = normal(q_dim, d, sd);
    l.wk = normal(kv_dim, d, sd);
    l.wv = normal(kv_dim, d, sd);
    l.wo = normal(d, q_dim, out_sd);
    l.mlp_norm = at::ones({d});
    l.w_gate = normal(c.intermediate_size, d, sd);
    l.w_up = normal(c.intermediate_size, d, sd);
    l.w_down = normal(d, c.intermediate_size, out_sd);
    m.layers_.push_back(std::move(l));
  }
  m.final_norm_ = at::ones({d});
  m.lm_head_ = c.tie_word_embeddings ? m.embed_ : normal(c.vocab_size, d, sd);
  return m;
}

std::vector<std::pair<std::string, at::Tensor>> LlamaModel::named_parameters() const {
  std::vector<std::pair<std::string, at::Tensor>> out;
  out.emplace_back("model.embed_tokens.weight", embed_);
  for (std::size_t i = 0; i < layers_.size(); ++i) {
    const auto& l = layers_[i];
    out.emplace_back(layer_name(i, "input_layernorm.weight"), l.attn_norm);
    out.emplace_back(layer_name(i, "self_attn.q_proj.weight"), l.wq);
    out.emplace_back(layer_name(i, "self_attn.k_proj.weight"), l.wk);
    out.emplace_back(layer_name(i, "self_attn.v_proj.weight"), l.wv);
    out.emplace_back(layer_name(i, "self_attn.o_proj.weight"), l.wo);
    out.emplace_back(layer_name(i, "post_attention_layernorm.weight"), l.mlp_norm);
    out.emplace_back(layer_name(i, "mlp.gate_proj.weight"), l.w_gate);
    out.emplace_back(layer_name(i, "mlp.up_proj.weight"), l.w_up);
    out.emplace_back(layer_name(i, "mlp.down_proj.weight"), l.w_down);
  }
  out.emplace_back("model.norm.weight", final_norm_);
  if (!config_.tie_word_embeddings) out.emplace_back("lm_head.weight", lm_head_);
  return out;
}

std::vector<at::Tensor> LlamaModel::parameters() const {
  std::vector<at::Tensor> out;
  for (auto& [name, t] : named_parameters()) out.push_back(t);
  return out;
}

void LlamaModel::set_requires_grad(bool on) {
  for (auto& t : parameters()) t.requires_grad_(on);
  if (on) {  // weights are about to change: the packed copies would go stale
    inference_->drop_weights();
    full_lm_head_.reset();
  }
}

void LlamaModel::pack_for_inference() {
  at::NoGradGuard no_grad;
  const DType t = inference_dtype_;
  const auto floats = [](const at::Tensor& x) {
    const at::Tensor c = x.detach().to(at::kFloat).contiguous();
    return std::vector<float>(c.data_ptr<float>(), c.data_ptr<float>() + c.numel());
  };
  cpu::LlamaWeights w;
  // The embedding rows are read in place (a tensor that shares them keeps them).
  auto embedding = std::make_shared<const at::Tensor>(embed_.detach().contiguous());
  w.embedding =
      std::span<const float>(embedding->data_ptr<float>(), static_cast<std::size_t>(embedding->numel()));
  w.embedding_owner = embedding;
  for (const auto& l : layers_) {
    cpu::LlamaLayerWeights p;
    p.qkv = std::make_unique<PackedLinear>(at::cat({l.wq, l.wk, l.wv}, 0), t);
    p.o = std::make_unique<PackedLinear>(l.wo, t);
    p.gate_up = std::make_unique<PackedLinear>(at::cat({l.w_gate, l.w_up}, 0), t);
    p.down = std::make_unique<PackedLinear>(l.w_down, t);
    p.attn_norm = floats(l.attn_norm);
    p.mlp_norm = floats(l.mlp_norm);
    w.layers.push_back(std::move(p));
  }
  w.final_norm = floats(final_norm_);
  full_lm_head_ = std::make_shared<const PackedLinear>(lm_head_, t);
  w.lm_head = hot_lm_head_ ? std::shared_ptr<const cpu::Linear>(hot_lm_head_) : full_lm_head_;
  inference_->set_weights(std::move(w));
}

void LlamaModel::set_inference_dtype(DType dtype) {
  if (dtype != DType::kF32 && dtype != DType::kBF16)
    throw InvalidArgumentError(fmt::format("LlamaModel: inference weights are f32 or bf16, not {}", dtype_name(dtype)));
  const std::lock_guard lock(*pack_mutex_);
  if (dtype == inference_dtype_) return;
  inference_dtype_ = dtype;
  inference_->drop_weights();  // packed again, in the new precision, by the next forward()
  full_lm_head_.reset();
  if (hot_lm_head_) hot_lm_head_ = hot_lm_head_->repacked(lm_head_, dtype);
}

void LlamaModel::set_hot_lm_head(std::shared_ptr<const HotLmHead> head) {
  if (head && head->vocab_size() != config_.vocab_size)
    throw InvalidArgumentError(fmt::format("LlamaModel::set_hot_lm_head: a head over a vocabulary of {}, the model's "
                                           "is {}",
                                           head->vocab_size(), config_.vocab_size));
  const std::lock_guard lock(*pack_mutex_);
  if (inference_->has_weights())  // checked and swapped in first: nothing changes if it throws
    inference_->set_lm_head(head ? std::shared_ptr<const cpu::Linear>(head) : full_lm_head_);
  hot_lm_head_ = std::move(head);
}

std::int64_t LlamaModel::num_parameters() const {
  std::int64_t n = 0;
  for (const auto& t : parameters()) n += t.numel();
  return n;
}

void LlamaModel::check_tokenizer_vocab(std::int64_t tokenizer_vocab, std::string_view tokenizer_source) const {
  if (tokenizer_vocab != config_.vocab_size)
    throw ShapeError(fmt::format("{}: tokenizer vocabulary size {} differs from the model's vocabulary size {}",
                                 tokenizer_source, tokenizer_vocab, config_.vocab_size));
}

void LlamaModel::save(const std::filesystem::path& dir, DType storage) const {
  if (storage != DType::kF32 && storage != DType::kF16 && storage != DType::kBF16)
    throw InvalidArgumentError(fmt::format("LlamaModel::save: weights are stored as f32, f16 or bf16, not {}",
                                           dtype_name(storage)));
  std::filesystem::create_directories(dir);
  std::vector<at::Tensor> keep;  // converted copies must outlive the views
  std::vector<io::NamedTensor> tensors;
  for (const auto& [name, t] : named_parameters()) {
    keep.push_back(t.detach().to(scalar_type_of(storage)).contiguous());
    tensors.emplace_back(name, view_of(keep.back()));
  }
  io::save_safetensors(dir / "model.safetensors", tensors, {{"format", "pt"}});
  io::LlamaConfig c = config_;
  c.torch_dtype = std::string(storage == DType::kF32 ? "float32" : storage == DType::kF16 ? "float16" : "bfloat16");
  io::save_llama_config(dir / "config.json", c);
}

LlamaModel LlamaModel::load(const std::filesystem::path& dir) {
  LlamaModel m(io::load_llama_config(dir / "config.json"));
  const io::SafetensorsCheckpoint ckpt(dir);
  const auto& c = m.config_;
  CheckedTensors fetch(ckpt, dir, "config.json");
  const auto d = c.hidden_size, q_dim = c.num_attention_heads * c.head_dim, kv_dim = c.num_key_value_heads * c.head_dim;
  m.embed_ = fetch("model.embed_tokens.weight", {c.vocab_size, d});
  for (std::int64_t i = 0; i < c.num_hidden_layers; ++i) {
    const auto li = static_cast<std::size_t>(i);
    Layer l;
    l.attn_norm = fetch(layer_name(li, "input_layernorm.weight"), {d});
    l.wq = fetch(layer_name(li, "self_attn.q_proj.weight"), {q_dim, d});
    l.wk = fetch(layer_name(li, "self_attn.k_proj.weight"), {kv_dim, d});
    l.wv = fetch(layer_name(li, "self_attn.v_proj.weight"), {kv_dim, d});
    l.wo = fetch(layer_name(li, "self_attn.o_proj.weight"), {d, q_dim});
    l.mlp_norm = fetch(layer_name(li, "post_attention_layernorm.weight"), {d});
    l.w_gate = fetch(layer_name(li, "mlp.gate_proj.weight"), {c.intermediate_size, d});
    l.w_up = fetch(layer_name(li, "mlp.up_proj.weight"), {c.intermediate_size, d});
    l.w_down = fetch(layer_name(li, "mlp.down_proj.weight"), {d, c.intermediate_size});
    m.layers_.push_back(std::move(l));
  }
  m.final_norm_ = fetch("model.norm.weight", {d});
  m.lm_head_ = c.tie_word_embeddings ? m.embed_ : fetch("lm_head.weight", {c.vocab_size, d});
  // Anything else is a checkpoint of another architecture: say so rather than
  // run without weights the file meant us to use. (Old exports carry the
  // rotary inv_freq buffers, which are recomputed, not weights.)
  std::int64_t used = fetch.used();
  for (const auto& name : ckpt.names()) {
    if (name.ends_with("rotary_emb.inv_freq")) ++used;
  }
  if (used != static_cast<std::int64_t>(ckpt.num_tensors())) {
    for (const auto& name : ckpt.names()) {
      bool known = name.ends_with("rotary_emb.inv_freq");
      for (const auto& [n, t] : m.named_parameters()) known = known || n == name;
      if (!known)
        throw ModelLoadError(fmt::format("{}: tensor {} is not part of a Llama model with this config", dir.string(),
                                         name));
    }
  }
  return m;
}

void LlamaModel::check_tokens(const at::Tensor& tokens) const {
  if (tokens.numel() == 0) return;
  const auto lo = tokens.min().item<std::int64_t>(), hi = tokens.max().item<std::int64_t>();
  if (lo < 0 || hi >= config_.vocab_size)
    throw ShapeError(fmt::format("LlamaModel: token id {} is outside the vocabulary of {}", lo < 0 ? lo : hi,
                                 config_.vocab_size));
}

at::Tensor LlamaModel::rope(const at::Tensor& x, const at::Tensor& positions) const {
  return kernels::rope(x, positions, rope_cos_, rope_sin_);  // Llama §RoPE with rope_theta
}

at::Tensor LlamaModel::forward_train(const at::Tensor& tokens, at::Tensor* hidden, at::ScalarType matmul_dtype,
                                     std::vector<at::Tensor>* layer_outputs) const {
  if (layer_outputs != nullptr) layer_outputs->clear();
  if (tokens.dim() != 2) throw ShapeError(fmt::format("forward_train: tokens must be [batch, time], got {}-d", tokens.dim()));
  check_tokens(tokens);
  const auto& c = config_;
  const auto b = tokens.size(0), t = tokens.size(1), h = c.num_attention_heads, kvh = c.num_key_value_heads,
             hd = c.head_dim;
  if (t > c.max_position_embeddings)
    throw ShapeError(fmt::format("forward_train: {} tokens exceed max_position_embeddings {}", t,
                                 c.max_position_embeddings));
  const auto positions = at::arange(t, at::kLong);
  const auto causal = at::ones({t, t}, at::kBool).tril();
  const double scale = 1.0 / std::sqrt(static_cast<double>(hd));
  at::Tensor x = at::embedding(embed_, tokens);  // [b, t, d]
  for (const auto& l : layers_) {
    const auto a = rms_norm(x, l.attn_norm, c.rms_norm_eps);
    auto q = rope(kernels::linear(a, l.wq, matmul_dtype).view({b, t, h, hd}), positions).transpose(1, 2);  // [b, h, t, hd]
    auto k = rope(kernels::linear(a, l.wk, matmul_dtype).view({b, t, kvh, hd}), positions).transpose(1, 2);
    auto v = kernels::linear(a, l.wv, matmul_dtype).view({b, t, kvh, hd}).transpose(1, 2);
    if (kvh != h) {  // grouped-query attention: kv head j serves heads j*r .. j*r + r - 1
      k = k.repeat_interleave(h / kvh, 1);
      v = v.repeat_interleave(h / kvh, 1);
    }
    auto scores = at::matmul(q, k.transpose(-2, -1)) * scale;
    scores = scores.masked_fill(causal.logical_not(), -std::numeric_limits<float>::infinity());
    const auto attn = at::matmul(at::softmax(scores, -1), v).transpose(1, 2).reshape({b, t, h * hd});
    x = x + kernels::linear(attn, l.wo, matmul_dtype);
    const auto m = rms_norm(x, l.mlp_norm, c.rms_norm_eps);
    x = x + kernels::linear(at::silu(kernels::linear(m, l.w_gate, matmul_dtype)) * kernels::linear(m, l.w_up, matmul_dtype),
                            l.w_down, matmul_dtype);
    if (layer_outputs != nullptr) layer_outputs->push_back(x);
  }
  const auto out = rms_norm(x, final_norm_, c.rms_norm_eps);
  if (hidden != nullptr) *hidden = out;
  return kernels::linear(out, lm_head_, matmul_dtype);
}

// ---- Model concept -----------------------------------------------------------

void LlamaModel::open(std::int32_t seq, const CachePolicy& policy) {
  inference_->open(seq, policy);
}
void LlamaModel::close(std::int32_t seq) {
  inference_->close(seq);
}
std::int64_t LlamaModel::cached_length(std::int32_t seq) const {
  return inference_->cached_length(seq);
}
std::int64_t LlamaModel::cache_slots(std::int32_t seq) const {
  return inference_->cache_slots(seq);
}

void LlamaModel::forward(const ForwardRequest& request) {
  {
    const std::lock_guard lock(*pack_mutex_);
    if (!inference_->has_weights()) pack_for_inference();
  }
  inference_->forward(request);
}

void LlamaModel::accept(std::int32_t seq, std::span<const std::int32_t> path) {
  inference_->accept(seq, path);
}
void LlamaModel::rollback(std::int32_t seq, std::int64_t length) {
  inference_->rollback(seq, length);
}

}  // namespace specdec::torch_backend
