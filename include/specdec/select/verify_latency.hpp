// The latency profile Speculative Verification schedules with (Kim et al.,
// arXiv 2509.24328, §4.3, §6): Lat(b, n), the seconds of one target forward
// verifying n tokens in all for b sequences, and fixed(b), the seconds a
// round spends outside that forward (drafting, the companion's forward)
// whatever is verified. The paper's GPUs overlap drafting with the target's
// forward, so its goodput divides by Lat alone; on a CPU they run one after
// the other and a round lasts fixed(b) + Lat(b, n). Both are measured on the
// machine (measure_verify_latency) and interpolated between the measured
// points: linearly in tokens per sequence, linearly in b between measured
// batch sizes, proportionally beyond the largest.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <numeric>
#include <span>
#include <vector>

#include <fmt/format.h>

#include "specdec/concepts.hpp"
#include "specdec/core/error.hpp"
#include "specdec/core/logit_rows.hpp"

namespace specdec {

class VerifyLatency {
 public:
  VerifyLatency() = default;
  // batches: increasing batch sizes; tokens: increasing tokens per sequence;
  // seconds: [batch][tokens] row-major; fixed: one per batch size.
  VerifyLatency(std::vector<std::int32_t> batches, std::vector<std::int32_t> tokens, std::vector<double> seconds,
                std::vector<double> fixed)
      : batches_(std::move(batches)), tokens_(std::move(tokens)), seconds_(std::move(seconds)), fixed_(std::move(fixed)) {
    check_axis(batches_, "batch sizes");
    check_axis(tokens_, "tokens per sequence");
    if (seconds_.size() != batches_.size() * tokens_.size() || fixed_.size() != batches_.size())
      throw ShapeError(fmt::format("VerifyLatency: {} batch sizes x {} token counts need {} forward times and {} "
                                   "fixed times, got {} and {}",
                                   batches_.size(), tokens_.size(), batches_.size() * tokens_.size(), batches_.size(),
                                   seconds_.size(), fixed_.size()));
    for (const double s : seconds_)
      if (!(s > 0.0)) throw InvalidArgumentError(fmt::format("VerifyLatency: a forward time {} is not positive", s));
    for (const double s : fixed_)
      if (!(s >= 0.0)) throw InvalidArgumentError(fmt::format("VerifyLatency: a fixed time {} is negative", s));
  }

  bool empty() const { return seconds_.empty(); }
  // Lat(b, n): one forward over n tokens of b sequences (n >= b: each
  // sequence's root is always scored).
  double seconds(std::int32_t batch, double tokens) const {
    return at_batch(batch, [&](std::size_t i) { return in_tokens(i, tokens / batch); });
  }
  double fixed_seconds(std::int32_t batch) const {
    return at_batch(batch, [&](std::size_t i) { return fixed_[i]; });
  }

  const std::vector<std::int32_t>& batches() const { return batches_; }
  const std::vector<std::int32_t>& tokens() const { return tokens_; }
  const std::vector<double>& forward_seconds() const { return seconds_; }
  const std::vector<double>& fixed() const { return fixed_; }

 private:
  static void check_axis(const std::vector<std::int32_t>& v, const char* what) {
    if (v.empty()) throw InvalidArgumentError(fmt::format("VerifyLatency: no {}", what));
    for (std::size_t i = 0; i < v.size(); ++i)
      if (v[i] < 1 || (i > 0 && v[i] <= v[i - 1]))
        throw InvalidArgumentError(fmt::format("VerifyLatency: the {} must be positive and increasing", what));
  }
  template <class F>
  double at_batch(std::int32_t batch, F value) const {
    if (empty()) throw InvalidArgumentError("VerifyLatency: no profile (measure one)");
    if (batch < 1) throw InvalidArgumentError(fmt::format("VerifyLatency: batch size {}", batch));
    const auto hi = std::lower_bound(batches_.begin(), batches_.end(), batch);
    if (hi == batches_.end()) return value(batches_.size() - 1) * batch / batches_.back();
    const auto j = static_cast<std::size_t>(hi - batches_.begin());
    if (*hi == batch || j == 0) return value(j);  // below the profile: at least the smallest batch's time
    const double w = static_cast<double>(batch - batches_[j - 1]) / (batches_[j] - batches_[j - 1]);
    return (1 - w) * value(j - 1) + w * value(j);
  }
  double in_tokens(std::size_t b, double per_sequence) const {
    const double* row = seconds_.data() + b * tokens_.size();
    if (per_sequence <= tokens_.front()) return row[0];
    for (std::size_t k = 1; k < tokens_.size(); ++k)
      if (per_sequence <= tokens_[k]) {
        const double w = (per_sequence - tokens_[k - 1]) / (tokens_[k] - tokens_[k - 1]);
        return (1 - w) * row[k - 1] + w * row[k];
      }
    const auto n = tokens_.size();  // beyond the profile: the last segment's slope
    if (n == 1) return row[0] * per_sequence / tokens_[0];
    const double slope = (row[n - 1] - row[n - 2]) / (tokens_[n - 1] - tokens_[n - 2]);
    return row[n - 1] + slope * (per_sequence - tokens_[n - 1]);
  }

