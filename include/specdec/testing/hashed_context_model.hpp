// A host Model for engine tests: next-token logits are a fixed random function
// of the last few tokens of the context a query can see, so a tree forward is
// exact only if the mask, positions, staging and cache compaction are all
// right — any plumbing mistake changes the visible context and the logits.
// It checks each query's position against its visible context length.
#pragma once

#include <algorithm>
#include <atomic>
#include <cmath>
#include <cstdint>
#include <limits>
#include <memory>
#include <mutex>
#include <shared_mutex>
#include <span>
#include <unordered_map>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "specdec/core/error.hpp"
#include "specdec/core/logit_rows.hpp"
#include "specdec/core/rng.hpp"
#include "specdec/core/round.hpp"
#include "specdec/core/tensor_view.hpp"

namespace specdec::testing {

class HashedContextModel {
 public:
  // `order` last tokens decide the logits; `sharpness` scales them. A second
  // model with the same seed and `noise` > 0 is a correlated draft model.
  HashedContextModel(std::int64_t vocab, std::uint64_t seed, int order = 2, float sharpness = 2.0f,
                     float noise = 0.0f, std::uint64_t noise_seed = 7)
      : vocab_(vocab), seed_(seed), order_(order), sharpness_(sharpness), noise_(noise), noise_seed_(noise_seed) {}

  std::int64_t vocab_size() const { return vocab_; }
  // Hidden state of a position: its last two context tokens (the previous
  // one, -1 at the start), as floats; exact for what feature-level drafter
  // tests need (an order-2 model's state is its last two tokens).
  std::int64_t hidden_size() const { return 2; }
  // Layer outputs (ForwardRequest::hidden_layer >= 0): kLayers layers, each
  // layer l's row the same two tokens plus l * kLayerOffset on the second, so
  // a reader that picks the wrong layer of a span gets a wrong token back.
  static constexpr std::int32_t kLayers = 4;
  static constexpr float kLayerOffset = 1000.0f;
  std::int64_t cached_length(std::int32_t seq) const { return seq_at(seq).committed.size(); }
  bool is_open(std::int32_t seq) const {
    const std::shared_lock lock(*mutex_);
    return seqs_.contains(seq);
  }
  // Unbounded unless a test sets a limit (the context-limit tests do); a
  // forward past it throws, as a real model's would.
  std::int64_t max_context() const { return max_context_; }
  void set_max_context(std::int64_t n) { max_context_ = n; }
  // A sink + window sequence sees its first `sink` committed tokens and its
  // last `window` (CachePolicy): its logits then hash those, and its positions
  // stay the text's. (No rotation here: both position conventions read alike.)
  void open(std::int32_t seq, const CachePolicy& policy = {}) {
    if (policy.kind == CachePolicy::Kind::kSinkWindow && (policy.sink < 0 || policy.window < 1))
      throw InvalidArgumentError("HashedContextModel: a sink + window cache needs sink >= 0 and window >= 1");
    const std::unique_lock lock(*mutex_);
    seqs_[seq] = Sequence{};
    seqs_[seq].policy = policy;
  }
  void close(std::int32_t seq) {
    const std::unique_lock lock(*mutex_);
    const auto it = seqs_.find(seq);
    if (it == seqs_.end()) throw InvalidArgumentError("HashedContextModel: unknown sequence");
    closed_[seq] = it->second.committed;  // what committed() reports after the close
    seqs_.erase(it);
  }
  std::int64_t forwards() const { return forwards_; }
  // A drafter's hot vocabulary (FR-Spec): logits of every other token are
  // -inf from now on, as a hot-vocabulary LM head writes them. Empty = all.
  void set_hot_vocabulary(std::vector<TokenId> hot) { hot_ = std::move(hot); }

  // The logits after `context` (what a correct forward must return).
  std::vector<float> logits_after(std::span<const TokenId> context) const {
    std::vector<float> out(static_cast<std::size_t>(vocab_));
    std::uint64_t h = 0x9e3779b97f4a7c15ull;
    const auto n = static_cast<std::int64_t>(context.size());
    for (std::int64_t i = std::max<std::int64_t>(0, n - order_); i < n; ++i)
      h = (h ^ static_cast<std::uint64_t>(context[static_cast<std::size_t>(i)] + 1)) * 0x100000001b3ull;
    for (std::int64_t v = 0; v < vocab_; ++v) {
      out[static_cast<std::size_t>(v)] = sharpness_ * gaussian(seed_, h, v);
      if (noise_ > 0.0f) out[static_cast<std::size_t>(v)] += noise_ * gaussian(noise_seed_, h, v);
    }
    if (!hot_.empty())
      for (std::int64_t v = 0; v < vocab_; ++v)
        if (std::find(hot_.begin(), hot_.end(), static_cast<TokenId>(v)) == hot_.end())
          out[static_cast<std::size_t>(v)] = -std::numeric_limits<float>::infinity();
    return out;
  }

