#include "specdec/cpu/llama_model.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <mutex>
#include <string>
#include <utility>

#include <fmt/format.h>

#include "decoder_layer.hpp"
#include "specdec/core/error.hpp"
#include "specdec/core/logit_rows.hpp"
#include "specdec/cpu/row_linear.hpp"
#include "specdec/io/float_convert.hpp"
#include "specdec/io/safetensors_checkpoint.hpp"
#include "specdec/io/weights.hpp"

namespace specdec::cpu {

RopeTables rope_tables(const io::LlamaConfig& config) {
  const auto hd = config.head_dim, positions = config.max_position_embeddings;
  RopeTables t;
  t.cos.resize(static_cast<std::size_t>(positions * hd));
  t.sin.resize(t.cos.size());
  for (std::int64_t i = 0; i < hd / 2; ++i) {
    const auto inv_freq = static_cast<float>(
        1.0 /
        std::pow(config.rope_theta, static_cast<double>(static_cast<float>(2 * i) / static_cast<float>(hd))));
    for (std::int64_t p = 0; p < positions; ++p) {
      const float angle = static_cast<float>(p) * inv_freq;
      for (const std::int64_t j : {i, i + hd / 2}) {
        t.cos[static_cast<std::size_t>(p * hd + j)] = std::cos(angle);
        t.sin[static_cast<std::size_t>(p * hd + j)] = std::sin(angle);
      }
    }
  }
  return t;
}

LlamaModel::LlamaModel(io::LlamaConfig config, RopeTables rope)
    : config_(std::move(config)), rope_(std::move(rope)) {
  const auto& c = config_;
  const auto entries = static_cast<std::size_t>(c.max_position_embeddings * c.head_dim);
  if (rope_.cos.size() != entries || rope_.sin.size() != entries)
    throw ShapeError(
        fmt::format("cpu::LlamaModel: rope tables of {} and {} values, the config needs {} ({} x {})",
                    rope_.cos.size(), rope_.sin.size(), entries, c.max_position_embeddings, c.head_dim));
}

namespace {

void check_linear(const Linear* l, std::int64_t out, std::int64_t in, const std::string& what) {
  if (l == nullptr) throw ShapeError(fmt::format("cpu::LlamaModel: {} is missing", what));
  if (l->out_features() != out || l->in_features() != in)
    throw ShapeError(fmt::format("cpu::LlamaModel: {} is [{}, {}], the config implies [{}, {}]", what,
                                 l->out_features(), l->in_features(), out, in));
}

void check_floats(const std::vector<float>& v, std::int64_t n, const std::string& what) {
  if (static_cast<std::int64_t>(v.size()) != n)
    throw ShapeError(
        fmt::format("cpu::LlamaModel: {} has {} values, the config implies {}", what, v.size(), n));
}

std::string layer_name(std::size_t i, const char* leaf) {
  return fmt::format("model.layers.{}.{}", i, leaf);
}

}  // namespace

void LlamaModel::set_weights(LlamaWeights w) {
  const auto& c = config_;
  if (c.head_dim % 2 != 0 || c.head_dim > kMaxHeadDim)
    throw UnsupportedError(fmt::format("cpu::LlamaModel: head_dim {} (even and at most {} are supported)",
                                       c.head_dim, kMaxHeadDim));
  const auto d = c.hidden_size, q_dim = c.num_attention_heads * c.head_dim,
             kv_dim = c.num_key_value_heads * c.head_dim;
  if (static_cast<std::int64_t>(w.embedding.size()) != c.vocab_size * d)
    throw ShapeError(fmt::format("cpu::LlamaModel: the embedding has {} values, the config implies {}",
                                 w.embedding.size(), c.vocab_size * d));
  check_floats(w.final_norm, d, "the final norm");
  if (static_cast<std::int64_t>(w.layers.size()) != c.num_hidden_layers)
    throw ShapeError(
        fmt::format("cpu::LlamaModel: {} layers, the config has {}", w.layers.size(), c.num_hidden_layers));
  for (std::size_t i = 0; i < w.layers.size(); ++i) {
    const auto& l = w.layers[i];
    check_linear(l.qkv.get(), q_dim + 2 * kv_dim, d, fmt::format("layer {}'s q|k|v", i));
    check_linear(l.o.get(), d, q_dim, fmt::format("layer {}'s o", i));
    check_linear(l.gate_up.get(), 2 * c.intermediate_size, d, fmt::format("layer {}'s gate|up", i));
    check_linear(l.down.get(), d, c.intermediate_size, fmt::format("layer {}'s down", i));
    check_floats(l.attn_norm, d, fmt::format("layer {}'s attention norm", i));
    check_floats(l.mlp_norm, d, fmt::format("layer {}'s MLP norm", i));
  }
  check_linear(w.lm_head.get(), c.vocab_size, d, "the LM head");
  weights_ = std::move(w);
}

void LlamaModel::set_lm_head(std::shared_ptr<const Linear> head) {
  if (!has_weights()) throw InvalidArgumentError("cpu::LlamaModel::set_lm_head: the model has no weights");
  check_linear(head.get(), config_.vocab_size, config_.hidden_size, "the LM head");
  weights_.lm_head = std::move(head);
}

LlamaModel LlamaModel::load(const std::filesystem::path& dir, DType weights) {
  if (weights != DType::kF32 && weights != DType::kBF16)
    throw InvalidArgumentError(
        fmt::format("cpu::LlamaModel::load: weights are kept in f32 or bf16, not {}", dtype_name(weights)));
  if (!RowLinear::available(weights))
    throw UnsupportedError(
        fmt::format("cpu::LlamaModel::load: this CPU has no {} row kernel{}", dtype_name(weights),
                    weights == DType::kBF16 ? " (AVX512_BF16); load f32" : " (AVX-512F or AVX2)"));
  const io::LlamaConfig config = io::load_llama_config(dir / "config.json");
  LlamaModel m(config, rope_tables(config));
  const io::SafetensorsCheckpoint ckpt(dir);
  io::WeightReader fetch(ckpt, dir.string(), "config.json");
  const auto linear = [&](std::initializer_list<std::pair<std::string, std::vector<std::int64_t>>> parts) {
    std::vector<float> rows;
    std::int64_t out = 0, in = 0;
    for (const auto& [name, shape] : parts) {
      const auto w = fetch(name, shape);
      rows.insert(rows.end(), w.begin(), w.end());
      out += shape[0];
      in = shape[1];
    }
    return std::make_unique<RowLinear>(rows.data(), out, in, weights);
  };
  const auto& c = config;
  const auto d = c.hidden_size, q_dim = c.num_attention_heads * c.head_dim,
             kv_dim = c.num_key_value_heads * c.head_dim, inner = c.intermediate_size;
  LlamaWeights w;
  const auto embedding =
      std::make_shared<const std::vector<float>>(fetch("model.embed_tokens.weight", {c.vocab_size, d}));
  w.embedding = *embedding;
  w.embedding_owner = embedding;
  for (std::int64_t i = 0; i < c.num_hidden_layers; ++i) {
    const auto li = static_cast<std::size_t>(i);
    LlamaLayerWeights l;
    l.attn_norm = fetch(layer_name(li, "input_layernorm.weight"), {d});
    l.qkv = linear({{layer_name(li, "self_attn.q_proj.weight"), {q_dim, d}},
                    {layer_name(li, "self_attn.k_proj.weight"), {kv_dim, d}},
                    {layer_name(li, "self_attn.v_proj.weight"), {kv_dim, d}}});
    l.o = linear({{layer_name(li, "self_attn.o_proj.weight"), {d, q_dim}}});
    l.mlp_norm = fetch(layer_name(li, "post_attention_layernorm.weight"), {d});
    l.gate_up = linear({{layer_name(li, "mlp.gate_proj.weight"), {inner, d}},
                        {layer_name(li, "mlp.up_proj.weight"), {inner, d}}});
    l.down = linear({{layer_name(li, "mlp.down_proj.weight"), {d, inner}}});
    w.layers.push_back(std::move(l));
  }
  w.final_norm = fetch("model.norm.weight", {d});
  w.lm_head = c.tie_word_embeddings
                  ? std::make_shared<RowLinear>(embedding->data(), c.vocab_size, d, weights)
                  : std::shared_ptr<RowLinear>(linear({{"lm_head.weight", {c.vocab_size, d}}}));
  fetch.refuse_unread();
  m.set_weights(std::move(w));
  return m;
}

// ---- the Model concept ------------------------------------------------------

// Staging room of a sink + window cache between forwards: a chain or a small
// tree; a forward with more grows the buffers for itself.
constexpr std::int64_t kSparseStaging = 64;

std::int64_t LlamaModel::Cache::visible() const {
  return sparse() ? std::min(length, policy.sink + policy.window) : length;
}
std::int64_t LlamaModel::Cache::slot_of(std::int64_t t) const {
  return !sparse() || t < policy.sink ? t : policy.sink + (t - policy.sink) % policy.window;
}

std::int64_t LlamaModel::sparse_slots(const CachePolicy& policy) const {
  return key_capacity(policy.sink + policy.window + kSparseStaging);
}

LlamaModel::Cache LlamaModel::new_cache(std::int64_t slots) const {
  const auto& c = config_;
  Cache cache;
  cache.slots = slots;
  cache.k.assign(static_cast<std::size_t>(c.num_hidden_layers * c.num_key_value_heads * slots * c.head_dim),
                 0.0f);
  cache.v.assign(cache.k.size(), 0.0f);
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
    std::copy_n(cache.k.data() + h * cache.slots * hd, keep, grown.k.data() + h * slots * hd);
    std::copy_n(cache.v.data() + h * cache.slots * hd, keep, grown.v.data() + h * slots * hd);
  }
  cache.k = std::move(grown.k);
  cache.v = std::move(grown.v);
  cache.slots = slots;
}

