#include "specdec/torch/llama_model.hpp"

#include <cmath>
#include <cstring>
#include <tuple>
#include <utility>

#include <fmt/format.h>

#include "specdec/core/error.hpp"
#include "specdec/core/logit_rows.hpp"
#include "specdec/io/safetensors.hpp"
#include "specdec/io/safetensors_checkpoint.hpp"
#include "specdec/torch/tensor_interop.hpp"
#include "kernels.hpp"

namespace specdec::torch_backend {
using namespace kernels;

namespace {

std::string layer_name(std::size_t i, const char* leaf) { return fmt::format("model.layers.{}.{}", i, leaf); }

}  // namespace

LlamaModel::LlamaModel(io::LlamaConfig config) : config_(std::move(config)) {
  std::tie(rope_cos_, rope_sin_) = rope_tables(config_);
}

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
    packed_.clear();
    packed_lm_head_.reset();
  }
}

void LlamaModel::pack_for_inference() {
  at::NoGradGuard no_grad;
  packed_.clear();
  for (const auto& l : layers_)
    packed_.push_back(PackedLayer{PackedLinear(at::cat({l.wq, l.wk, l.wv}, 0)), PackedLinear(l.wo),
                                  PackedLinear(at::cat({l.w_gate, l.w_up}, 0)), PackedLinear(l.w_down)});
  packed_lm_head_ = std::make_unique<PackedLinear>(lm_head_);
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
  std::int64_t used = 0;
  const auto fetch = [&](const std::string& name, std::vector<std::int64_t> shape) {
    if (!ckpt.contains(name))
      throw ModelLoadError(fmt::format("{}: tensor {} is missing", dir.string(), name));
    const TensorView v = ckpt.view(name);
    std::vector<std::int64_t> got(v.shape_data(), v.shape_data() + v.ndim());
    if (got != shape)
      throw ModelLoadError(fmt::format("{}: tensor {} has shape [{}], config.json implies [{}]", dir.string(), name,
                                       fmt::join(got, ", "), fmt::join(shape, ", ")));
    ++used;
    return tensor_of(v).to(at::kFloat).clone();  // own the memory; the mapping closes
  };
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

at::Tensor LlamaModel::forward_train(const at::Tensor& tokens, at::Tensor* hidden) const {
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
    auto q = rope(at::matmul(a, l.wq.t()).view({b, t, h, hd}), positions).transpose(1, 2);  // [b, h, t, hd]
    auto k = rope(at::matmul(a, l.wk.t()).view({b, t, kvh, hd}), positions).transpose(1, 2);
    auto v = at::matmul(a, l.wv.t()).view({b, t, kvh, hd}).transpose(1, 2);
    if (kvh != h) {  // grouped-query attention: kv head j serves heads j*r .. j*r + r - 1
      k = k.repeat_interleave(h / kvh, 1);
      v = v.repeat_interleave(h / kvh, 1);
    }
    auto scores = at::matmul(q, k.transpose(-2, -1)) * scale;
    scores = scores.masked_fill(causal.logical_not(), -std::numeric_limits<float>::infinity());
    const auto attn = at::matmul(at::softmax(scores, -1), v).transpose(1, 2).reshape({b, t, h * hd});
    x = x + at::matmul(attn, l.wo.t());
    const auto m = rms_norm(x, l.mlp_norm, c.rms_norm_eps);
    x = x + at::matmul(at::silu(at::matmul(m, l.w_gate.t())) * at::matmul(m, l.w_up.t()), l.w_down.t());
  }
  const auto out = rms_norm(x, final_norm_, c.rms_norm_eps);
  if (hidden != nullptr) *hidden = out;
  return at::matmul(out, lm_head_.t());
}

// ---- Model concept -----------------------------------------------------------

