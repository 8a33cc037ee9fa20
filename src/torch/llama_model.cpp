#include "specdec/torch/llama_model.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <shared_mutex>
#include <tuple>
#include <utility>

#include <fmt/format.h>

#include "checked_tensors.hpp"
#include "decoder_layer.hpp"
#include "kernels.hpp"
#include "specdec/core/error.hpp"
#include "specdec/core/logit_rows.hpp"
#include "specdec/io/safetensors.hpp"
#include "specdec/io/safetensors_checkpoint.hpp"
#include "specdec/torch/tensor_interop.hpp"

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
  const DType t = inference_dtype_;
  for (const auto& l : layers_)
    packed_.push_back(PackedLayer{PackedLinear(at::cat({l.wq, l.wk, l.wv}, 0), t), PackedLinear(l.wo, t),
                                  PackedLinear(at::cat({l.w_gate, l.w_up}, 0), t), PackedLinear(l.w_down, t)});
  packed_lm_head_ = std::make_unique<PackedLinear>(lm_head_, t);
}

void LlamaModel::set_inference_dtype(DType dtype) {
  if (dtype != DType::kF32 && dtype != DType::kBF16)
    throw InvalidArgumentError(fmt::format("LlamaModel: inference weights are f32 or bf16, not {}", dtype_name(dtype)));
  const std::lock_guard lock(*pack_mutex_);
  if (dtype == inference_dtype_) return;
  inference_dtype_ = dtype;
  packed_.clear();  // packed again, in the new precision, by the next forward()
  packed_lm_head_.reset();
  if (hot_lm_head_) hot_lm_head_ = hot_lm_head_->repacked(lm_head_, dtype);
}

