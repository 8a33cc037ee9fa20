// What one forward of cuda::LlamaModel tells its kernels, worked out on the
// host: for every new token its id, its position, the cache slot of its
// sequence, the cache row its key and value go to, and which keys its query
// may see (docs/cuda.md, "The CUDA model"). Also the checks a forward and an
// accept() make before anything is staged, with the errors the host model
// (torch_backend::LlamaModel) throws for the same inputs.
//
// A sequence's cache holds `length` committed tokens, then the tokens its
// last forward staged. A new forward appends its n tokens after the
// committed prefix (or, with SequenceInput::extend_staged, after the `before`
// staged ones, which stay). Every new token sees the whole committed prefix;
// among the before + n staged and new tokens it sees what row before + i of
// the mask allows, or, with no mask, those up to itself (a causal chain).
//
// A sink + window cache (CachePolicy::kSinkWindow; StreamingLLM, arXiv
// 2309.17453 §3.2) keeps of its committed tokens the first `sink` and the
// last `window`: committed token t lives in row t below the sink and in row
// sink + (t - sink) % window above it (a ring), so its committed prefix is
// min(length, sink + window) rows and the staged tokens follow them.
// accept() moves the kept tokens into their rows (plan_accept), and with
// positions within the cache (MagicDec) the sink's keys are rotated again as
// tokens are evicted (docs/cuda.md, "Sink + window caches").
//
// Host code only (no CUDA headers): plain vectors, copied to the device in
// one transfer by the model.
#pragma once

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include <fmt/format.h>

#include "specdec/core/error.hpp"
#include "specdec/core/round.hpp"
#include "specdec/core/tensor_view.hpp"
#include "specdec/core/types.hpp"
#include "specdec/cuda/token_plan.hpp"

namespace specdec::cuda {

// One sequence's cache as the model tracks it.
struct CacheState {
  std::int32_t slot = 0;      // its buffer among the model's caches
  std::int64_t length = 0;    // committed tokens
  std::int64_t staged = 0;    // tokens of the last forward, after the committed rows
  std::int64_t capacity = 0;  // rows per layer and kv head of its buffer
  CachePolicy policy{};
  std::int64_t sink_shift = 0;  // positions within the cache: the evictions its sink's keys are rotated by

  bool sparse() const { return policy.kind == CachePolicy::Kind::kSinkWindow; }
  // Committed tokens in rows: the prefix every new token sees.
  std::int64_t visible() const { return sparse() ? std::min(length, policy.sink + policy.window) : length; }
  // The row of committed token t (one still kept).
  std::int64_t row_of(std::int64_t t) const {
    return !sparse() || t < policy.sink ? t : policy.sink + (t - policy.sink) % policy.window;
  }
  // Committed tokens no longer in rows.
  std::int64_t evicted() const { return length - visible(); }
};

struct ForwardPlan {
  std::vector<std::int32_t> tokens;
  std::vector<TokenPlan> rows;
  std::vector<std::uint64_t> mask_words;   // each masked token's row: bits 0 .. window - 1
  std::vector<std::int64_t> staged_after;  // each sequence's staged count once the forward ran
  // Each sequence's rows once the forward ran (committed + staged): a
  // buffer with fewer must grow first (a sink + window cache's prompt).
  std::vector<std::int64_t> rows_needed;