void LlamaModel::open(std::int32_t seq, const CachePolicy& policy) {
  if (policy.kind != CachePolicy::Kind::kDense)
    throw UnsupportedError(fmt::format(
        "LlamaModel::open: sequence {}: only dense caches are implemented (a sink + window cache was asked for)", seq));
  const auto it = caches_.find(seq);
  if (it != caches_.end()) {  // reopened: the same buffers, emptied
    it->second.length = it->second.staged = 0;
    return;
  }
  // A closed sequence's buffers are reused. They need no zeroing: attention
  // reads only the slots a forward wrote.
  Cache cache;
  if (!spare_caches_.empty()) {
    cache = std::move(spare_caches_.back());
    spare_caches_.pop_back();
  } else {
    const auto& c = config_;
    cache.k = at::empty({c.num_hidden_layers, c.num_key_value_heads, c.max_position_embeddings, c.head_dim});
    cache.v = at::empty_like(cache.k);
  }
  cache.length = cache.staged = 0;
  caches_[seq] = std::move(cache);
}

void LlamaModel::close(std::int32_t seq) {
  const auto it = caches_.find(seq);
  if (it == caches_.end()) throw InvalidArgumentError(fmt::format("LlamaModel::close: sequence {} is not open", seq));
  spare_caches_.push_back(std::move(it->second));
  caches_.erase(it);
}

const LlamaModel::Cache& LlamaModel::cache(std::int32_t seq) const {
  const auto it = caches_.find(seq);
  if (it == caches_.end())
    throw InvalidArgumentError(fmt::format("LlamaModel: sequence {} is not open (open)", seq));
  return it->second;
}
LlamaModel::Cache& LlamaModel::cache(std::int32_t seq) {
  return const_cast<Cache&>(std::as_const(*this).cache(seq));  // the usual const/non-const pair
}

std::int64_t LlamaModel::cached_length(std::int32_t seq) const { return cache(seq).length; }