void LlamaModel::set_hot_lm_head(std::shared_ptr<const HotLmHead> head) {
  if (head && head->vocab_size() != config_.vocab_size)
    throw InvalidArgumentError(fmt::format("LlamaModel::set_hot_lm_head: a head over a vocabulary of {}, the model's "
                                           "is {}",
                                           head->vocab_size(), config_.vocab_size));
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

// Staging room of a sink + window cache between forwards: a chain or a small
// tree; a forward with more grows the buffers for itself.
constexpr std::int64_t kSparseStaging = 64;

std::int64_t LlamaModel::sparse_slots(const CachePolicy& policy) const {
  return key_capacity(policy.sink + policy.window + kSparseStaging);
}

LlamaModel::Cache LlamaModel::new_cache(std::int64_t slots) const {
  const auto& c = config_;
  Cache cache;
  cache.slots = slots;
  // Zeroed by memset: at::zeros would start an OpenMP region (see accept).
  cache.k = at::empty({c.num_hidden_layers, c.num_key_value_heads, slots * c.head_dim});
  cache.v = at::empty({c.num_hidden_layers, c.num_key_value_heads, slots, c.head_dim});
  std::memset(cache.k.data_ptr<float>(), 0, cache.k.numel() * sizeof(float));
  std::memset(cache.v.data_ptr<float>(), 0, cache.v.numel() * sizeof(float));
  return cache;
}

// Slot s of a head sits at the same offset within the head's keys (blocks)
// and values (rows) whatever the capacity, so each head keeps its first
// min(old, new) slots in place.
void LlamaModel::resize_cache(Cache& cache, std::int64_t slots) const {
  Cache grown = new_cache(slots);
  const auto heads = config_.num_hidden_layers * config_.num_key_value_heads, hd = config_.head_dim;
  const auto keep = std::min(cache.slots, slots) * hd;
  for (std::int64_t h = 0; h < heads; ++h) {
    std::copy_n(cache.k.data_ptr<float>() + h * cache.slots * hd, keep, grown.k.data_ptr<float>() + h * slots * hd);
    std::copy_n(cache.v.data_ptr<float>() + h * cache.slots * hd, keep, grown.v.data_ptr<float>() + h * slots * hd);
  }
  cache.k = std::move(grown.k);
  cache.v = std::move(grown.v);
  cache.slots = slots;
}

void LlamaModel::open(std::int32_t seq, const CachePolicy& policy) {
  const bool sparse = policy.kind == CachePolicy::Kind::kSinkWindow;
  if (sparse && (policy.sink < 0 || policy.window < 1))
    throw InvalidArgumentError(fmt::format(
        "LlamaModel::open: sequence {}: a sink + window cache needs sink >= 0 and window >= 1 (got {} and {})", seq,
        policy.sink, policy.window));
  if (policy.kind != CachePolicy::Kind::kDense && !sparse)
    throw UnsupportedError(fmt::format("LlamaModel::open: sequence {}: unknown cache policy", seq));
  const auto dense_slots = key_capacity(config_.max_position_embeddings);
  const auto slots = sparse ? std::min(sparse_slots(policy), dense_slots) : dense_slots;
  const std::unique_lock lock(*caches_mutex_);
  if (const auto it = caches_.find(seq); it != caches_.end() && it->second.slots != slots)
    drop_cache(it);  // reopened with another policy
  auto existing = caches_.find(seq);
  if (existing == caches_.end()) {
    // A closed dense sequence's buffers are reused. They need no zeroing:
    // attention uses only the slots a forward wrote (its last block of keys
    // reads the block's other slots and drops those lanes; new buffers start
    // zeroed).
    if (!sparse && !spare_caches_.empty()) {
      caches_[seq] = std::move(spare_caches_.back());
      spare_caches_.pop_back();
    } else {
      caches_[seq] = new_cache(slots);
    }
    existing = caches_.find(seq);
  }
  Cache& cache = existing->second;
  cache.length = cache.staged = 0;
  cache.policy = policy;
  cache.sink_shift = 0;
  cache.sink_keys.clear();
  if (sparse && policy.positions == CachePolicy::Positions::kCache)
    cache.sink_keys.assign(
        static_cast<std::size_t>(config_.num_hidden_layers * config_.num_key_value_heads * policy.sink * config_.head_dim),
        0.0f);
}

void LlamaModel::close(std::int32_t seq) {
  const std::unique_lock lock(*caches_mutex_);
  const auto it = caches_.find(seq);
  if (it == caches_.end()) throw InvalidArgumentError(fmt::format("LlamaModel::close: sequence {} is not open", seq));
  drop_cache(it);
}

void LlamaModel::drop_cache(std::unordered_map<std::int32_t, Cache>::iterator it) {
  if (!it->second.sparse()) spare_caches_.push_back(std::move(it->second));
  caches_.erase(it);
}

const LlamaModel::Cache& LlamaModel::cache(std::int32_t seq) const {
  // A reference into the map stays valid while other sequences open and
  // close; the lock keeps the lookup itself from racing them.
  const std::shared_lock lock(*caches_mutex_);
  const auto it = caches_.find(seq);
  if (it == caches_.end())
    throw InvalidArgumentError(fmt::format("LlamaModel: sequence {} is not open (open)", seq));
  return it->second;
}
LlamaModel::Cache& LlamaModel::cache(std::int32_t seq) {
  return const_cast<Cache&>(std::as_const(*this).cache(seq));  // the usual const/non-const pair
}

std::int64_t LlamaModel::cached_length(std::int32_t seq) const { return cache(seq).length; }
std::int64_t LlamaModel::cache_slots(std::int32_t seq) const { return cache(seq).slots; }

// Positions::kCache: StreamingLLM's positions within the cache differ from
// the text's by the number of evicted tokens E, for every query and every
// key but the sink's (the window is contiguous in the text). RoPE scores
// depend on position differences only, so rotating the sink's keys by s + E
// instead of s, with everything else at text positions, scores as the cache
// positions do.
void LlamaModel::shift_sink(Cache& cs) const {
  const auto& pol = cs.policy;
  if (!cs.sparse() || pol.positions != CachePolicy::Positions::kCache) return;
  const auto shift = std::max<std::int64_t>(0, cs.length - pol.sink - pol.window);
  if (shift == cs.sink_shift) return;
  const auto hd = config_.head_dim, heads = config_.num_hidden_layers * config_.num_key_value_heads;
  const float* cos = rope_cos_.data_ptr<float>() + shift * hd;
  const float* sin = rope_sin_.data_ptr<float>() + shift * hd;
  float key[kMaxHeadDim];
  for (std::int64_t h = 0; h < heads; ++h) {
    float* kh = cs.k.data_ptr<float>() + h * cs.slots * hd;
    for (std::int64_t s = 0; s < std::min(pol.sink, cs.length); ++s) {
      kernels::rope_head(cs.sink_keys.data() + (h * pol.sink + s) * hd, cos, sin, hd, key);
      for (std::int64_t e = 0; e < hd; ++e) kh[key_offset(s, e, hd)] = key[e];
    }
  }
  cs.sink_shift = shift;
}

void LlamaModel::forward(const ForwardRequest& request) {
  at::NoGradGuard no_grad;
  const auto& c = config_;
  const auto d = c.hidden_size;
  // Gather every sequence's new tokens: projections and MLPs run as one GEMM,
  // attention per sequence.
  std::vector<std::int64_t> positions;
  std::vector<TokenId> tokens;
  std::vector<AttentionSpan> spans;
  // Which staged + new entries each new token may not see (the committed
  // prefix is always visible), one byte per entry; only for sequences where
  // some entry is hidden, so decode steps build none.
  std::vector<std::vector<std::uint8_t>> blocked(request.sequences.size());
  for (std::size_t si = 0; si < request.sequences.size(); ++si) {
    const auto& s = request.sequences[si];
    auto& cache_s = cache(s.seq_id);
    const auto n = static_cast<std::int64_t>(s.tokens.size());
    const auto before = s.extend_staged ? cache_s.staged : 0;
    const auto visible = cache_s.visible();
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
    if (visible + before + n > cache_s.slots) resize_cache(cache_s, key_capacity(visible + before + n));
    for (const auto t : s.tokens)
      if (t < 0 || t >= c.vocab_size)
        throw ShapeError(fmt::format("LlamaModel: token id {} is outside the vocabulary of {}", t, c.vocab_size));
    for (const auto p : s.positions)
      if (p < 0 || p >= c.max_position_embeddings)
        throw ShapeError(fmt::format("LlamaModel::forward: position {} is outside [0, {})", p,
                                     c.max_position_embeddings));
    AttentionSpan span;
    span.first_row = static_cast<std::int64_t>(tokens.size());
    span.rows = n;
    span.capacity = cache_s.slots;
    span.prefix = visible + before;
    span.masked_from = visible;
    if (!s.mask.empty()) {
      const auto cols = before + n;
      std::vector<std::uint8_t> hidden(static_cast<std::size_t>(n * cols), 0);
      bool any = false;
      for (std::int64_t i = 0; i < n; ++i)
        for (std::int64_t j = 0; j < cols; ++j) {
          const bool h = !s.mask.test(static_cast<std::int32_t>(before + i), static_cast<std::int32_t>(j));
          hidden[static_cast<std::size_t>(i * cols + j)] = h;
          any |= h;
        }
      if (any) blocked[si] = std::move(hidden);
    }
    span.blocked = blocked[si].empty() ? nullptr : blocked[si].data();
    spans.push_back(span);
    tokens.insert(tokens.end(), s.tokens.begin(), s.tokens.end());
    positions.insert(positions.end(), s.positions.begin(), s.positions.end());
  }
  const auto total = static_cast<std::int64_t>(tokens.size());
  // The outputs are checked before anything is staged.
  float* logits_out =
      request.logits.empty() ? nullptr : host_output(request.logits, total, c.vocab_size, "LlamaModel::forward (logits)");
  const auto num_layers = static_cast<std::int32_t>(layers_.size());
  const auto hidden_layers = request.hidden_layers;
  if (!request.hidden.empty() &&
      (request.hidden_layer >= num_layers || request.hidden_layer < -1 || hidden_layers < 1 ||
       (request.hidden_layer == -1 ? hidden_layers != 1 : request.hidden_layer + hidden_layers > num_layers)))
    throw InvalidArgumentError(fmt::format("LlamaModel::forward: {} hidden layer(s) from layer {} of a {}-layer model",
                                           hidden_layers, request.hidden_layer, layers_.size()));
  float* hidden_out = request.hidden.empty() ? nullptr
                                             : host_output(request.hidden, total, hidden_layers * c.hidden_size,
                                                           "LlamaModel::forward (hidden)");
  {
    const std::lock_guard lock(*pack_mutex_);
    if (packed_.empty()) pack_for_inference();
  }
  // The residual stream, [total, d], starting from the token embeddings.
  std::vector<float> x(static_cast<std::size_t>(total * d));
  const float* embed = embed_.data_ptr<float>();
  for (std::int64_t i = 0; i < total; ++i)
    std::copy_n(embed + static_cast<std::int64_t>(tokens[static_cast<std::size_t>(i)]) * d, d, x.data() + i * d);
  const DecoderShape shape{d, c.num_attention_heads, c.num_key_value_heads, c.head_dim, c.intermediate_size,
                           static_cast<float>(c.rms_norm_eps)};
  std::vector<float> layer_hidden;
  for (const auto& s : request.sequences) shift_sink(cache(s.seq_id));
  for (std::size_t li = 0; li < layers_.size(); ++li) {
    const auto& l = layers_[li];
    const auto& p = packed_[li];
    for (std::size_t si = 0; si < spans.size(); ++si) {  // this layer's slice of each cache
      auto& cs = cache(request.sequences[si].seq_id);
      const auto layer_entries = static_cast<std::int64_t>(li) * c.num_key_value_heads * c.head_dim * cs.slots;
      spans[si].k = cs.k.data_ptr<float>() + layer_entries;
      spans[si].v = cs.v.data_ptr<float>() + layer_entries;
    }
    const DecoderLayerWeights w{&p.qkv, &p.o, &p.gate_up, &p.down, l.attn_norm.data_ptr<float>(),
                                l.mlp_norm.data_ptr<float>()};
    decoder_layer_forward(w, shape, x.data(), total, positions, rope_cos_.data_ptr<float>(),
                          rope_sin_.data_ptr<float>(), spans);
    // Layer outputs side by side per row: layer hidden_layer + j at column j * d.
    const auto j = static_cast<std::int32_t>(li) - request.hidden_layer;
    if (hidden_out != nullptr && request.hidden_layer >= 0 && j >= 0 && j < hidden_layers) {
      if (layer_hidden.empty()) layer_hidden.resize(static_cast<std::size_t>(total * d * hidden_layers));
      for (std::int64_t r = 0; r < total; ++r)
        std::copy_n(x.data() + r * d, d, layer_hidden.data() + (r * hidden_layers + j) * d);
    }
  }
  for (std::size_t si = 0; si < spans.size(); ++si)
    cache(request.sequences[si].seq_id).staged = spans[si].prefix - spans[si].masked_from + spans[si].rows;
  if (logits_out == nullptr && hidden_out == nullptr) return;  // a prefill fills the cache only
  rms_norm(x.data(), total, d, final_norm_.data_ptr<float>(), static_cast<float>(c.rms_norm_eps), x.data());
  if (logits_out != nullptr) {
    if (hot_lm_head_)
      hot_lm_head_->forward(x.data(), total, logits_out);
    else
      packed_lm_head_->forward(x.data(), total, logits_out);
  }
  if (hidden_out != nullptr)
    std::copy_n(request.hidden_layer == -1 ? x.data() : layer_hidden.data(), total * d * hidden_layers, hidden_out);
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
  // Kept token i (text index t = length + i) moves from its staged slot,
  // visible + path[i], to slot_of(t). A dense cache moves it down (to <= its
  // source, in increasing i, so no source is overwritten before it is read);
  // a sink + window cache also writes slots below `visible`, over the tokens
  // it evicts, and skips the kept tokens that the later ones evict at once.
  // Plain loops, not ATen ops: those would start OpenMP regions whose
  // spinning threads take cores from the forward's team (threads.hpp).
  const auto& c = config_;
  const auto hd = c.head_dim, visible = cs.visible(), end = cs.length + n;
  const auto& pol = cs.policy;
  const auto kept = [&](std::int64_t t) { return !cs.sparse() || t < pol.sink || t >= end - pol.window; };
  float* k = cs.k.data_ptr<float>();
  float* v = cs.v.data_ptr<float>();
  for (std::int64_t head = 0; head < c.num_hidden_layers * c.num_key_value_heads; ++head) {
    float* kh = k + head * cs.slots * hd;  // keys in blocks (decoder_layer.hpp)
    float* vh = v + head * cs.slots * hd;
    for (std::int64_t i = 0; i < n; ++i) {
      const auto t = cs.length + i;
      if (!kept(t)) continue;
      const auto from = visible + path[static_cast<std::size_t>(i)], to = cs.slot_of(t);
      if (t < pol.sink && !cs.sink_keys.empty())  // rotated at its own position: shift_sink's source
        for (std::int64_t e = 0; e < hd; ++e)
          cs.sink_keys[static_cast<std::size_t>((head * pol.sink + t) * hd + e)] = kh[key_offset(from, e, hd)];
      if (from == to) continue;
      for (std::int64_t e = 0; e < hd; ++e) kh[key_offset(to, e, hd)] = kh[key_offset(from, e, hd)];
      std::copy_n(vh + from * hd, hd, vh + to * hd);
    }
  }
  cs.length = end;
  cs.staged = 0;
  if (cs.sparse() && cs.slots > sparse_slots(pol)) resize_cache(cs, sparse_slots(pol));  // after a prompt
}

void LlamaModel::rollback(std::int32_t seq, std::int64_t length) {
  auto& cs = cache(seq);
  if (length < 0 || length > cs.length)
    throw InvalidArgumentError(fmt::format("LlamaModel::rollback: length {} is outside [0, {}]", length, cs.length));
  if (cs.sparse() && length < cs.length && cs.length > cs.policy.sink + cs.policy.window)
    throw InvalidArgumentError(fmt::format(
        "LlamaModel::rollback: sequence {} keeps a sink of {} and a window of {} tokens and has evicted {} of its "
        "{}; it cannot roll back to {}",
        seq, cs.policy.sink, cs.policy.window, cs.length - cs.policy.sink - cs.policy.window, cs.length, length));
  cs.length = length;
  cs.staged = 0;
}

}  // namespace specdec::torch_backend