void LlamaModel::open(std::int32_t seq, const CachePolicy& policy) {
  const bool sparse = policy.kind == CachePolicy::Kind::kSinkWindow;
  if (sparse && (policy.sink < 0 || policy.window < 1))
    throw InvalidArgumentError(
        fmt::format("cpu::LlamaModel::open: sequence {}: a sink + window cache needs sink >= 0 and window >= "
                    "1 (got {} and {})",
                    seq, policy.sink, policy.window));
  if (policy.kind != CachePolicy::Kind::kDense && !sparse)
    throw UnsupportedError(fmt::format("cpu::LlamaModel::open: sequence {}: unknown cache policy", seq));
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
    cache.sink_keys.assign(static_cast<std::size_t>(config_.num_hidden_layers * config_.num_key_value_heads *
                                                    policy.sink * config_.head_dim),
                           0.0f);
}

void LlamaModel::close(std::int32_t seq) {
  const std::unique_lock lock(*caches_mutex_);
  const auto it = caches_.find(seq);
  if (it == caches_.end())
    throw InvalidArgumentError(fmt::format("cpu::LlamaModel::close: sequence {} is not open", seq));
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
    throw InvalidArgumentError(fmt::format("cpu::LlamaModel: sequence {} is not open (open)", seq));
  return it->second;
}
LlamaModel::Cache& LlamaModel::cache(std::int32_t seq) {
  return const_cast<Cache&>(std::as_const(*this).cache(seq));  // the usual const/non-const pair
}