  std::vector<std::int32_t> batches_, tokens_;
  std::vector<double> seconds_, fixed_;
};

struct VerifyLatencyOptions {
  std::vector<std::int32_t> batches{1, 2, 4, 8, 16, 32, 64};
  std::vector<std::int32_t> tokens{1, 2, 3, 4, 6, 8};  // per sequence: the root + drafted tokens verified
  std::int32_t draft_length = 5;  // k: fixed(b) drafts k tokens per sequence and companion-scores k + 1
  std::int32_t context = 64;      // committed tokens per sequence before the timed forwards (fewer if a
                                  // model's context is short)
  std::int32_t repeats = 5;       // the median of this many
  std::int32_t first_seq = 1 << 20;  // the sequence ids used (first_seq + i), unused by the host
};

namespace detail {

// Forwards of `count` sequences: `tokens` new tokens each after a committed
// context, timed; the new tokens are never accepted.
template <Model M>
class ForwardTimer {
 public:
  // `most_tokens`: the longest forward to be timed; the context is cut so
  // that it fits the model's.
  ForwardTimer(M& model, const VerifyLatencyOptions& o, std::int32_t count, std::int32_t most_tokens)
      : model_(&model), o_(o), count_(count) {
    const auto room = model.max_context() - most_tokens;
    if (room < 1)
      throw InvalidArgumentError(fmt::format("measure_verify_latency: a model holds {} tokens, a timed forward needs {}",
                                             model.max_context(), most_tokens + 1));
    o_.context = static_cast<std::int32_t>(std::min<std::int64_t>(o.context, room));
    for (std::int32_t i = 0; i < count; ++i) {
      const auto seq = o.first_seq + i;
      model.open(seq, CachePolicy::dense());
      std::vector<TokenId> tokens(static_cast<std::size_t>(o_.context));
      std::vector<std::int64_t> positions(tokens.size());
      for (std::size_t t = 0; t < tokens.size(); ++t)
        tokens[t] = static_cast<TokenId>((7 * t + 13 * static_cast<std::size_t>(i) + 3) %
                                         static_cast<std::size_t>(model.vocab_size()));
      std::iota(positions.begin(), positions.end(), std::int64_t{0});
      const SequenceInput in{seq, tokens, positions};
      model.forward(ForwardRequest{std::span(&in, 1)});
      std::vector<std::int32_t> path(tokens.size());
      std::iota(path.begin(), path.end(), 0);
      model.accept(seq, path);
    }
  }
  ~ForwardTimer() {
    for (std::int32_t i = 0; i < count_; ++i) model_->close(o_.first_seq + i);
  }
  ForwardTimer(const ForwardTimer&) = delete;
  ForwardTimer& operator=(const ForwardTimer&) = delete;

  // Seconds of one forward of `batch` sequences with `tokens` new tokens each.
  double time(std::int32_t batch, std::int32_t tokens) {
    const auto n = static_cast<std::size_t>(batch) * static_cast<std::size_t>(tokens);
    tokens_.assign(n, 5);
    positions_.resize(n);
    inputs_.resize(static_cast<std::size_t>(batch));
    for (std::int32_t b = 0; b < batch; ++b) {
      const auto at = static_cast<std::size_t>(b) * static_cast<std::size_t>(tokens);
      for (std::int32_t t = 0; t < tokens; ++t) positions_[at + static_cast<std::size_t>(t)] = o_.context + t;
      inputs_[static_cast<std::size_t>(b)] =
          SequenceInput{o_.first_seq + b, std::span(tokens_).subspan(at, static_cast<std::size_t>(tokens)),
                        std::span(positions_).subspan(at, static_cast<std::size_t>(tokens))};
    }
    ForwardRequest request{inputs_};
    request.logits = logits_.view(static_cast<std::int64_t>(n), model_->vocab_size());
    const auto t0 = std::chrono::steady_clock::now();
    model_->forward(request);
    return std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }

 private:
  M* model_;
  VerifyLatencyOptions o_;
  std::int32_t count_;
  std::vector<TokenId> tokens_;
  std::vector<std::int64_t> positions_;
  std::vector<SequenceInput> inputs_;
  HostRows logits_;
};

inline double median_of(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  return v[v.size() / 2];
}

}  // namespace detail

// Measures Lat(b, m) for every batch size b and tokens per sequence m of the
// options, and fixed(b) = k one-token forwards of the draft for b sequences
// (drafting is batched across requests, one forward per level) plus one
// companion forward over b x (k + 1) tokens. Each repeat runs the draft's,
// the companion's and then the target's forwards, as a round does, so the
// target is timed with the caches as the others leave them. The models'
// sequences first_seq.. must be free; they are closed again.
template <Model T, Model D, Model C>
VerifyLatency measure_verify_latency(T& target, D& draft, C& companion, const VerifyLatencyOptions& o = {}) {
  if (o.batches.empty() || o.tokens.empty() || o.repeats < 1 || o.draft_length < 0 || o.context < 1)
    throw InvalidArgumentError("measure_verify_latency: need batch sizes, token counts, repeats >= 1, context >= 1");
  const auto most = *std::max_element(o.batches.begin(), o.batches.end());
  const auto longest = std::max(*std::max_element(o.tokens.begin(), o.tokens.end()), o.draft_length + 1);
  detail::ForwardTimer<T> t(target, o, most, longest);
  detail::ForwardTimer<D> d(draft, o, most, 1);
  detail::ForwardTimer<C> c(companion, o, most, o.draft_length + 1);
  std::vector<double> seconds, fixed;
  for (const auto b : o.batches) {
    std::vector<double> f;
    std::vector<std::vector<double>> lat(o.tokens.size());
    for (std::int32_t r = 0; r < o.repeats; ++r) {
      double draft_seconds = 0.0;
      for (std::int32_t k = 0; k < o.draft_length; ++k) draft_seconds += d.time(b, 1);
      f.push_back(draft_seconds + c.time(b, o.draft_length + 1));
      for (std::size_t m = 0; m < o.tokens.size(); ++m) lat[m].push_back(t.time(b, o.tokens[m]));
    }
    fixed.push_back(detail::median_of(f));
    for (auto& v : lat) seconds.push_back(detail::median_of(v));
  }
  return VerifyLatency(o.batches, o.tokens, std::move(seconds), std::move(fixed));
}

// Lat(1, n) of the target alone for n in `tokens` (fixed = 0): the forward
// cost profile of policy/cost_aware_tree.hpp, measured at start-up. The
// median of `repeats` forwards each, after `context` committed tokens.
template <Model T>
VerifyLatency measure_target_latency(T& target, std::vector<std::int32_t> tokens, std::int32_t repeats = 5,
                                     std::int32_t context = 64) {
  VerifyLatencyOptions o;
  o.batches = {1};
  o.tokens = std::move(tokens);
  o.repeats = repeats;
  o.context = context;
  if (o.tokens.empty() || repeats < 1 || context < 1)
    throw InvalidArgumentError("measure_target_latency: need token counts, repeats >= 1, context >= 1");
  detail::ForwardTimer<T> t(target, o, 1, *std::max_element(o.tokens.begin(), o.tokens.end()));
  for (const auto n : o.tokens) t.time(1, n);  // warm every shape once
  std::vector<double> seconds;
  for (const auto n : o.tokens) {
    std::vector<double> v;
    for (std::int32_t r = 0; r < repeats; ++r) v.push_back(t.time(1, n));
    seconds.push_back(detail::median_of(v));
  }
  return VerifyLatency({1}, o.tokens, std::move(seconds), {0.0});
}

}  // namespace specdec