  void forward(const ForwardRequest& request) {
    std::atomic_ref(forwards_).fetch_add(1, std::memory_order_relaxed);
    const bool want_logits = !request.logits.empty(), want_hidden = !request.hidden.empty();
    std::vector<float> logits, hidden;
    const std::int32_t first_layer = request.hidden_layer, layers = request.hidden_layers;
    if (want_hidden &&
        (first_layer == -1 ? layers != 1 : first_layer < 0 || layers < 1 || first_layer + layers > kLayers))
      throw UnsupportedError(fmt::format("HashedContextModel: {} layer(s) from layer {} asked of {} layers",
                                         layers, first_layer, kLayers));
    for (const auto& in : request.sequences) {
      auto& s = seq_at(in.seq_id);
      const auto before = in.extend_staged ? static_cast<std::int64_t>(s.staged.size()) : 0;
      if (!in.extend_staged) s.staged.clear();
      const auto n = static_cast<std::int64_t>(in.tokens.size());
      if (!in.mask.empty() && in.mask.size != before + n)
        throw ShapeError("HashedContextModel: mask size");
      if (static_cast<std::int64_t>(s.committed.size()) + before + n > max_context_)
        throw ShapeError(fmt::format("HashedContextModel: sequence {} would hold {} tokens, the context is {}",
                                     in.seq_id, s.committed.size() + static_cast<std::size_t>(before + n), max_context_));
      for (std::int64_t i = 0; i < n; ++i) {
        // The committed tokens this query sees, the staged ones in staging
        // order, then itself.
        std::vector<TokenId> ctx = s.visible();
        const auto evicted = static_cast<std::int64_t>(s.committed.size() - ctx.size());
        for (std::int64_t j = 0; j < before + i; ++j) {
          const bool visible =
              in.mask.empty() || in.mask.test(static_cast<std::int32_t>(before + i), static_cast<std::int32_t>(j));
          if (visible) ctx.push_back(s.staged[static_cast<std::size_t>(j)]);
        }
        if (!in.mask.empty() && !in.mask.test(static_cast<std::int32_t>(before + i), static_cast<std::int32_t>(before + i)))
          throw ShapeError("HashedContextModel: a query does not see itself");
        const TokenId tok = in.tokens[static_cast<std::size_t>(i)];
        if (tok < 0 || tok >= vocab_) throw InvalidArgumentError("HashedContextModel: token out of range");
        if (in.positions[static_cast<std::size_t>(i)] != evicted + static_cast<std::int64_t>(ctx.size()))
          throw ShapeError(fmt::format("HashedContextModel: position {} but {} visible tokens before it",
                                       in.positions[static_cast<std::size_t>(i)], evicted + static_cast<std::int64_t>(ctx.size())));
        ctx.push_back(tok);
        s.staged.push_back(tok);
        if (want_hidden)
          for (std::int32_t l = 0; l < layers; ++l) {
            hidden.push_back(ctx.size() >= 2 ? static_cast<float>(ctx[ctx.size() - 2]) : -1.0f);
            hidden.push_back(static_cast<float>(tok) +
                             static_cast<float>(std::max(first_layer, 0) + l) * kLayerOffset);
          }
        if (want_logits) {
          const auto l = logits_after(ctx);
          logits.insert(logits.end(), l.begin(), l.end());
        }
      }
    }
    // Written only now, into the caller's buffers, as a real model would.
    if (want_logits) {
      const auto rows = static_cast<std::int64_t>(logits.size()) / vocab_;
      std::copy(logits.begin(), logits.end(), host_output(request.logits, rows, vocab_, "HashedContextModel"));
    }
    if (want_hidden) {
      const auto width = 2 * static_cast<std::int64_t>(layers);
      const auto rows = static_cast<std::int64_t>(hidden.size()) / width;
      std::copy(hidden.begin(), hidden.end(), host_output(request.hidden, rows, width, "HashedContextModel"));
    }
  }