  std::int64_t total() const { return static_cast<std::int64_t>(rows.size()); }
  // The longest key range a query reads (prefix + window): the attention's
  // scratch is sized by it.
  std::int64_t max_keys() const {
    std::int64_t m = 0;
    for (const auto& r : rows) m = std::max<std::int64_t>(m, std::int64_t{r.prefix} + r.window);
    return m;
  }
};

// The plan of `request` over the sequences' caches (cache[i]: sequence i's
// state, in the request's order). Throws, before anything is staged:
// ShapeError for positions that do not match the tokens, a mask that is not
// (before + n) square or not on the host, a token outside the vocabulary, a
// position outside [0, max_context), or a sequence that would outgrow
// max_context; InvalidArgumentError for a sequence given twice.
inline ForwardPlan plan_forward(const ForwardRequest& request, std::span<const CacheState> caches,
                                std::int64_t vocab, std::int64_t max_context) {
  if (caches.size() != request.sequences.size())
    throw ShapeError(fmt::format("cuda::LlamaModel::forward: {} sequences but {} cache states",
                                 request.sequences.size(), caches.size()));
  ForwardPlan plan;
  for (std::size_t si = 0; si < request.sequences.size(); ++si) {
    const SequenceInput& s = request.sequences[si];
    const CacheState& c = caches[si];
    for (std::size_t sj = 0; sj < si; ++sj)
      if (request.sequences[sj].seq_id == s.seq_id)
        throw InvalidArgumentError(
            fmt::format("cuda::LlamaModel::forward: sequence {} appears twice in one forward", s.seq_id));
    const auto n = static_cast<std::int64_t>(s.tokens.size());
    const std::int64_t before = s.extend_staged ? c.staged : 0;
    if (static_cast<std::int64_t>(s.positions.size()) != n)
      throw ShapeError(fmt::format("cuda::LlamaModel::forward: sequence {} has {} tokens but {} positions",
                                   s.seq_id, n, s.positions.size()));
    if (!s.mask.empty() && (s.mask.size != before + n || s.mask.device.kind != DeviceKind::kCPU))
      throw ShapeError(
          fmt::format("cuda::LlamaModel::forward: sequence {} has {} staged and {} new tokens but a {}x{} "
                      "mask (a host mask "
                      "is needed)",
                      s.seq_id, before, n, s.mask.size, s.mask.size));
    if (c.length + before + n > max_context)
      throw ShapeError(
          fmt::format("cuda::LlamaModel::forward: sequence {} would hold {} tokens, the context is {}",
                      s.seq_id, c.length + before + n, max_context));
    for (const TokenId t : s.tokens)
      if (t < 0 || t >= vocab)
        throw ShapeError(
            fmt::format("cuda::LlamaModel: token id {} is outside the vocabulary of {}", t, vocab));
    for (const std::int64_t p : s.positions)
      if (p < 0 || p >= max_context)
        throw ShapeError(
            fmt::format("cuda::LlamaModel::forward: position {} is outside [0, {})", p, max_context));
    const std::int64_t words = (before + n + 63) / 64, prefix = c.visible();
    for (std::int64_t i = 0; i < n; ++i) {
      TokenPlan r;
      r.slot = c.slot;
      r.capacity = static_cast<std::int32_t>(c.capacity);
      r.position = static_cast<std::int32_t>(s.positions[static_cast<std::size_t>(i)]);
      r.write_row = static_cast<std::int32_t>(prefix + before + i);
      r.prefix = static_cast<std::int32_t>(prefix);
      if (s.mask.empty()) {
        r.window = static_cast<std::int32_t>(before + i + 1);  // causal
      } else {
        r.window = static_cast<std::int32_t>(before + n);
        r.mask_word = static_cast<std::int32_t>(plan.mask_words.size());
        const auto row = static_cast<std::int32_t>(before + i);
        for (std::int64_t w = 0; w < words; ++w) {
          std::uint64_t bits = 0;
          for (std::int64_t b = 0; b < 64 && w * 64 + b < before + n; ++b)
            if (s.mask.test(row, static_cast<std::int32_t>(w * 64 + b))) bits |= std::uint64_t{1} << b;
          plan.mask_words.push_back(bits);
        }
      }
      plan.rows.push_back(r);
    }
    plan.tokens.insert(plan.tokens.end(), s.tokens.begin(), s.tokens.end());
    plan.staged_after.push_back(before + n);
    plan.rows_needed.push_back(prefix + before + n);
  }
  return plan;
}

// Checks accept(path) against a cache: entries increasing and within the
// staged tokens. Throws InvalidArgumentError naming the entry.
inline void check_accept_path(std::span<const std::int32_t> path, const CacheState& c) {
  for (std::size_t i = 0; i < path.size(); ++i) {
    const auto p = path[i];
    if (p < 0 || p >= c.staged || (i > 0 && p <= path[i - 1]))
      throw InvalidArgumentError(fmt::format(
          "cuda::LlamaModel::accept: path entry {} = {} must be increasing and within the {} staged tokens",
          i, p, c.staged));
  }
}

// The moves of accept(path) on `c` (checked with check_accept_path first),
// in the order they are made (CacheMove). Done one after the other, no
// move's source is overwritten before it is read: a dense cache moves tokens
// down (to <= from, in increasing i); a sink + window cache also writes rows
// below the staged ones, over the tokens it evicts, and skips the accepted
// tokens that later ones evict at once.
inline std::vector<CacheMove> plan_accept(std::span<const std::int32_t> path, const CacheState& c) {
  const auto n = static_cast<std::int64_t>(path.size());
  const std::int64_t visible = c.visible(), end = c.length + n;
  const auto& pol = c.policy;
  const bool keep_sink_keys = c.sparse() && pol.positions == CachePolicy::Positions::kCache;
  std::vector<CacheMove> moves;
  for (std::int64_t i = 0; i < n; ++i) {
    const std::int64_t t = c.length + i;
    if (c.sparse() && t >= pol.sink && t < end - pol.window) continue;  // evicted by a later entry
    CacheMove m;
    m.from = static_cast<std::int32_t>(visible + path[static_cast<std::size_t>(i)]);
    m.to = static_cast<std::int32_t>(c.row_of(t));
    m.sink_row = keep_sink_keys && t < pol.sink ? static_cast<std::int32_t>(t) : -1;
    if (m.from != m.to || m.sink_row >= 0) moves.push_back(m);
  }
  return moves;
}

// Refuses a rollback that would need evicted tokens back (the host model's
// InvalidArgumentError, with its sentence).
inline void check_rollback(std::int32_t seq, std::int64_t length, const CacheState& c) {
  if (length < 0 || length > c.length)
    throw InvalidArgumentError(
        fmt::format("cuda::LlamaModel::rollback: length {} is outside [0, {}]", length, c.length));
  if (c.sparse() && length < c.length && c.evicted() > 0)
    throw InvalidArgumentError(
        fmt::format("cuda::LlamaModel::rollback: sequence {} keeps a sink of {} and a window of {} tokens "
                    "and has evicted {} of its {}; it cannot roll back to {}",
                    seq, c.policy.sink, c.policy.window, c.evicted(), c.length, length));
}

// Where a forward writes an output of `rows` x `cols` f32: on the device
// (`device`, written in place) or on the host (copied there at the end).
// Throws ShapeError for any other shape, dtype or layout, UnsupportedError
// for another device.
inline bool output_on_device(const TensorView& v, std::int64_t rows, std::int64_t cols, Device device,
                             const char* what) {
  if (v.dtype() != DType::kF32 || v.ndim() != 2 || v.size(0) != rows || v.size(1) != cols ||
      !v.is_contiguous())
    throw ShapeError(fmt::format("cuda::LlamaModel::forward: {} must be a contiguous f32 [{}, {}] view", what,
                                 rows, cols));
  if (v.device().kind == DeviceKind::kCPU) return false;
  if (v.device() != device)
    throw UnsupportedError(fmt::format("cuda::LlamaModel::forward: {} is on CUDA device {}, the model on {}",
                                       what, v.device().index, device.index));
  return true;
}

}  // namespace specdec::cuda