void LlamaModel::forward(const ForwardRequest& request) {
  at::NoGradGuard no_grad;
  const auto& c = config_;
  const auto h = c.num_attention_heads, kvh = c.num_key_value_heads, hd = c.head_dim;
  // Gather every sequence's new tokens: projections and MLPs run as one GEMM.
  std::vector<std::int64_t> tokens, positions, offsets{0};
  std::vector<std::int64_t> staged_before;  // tokens staged ahead of the new ones (extend_staged)
  std::vector<at::Tensor> masks;  // [n, staged + n] bool per sequence: true = blocked
  std::vector<bool> all_visible;
  for (const auto& s : request.sequences) {
    auto& cache_s = cache(s.seq_id);
    const auto n = static_cast<std::int64_t>(s.tokens.size());
    const auto before = s.extend_staged ? cache_s.staged : 0;
    if (static_cast<std::int64_t>(s.positions.size()) != n)
      throw ShapeError(fmt::format("LlamaModel::forward: sequence {} has {} tokens but {} positions", s.seq_id, n,
                                   s.positions.size()));
    if (!s.mask.empty() && (s.mask.size != before + n || s.mask.device.kind != DeviceKind::kCPU))
      throw ShapeError(fmt::format(
          "LlamaModel::forward: sequence {} has {} staged and {} new tokens but a {}x{} mask (a host mask is needed)",
          s.seq_id, before, n, s.mask.size, s.mask.size));
    if (cache_s.length + before + n > c.max_position_embeddings)
      throw ShapeError(fmt::format("LlamaModel::forward: sequence {} would hold {} tokens, the context is {}",
                                   s.seq_id, cache_s.length + before + n, c.max_position_embeddings));
    tokens.insert(tokens.end(), s.tokens.begin(), s.tokens.end());
    positions.insert(positions.end(), s.positions.begin(), s.positions.end());
    offsets.push_back(offsets.back() + n);
    staged_before.push_back(before);
    // Which staged + new columns each new token may not see (the committed
    // prefix is always visible). Built on the host; a tensor only when some
    // entry is blocked, so decode steps make none.
    const auto span = before + n;
    std::vector<std::uint8_t> blocked(static_cast<std::size_t>(n * span), 0);
    bool any_blocked = false;
    for (std::int64_t i = 0; i < n; ++i)
      for (std::int64_t j = 0; j < span; ++j) {
        const bool visible = !s.mask.empty()
                                 ? s.mask.test(static_cast<std::int32_t>(before + i), static_cast<std::int32_t>(j))
                                 : j <= before + i;  // no mask: all staged tokens, causal among the new
        blocked[static_cast<std::size_t>(i * span + j)] = !visible;
        any_blocked |= !visible;
      }
    all_visible.push_back(!any_blocked);
    at::Tensor blocked_t;
    if (any_blocked) {  // bool tensors are one byte per entry, 0 or 1
      blocked_t = at::empty({n, span}, at::kBool);
      std::memcpy(blocked_t.data_ptr<bool>(), blocked.data(), blocked.size());
    }
    masks.push_back(blocked_t);
  }
  for (const auto t : tokens)
    if (t < 0 || t >= c.vocab_size)
      throw ShapeError(fmt::format("LlamaModel: token id {} is outside the vocabulary of {}", t, c.vocab_size));
  const auto token_t = at::tensor(tokens, at::kLong);
  for (const auto p : positions)
    if (p < 0 || p >= c.max_position_embeddings)
      throw ShapeError(fmt::format("LlamaModel::forward: position {} is outside [0, {})", p,
                                   c.max_position_embeddings));
  const double scale = 1.0 / std::sqrt(static_cast<double>(hd));
  const auto total = static_cast<std::int64_t>(tokens.size());
  // The outputs are checked before anything is staged.
  float* logits_out =
      request.logits.empty() ? nullptr : host_output(request.logits, total, c.vocab_size, "LlamaModel::forward (logits)");
  float* hidden_out =
      request.hidden.empty() ? nullptr : host_output(request.hidden, total, c.hidden_size, "LlamaModel::forward (hidden)");
  const auto num_layers = static_cast<std::int32_t>(layers_.size());
  if (hidden_out != nullptr && (request.hidden_layer >= num_layers || request.hidden_layer < -1))
    throw InvalidArgumentError(fmt::format("LlamaModel::forward: hidden_layer {} of a {}-layer model",
                                           request.hidden_layer, layers_.size()));
  {
    const std::lock_guard lock(*pack_mutex_);
    if (packed_.empty()) pack_for_inference();
  }
  const auto q_dim = h * hd, kv_dim = kvh * hd, ffn = c.intermediate_size;
  const auto rep = h / kvh;
  at::Tensor x = at::embedding(embed_, token_t);  // [total, d]
  at::Tensor layer_hidden;
  auto q_heads = at::empty({h, total, hd});  // rotated queries, head-major for attention
  auto attn = at::empty({total, h * hd});
  const float* cos_table = rope_cos_.data_ptr<float>();
  const float* sin_table = rope_sin_.data_ptr<float>();
  for (std::size_t li = 0; li < layers_.size(); ++li) {
    const auto& l = layers_[li];
    const auto& p = packed_[li];
    const auto layer = static_cast<std::int64_t>(li);
    const auto qkv = p.qkv(rms_norm_rows(x, l.attn_norm, c.rms_norm_eps));  // [total, q_dim + 2 kv_dim]
    // RoPE on q and k in one pass; k and v go straight into each sequence's
    // cache, staged after its committed prefix.
    const float* qkv_p = qkv.data_ptr<float>();
    float* q_p = q_heads.data_ptr<float>();
    for (std::size_t si = 0; si < request.sequences.size(); ++si) {
      auto& cs = cache(request.sequences[si].seq_id);
      float* k_cache = cs.k[layer].data_ptr<float>();  // [kvh, capacity, hd]
      float* v_cache = cs.v[layer].data_ptr<float>();
      const auto capacity = cs.k.size(2);
      for (std::int64_t t = offsets[si]; t < offsets[si + 1]; ++t) {
        const float* row = qkv_p + t * (q_dim + 2 * kv_dim);
        const auto pos = positions[static_cast<std::size_t>(t)];
        const float* cos = cos_table + pos * hd;
        const float* sin = sin_table + pos * hd;
        for (std::int64_t hh = 0; hh < h; ++hh) rope_head(row + hh * hd, cos, sin, hd, q_p + (hh * total + t) * hd);
        const auto slot = cs.length + staged_before[si] + (t - offsets[si]);
        for (std::int64_t j = 0; j < kvh; ++j) {
          rope_head(row + q_dim + j * hd, cos, sin, hd, k_cache + (j * capacity + slot) * hd);
          std::copy_n(row + q_dim + kv_dim + j * hd, hd, v_cache + (j * capacity + slot) * hd);
        }
      }
    }
    for (std::size_t si = 0; si < request.sequences.size(); ++si) {
      auto& cs = cache(request.sequences[si].seq_id);
      const auto o = offsets[si], n = offsets[si + 1] - o, len = cs.length + staged_before[si];
      const auto keys = cs.k[layer].narrow(1, 0, len + n);  // [kvh, len + n, hd]
      const auto vals = cs.v[layer].narrow(1, 0, len + n);
      // Grouped-query attention without copying kv heads: the `rep` query heads
      // of kv head j are rows j*rep*n .. (j+1)*rep*n - 1 of one matmul.
      const auto qs = q_heads.narrow(1, o, n).reshape({kvh, rep * n, hd});  // heads j*rep + r
      auto scores = at::matmul(qs, keys.transpose(1, 2)).mul_(scale).view({kvh, rep, n, len + n});
      if (!all_visible[si])  // blocked staged/new columns; the committed prefix is always visible
        scores.narrow(-1, cs.length, staged_before[si] + n)
            .masked_fill_(masks[si], -std::numeric_limits<float>::infinity());
      const auto out = at::matmul(at::softmax(scores, -1).view({kvh, rep * n, len + n}), vals);  // [kvh, rep n, hd]
      attn.narrow(0, o, n).copy_(out.view({h, n, hd}).transpose(0, 1).reshape({n, h * hd}));
    }
    x.add_(p.o(attn));
    x.add_(p.down(swiglu_rows(p.gate_up(rms_norm_rows(x, l.mlp_norm, c.rms_norm_eps)), ffn)));
    if (hidden_out != nullptr && request.hidden_layer == static_cast<std::int32_t>(li)) layer_hidden = x.clone();
  }
  for (std::size_t si = 0; si < request.sequences.size(); ++si)
    cache(request.sequences[si].seq_id).staged = staged_before[si] + offsets[si + 1] - offsets[si];
  if (logits_out == nullptr && hidden_out == nullptr) return;  // a prefill fills the cache only
  const auto out = rms_norm_rows(x, final_norm_, c.rms_norm_eps).contiguous();
  if (logits_out != nullptr) packed_lm_head_->forward(out.data_ptr<float>(), total, logits_out);
  if (hidden_out != nullptr) {
    const auto h_rows = (request.hidden_layer == -1 ? out : layer_hidden).contiguous();
    std::copy_n(h_rows.data_ptr<float>(), total * c.hidden_size, hidden_out);
  }
}