  // Note: keys/values of a staged token depend on its own visible context;
  // this model recomputes from tokens, so accept must keep a path whose
  // tokens, appended in order, are what the caller believes it committed.
  void accept(std::int32_t seq, std::span<const std::int32_t> path) {
    auto& s = seq_at(seq);
    for (std::size_t i = 0; i < path.size(); ++i) {
      const auto p = path[i];
      if (p < 0 || p >= static_cast<std::int32_t>(s.staged.size()) || (i > 0 && p <= path[i - 1]))
        throw InvalidArgumentError("HashedContextModel::accept: bad path");
      s.committed.push_back(s.staged[static_cast<std::size_t>(p)]);
    }
    s.staged.clear();
  }
  void rollback(std::int32_t seq, std::int64_t length) {
    auto& s = seq_at(seq);
    if (length < 0 || length > static_cast<std::int64_t>(s.committed.size()))
      throw InvalidArgumentError("HashedContextModel::rollback: bad length");
    s.committed.resize(static_cast<std::size_t>(length));
    s.staged.clear();
  }
  // The sequence's committed tokens; after close(), those it held then.
  std::span<const TokenId> committed(std::int32_t seq) const {
    {
      const std::shared_lock lock(*mutex_);
      if (!seqs_.contains(seq) && closed_.contains(seq)) return closed_.at(seq);
    }
    return seq_at(seq).committed;
  }

 private:
  struct Sequence {
    std::vector<TokenId> committed, staged;
    CachePolicy policy;
    std::vector<TokenId> visible() const {
      const auto n = static_cast<std::int64_t>(committed.size());
      if (policy.kind == CachePolicy::Kind::kDense || n <= policy.sink + policy.window) return committed;
      std::vector<TokenId> v(committed.begin(), committed.begin() + policy.sink);
      v.insert(v.end(), committed.end() - policy.window, committed.end());
      return v;
    }
  };
  // A reference stays valid while other sequences open and close (as a real
  // model's caches do, for hosts stepping engines on several threads).
  const Sequence& seq_at(std::int32_t seq) const {
    const std::shared_lock lock(*mutex_);
    const auto it = seqs_.find(seq);
    if (it == seqs_.end()) throw InvalidArgumentError("HashedContextModel: unknown sequence");
    return it->second;
  }
  Sequence& seq_at(std::int32_t seq) { return const_cast<Sequence&>(std::as_const(*this).seq_at(seq)); }
  // A standard normal from (seed, context hash, token) via Box-Muller on Philox.
  static float gaussian(std::uint64_t seed, std::uint64_t h, std::int64_t v) {
    RandomStream r(seed ^ h, static_cast<std::uint64_t>(v));
    const double u1 = r.uniform() + 1e-12, u2 = r.uniform();
    return static_cast<float>(std::sqrt(-2.0 * std::log(u1)) * std::cos(6.283185307179586 * u2));
  }

  std::int64_t vocab_;
  std::uint64_t seed_;
  int order_;
  float sharpness_, noise_;
  std::uint64_t noise_seed_;
  std::unordered_map<std::int32_t, Sequence> seqs_;
  std::unordered_map<std::int32_t, std::vector<TokenId>> closed_;
  std::unique_ptr<std::shared_mutex> mutex_ = std::make_unique<std::shared_mutex>();  // open/close vs lookups
  std::int64_t forwards_ = 0;
  std::int64_t max_context_ = std::numeric_limits<std::int64_t>::max();
  std::vector<TokenId> hot_;
};

// A prompt of 2..6 tokens that differs from request to request (`seq`).
inline std::vector<TokenId> request_prompt(std::int32_t seq, std::int64_t vocab) {
  std::vector<TokenId> p;
  for (std::int32_t i = 0; i < 2 + seq % 5; ++i) p.push_back(static_cast<TokenId>((seq * 7 + i * 3) % vocab));
  return p;
}

// Greedy decoding straight from the model's definition, no decoder involved:
// each of the `n` tokens is the argmax (lowest id on ties) of the logits after
// its context. The reference every greedy engine test compares against.
inline std::vector<TokenId> greedy_continuation(const HashedContextModel& model, std::span<const TokenId> prompt,
                                                std::int64_t n) {
  std::vector<TokenId> context(prompt.begin(), prompt.end()), out;
  for (std::int64_t i = 0; i < n; ++i) {
    const auto logits = model.logits_after(context);
    const auto best = static_cast<TokenId>(std::max_element(logits.begin(), logits.end()) - logits.begin());
    out.push_back(best);
    context.push_back(best);
  }
  return out;
}

}  // namespace specdec::testing