std::int64_t LlamaModel::cached_length(std::int32_t seq) const {
  return cache(seq).length;
}
std::int64_t LlamaModel::cache_slots(std::int32_t seq) const {
  return cache(seq).slots;
}

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
  const float* cos = rope_.cos.data() + shift * hd;
  const float* sin = rope_.sin.data() + shift * hd;
  float key[kMaxHeadDim];
  for (std::int64_t h = 0; h < heads; ++h) {
    float* kh = cs.k.data() + h * cs.slots * hd;
    for (std::int64_t s = 0; s < std::min(pol.sink, cs.length); ++s) {
      rope_head(cs.sink_keys.data() + (h * pol.sink + s) * hd, cos, sin, hd, key);
      for (std::int64_t e = 0; e < hd; ++e) kh[key_offset(s, e, hd)] = key[e];
    }
  }
  cs.sink_shift = shift;
}

void LlamaModel::forward(const ForwardRequest& request) {
  if (!has_weights())
    throw InvalidArgumentError("cpu::LlamaModel::forward: the model has no weights (set_weights)");
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
      throw ShapeError(fmt::format("cpu::LlamaModel::forward: sequence {} has {} tokens but {} positions",
                                   s.seq_id, n, s.positions.size()));
    if (!s.mask.empty() && (s.mask.size != before + n || s.mask.device.kind != DeviceKind::kCPU))
      throw ShapeError(
          fmt::format("cpu::LlamaModel::forward: sequence {} has {} staged and {} new tokens but a {}x{} "
                      "mask (a host mask is needed)",
                      s.seq_id, before, n, s.mask.size, s.mask.size));
    if (cache_s.length + before + n > c.max_position_embeddings)
      throw ShapeError(
          fmt::format("cpu::LlamaModel::forward: sequence {} would hold {} tokens, the context is {}",
                      s.seq_id, cache_s.length + before + n, c.max_position_embeddings));
    if (visible + before + n > cache_s.slots) resize_cache(cache_s, key_capacity(visible + before + n));
    for (const auto t : s.tokens)
      if (t < 0 || t >= c.vocab_size)
        throw ShapeError(
            fmt::format("cpu::LlamaModel: token id {} is outside the vocabulary of {}", t, c.vocab_size));
    for (const auto p : s.positions)
      if (p < 0 || p >= c.max_position_embeddings)
        throw ShapeError(fmt::format("cpu::LlamaModel::forward: position {} is outside [0, {})", p,
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
  float* logits_out = request.logits.empty() ? nullptr
                                             : host_output(request.logits, total, c.vocab_size,
                                                           "cpu::LlamaModel::forward (logits)");
  const auto num_layers = static_cast<std::int32_t>(weights_.layers.size());
  const auto hidden_layers = request.hidden_layers;
  if (!request.hidden.empty() &&
      (request.hidden_layer >= num_layers || request.hidden_layer < -1 || hidden_layers < 1 ||
       (request.hidden_layer == -1 ? hidden_layers != 1 : request.hidden_layer + hidden_layers > num_layers)))
    throw InvalidArgumentError(
        fmt::format("cpu::LlamaModel::forward: {} hidden layer(s) from layer {} of a {}-layer model",
                    hidden_layers, request.hidden_layer, weights_.layers.size()));
  float* hidden_out = request.hidden.empty()
                          ? nullptr
                          : host_output(request.hidden, total, hidden_layers * c.hidden_size,
                                        "cpu::LlamaModel::forward (hidden)");
  // The residual stream, [total, d], starting from the token embeddings.
  std::vector<float> x(static_cast<std::size_t>(total * d));
  const float* embed = weights_.embedding.data();
  for (std::int64_t i = 0; i < total; ++i)
    std::copy_n(embed + static_cast<std::int64_t>(tokens[static_cast<std::size_t>(i)]) * d, d,
                x.data() + i * d);
  const DecoderShape shape{d,          c.num_attention_heads, c.num_key_value_heads,
                           c.head_dim, c.intermediate_size,   static_cast<float>(c.rms_norm_eps)};
  std::vector<float> layer_hidden;
  for (const auto& s : request.sequences) shift_sink(cache(s.seq_id));
  for (std::size_t li = 0; li < weights_.layers.size(); ++li) {
    const auto& l = weights_.layers[li];
    for (std::size_t si = 0; si < spans.size(); ++si) {  // this layer's slice of each cache
      auto& cs = cache(request.sequences[si].seq_id);
      const auto layer_entries =
          static_cast<std::int64_t>(li) * c.num_key_value_heads * c.head_dim * cs.slots;
      spans[si].k = cs.k.data() + layer_entries;
      spans[si].v = cs.v.data() + layer_entries;
    }
    const DecoderLayerWeights w{l.qkv.get(),  l.o.get(),          l.gate_up.get(),
                                l.down.get(), l.attn_norm.data(), l.mlp_norm.data()};
    decoder_layer_forward(w, shape, x.data(), total, positions, rope_.cos.data(), rope_.sin.data(), spans);
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
  rms_norm(x.data(), total, d, weights_.final_norm.data(), static_cast<float>(c.rms_norm_eps), x.data());
  if (logits_out != nullptr) {
    weights_.lm_head->forward(x.data(), total, logits_out);
  }
  if (hidden_out != nullptr)
    std::copy_n(request.hidden_layer == -1 ? x.data() : layer_hidden.data(), total * d * hidden_layers,
                hidden_out);
}

void LlamaModel::accept(std::int32_t seq, std::span<const std::int32_t> path) {
  auto& cs = cache(seq);
  const auto n = static_cast<std::int64_t>(path.size());
  for (std::int64_t i = 0; i < n; ++i) {
    const auto p = path[static_cast<std::size_t>(i)];
    if (p < 0 || p >= cs.staged || (i > 0 && p <= path[static_cast<std::size_t>(i - 1)]))
      throw InvalidArgumentError(fmt::format(
          "cpu::LlamaModel::accept: path entry {} = {} must be increasing and within the {} staged tokens", i,
          p, cs.staged));
  }
  // Kept token i (text index t = length + i) moves from its staged slot,
  // visible + path[i], to slot_of(t). A dense cache moves it down (to <= its
  // source, in increasing i, so no source is overwritten before it is read);
  // a sink + window cache also writes slots below `visible`, over the tokens
  // it evicts, and skips the kept tokens that the later ones evict at once.
  const auto& c = config_;
  const auto hd = c.head_dim, visible = cs.visible(), end = cs.length + n;
  const auto& pol = cs.policy;
  const auto kept = [&](std::int64_t t) { return !cs.sparse() || t < pol.sink || t >= end - pol.window; };
  float* k = cs.k.data();
  float* v = cs.v.data();
  for (std::int64_t head = 0; head < c.num_hidden_layers * c.num_key_value_heads; ++head) {
    float* kh = k + head * cs.slots * hd;  // keys in blocks (decoder_layer.hpp)
    float* vh = v + head * cs.slots * hd;
    for (std::int64_t i = 0; i < n; ++i) {
      const auto t = cs.length + i;
      if (!kept(t)) continue;
      const auto from = visible + path[static_cast<std::size_t>(i)], to = cs.slot_of(t);
      if (t < pol.sink && !cs.sink_keys.empty())  // rotated at its own position: shift_sink's source
        for (std::int64_t e = 0; e < hd; ++e)
          cs.sink_keys[static_cast<std::size_t>((head * pol.sink + t) * hd + e)] =
              kh[key_offset(from, e, hd)];
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
    throw InvalidArgumentError(
        fmt::format("cpu::LlamaModel::rollback: length {} is outside [0, {}]", length, cs.length));
  if (cs.sparse() && length < cs.length && cs.length > cs.policy.sink + cs.policy.window)
    throw InvalidArgumentError(
        fmt::format("cpu::LlamaModel::rollback: sequence {} keeps a sink of {} and a window of {} tokens and "
                    "has evicted {} of its "
                    "{}; it cannot roll back to {}",
                    seq, cs.policy.sink, cs.policy.window, cs.length - cs.policy.sink - cs.policy.window,
                    cs.length, length));
  cs.length = length;
  cs.staged = 0;
}

}  // namespace specdec::cpu