void LlamaModel::accept(std::int32_t seq, std::span<const std::int32_t> path) {
  auto& cs = cache(seq);
  const auto n = static_cast<std::int64_t>(path.size());
  for (std::int64_t i = 0; i < n; ++i) {
    const auto p = path[static_cast<std::size_t>(i)];
    if (p < 0 || p >= cs.staged || (i > 0 && p <= path[static_cast<std::size_t>(i - 1)]))
      throw InvalidArgumentError(fmt::format(
          "LlamaModel::accept: path entry {} = {} must be increasing and within the {} staged tokens", i, p,
          cs.staged));
  }
  if (n > 0) {
    std::vector<std::int64_t> src(path.begin(), path.end());
    for (auto& s : src) s += cs.length;
    const auto idx = at::tensor(src, at::kLong);
    // index_select copies first, so overlapping source and destination are safe.
    cs.k.narrow(2, cs.length, n).copy_(cs.k.index_select(2, idx));
    cs.v.narrow(2, cs.length, n).copy_(cs.v.index_select(2, idx));
  }
  cs.length += n;
  cs.staged = 0;
}

void LlamaModel::rollback(std::int32_t seq, std::int64_t length) {
  auto& cs = cache(seq);
  if (length < 0 || length > cs.length)
    throw InvalidArgumentError(fmt::format("LlamaModel::rollback: length {} is outside [0, {}]", length, cs.length));
  cs.length = length;
  cs.staged = 0;
}

}  // namespace specdec::torch_backend
