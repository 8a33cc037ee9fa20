// SPIRe's performance model of speculative decoding (Neelam et al., arXiv
// 2504.06419, §2): a forward costs max(compute, memory), compute its FLOPs at
// the machine's arithmetic rate and memory the bytes of weights and KV cache
// it reads at the machine's bandwidth (SPIRe writes the latter as bytes x
// HOI, the hardware's operational intensity, in FLOP units). Then
//
//   throughput multiplier = tau / Delta t,
//   Delta t = (k t_draft + t_verify) / t_target,
//
// with t_target one target forward of one token per sequence, t_verify one of
// k + 1 tokens, t_draft one draft step, all at batch B and context L. KV
// bytes grow with B x L and weight bytes do not, which is why a draft with a
// sparse (sink + window) cache pays at large batch and long context: MagicDec
// (arXiv 2408.11049) drafts with the target's weights and a sparse cache,
// SPIRe with a small model and a sparse cache.
//
// A host or a policy queries it to pick k (best_draft_length) or a method per
// batch and context; `specdec bench --context` prints its predictions beside
// the measurements.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <utility>
#include <vector>

#include <fmt/format.h>

#include "specdec/core/error.hpp"
#include "specdec/io/llama_config.hpp"

namespace specdec {

// What the machine does per second: bytes it streams from memory, and FLOPs
// its matmuls run at (measure both on the forward itself: a one-token step is
// bound by bytes, a many-row forward by FLOPs).
struct HardwareRates {
  double bytes_per_second = 0.0;
  double flops_per_second = 0.0;
};

// SPIRe's max(compute, memory); its footnote's compute + memory, for a
// machine that does not overlap them.
enum class CostOverlap : std::uint8_t { kMax, kSum };

// One model's forward cost terms.
struct ForwardCost {
  double weight_bytes = 0.0;             // N: the weights one forward reads
  double matmul_flops_per_token = 0.0;   // 2 x the parameters of the matmuls, per new token
  double kv_bytes_per_token = 0.0;       // one cached token's keys and values, all layers
  double attention_flops_per_key = 0.0;  // one new token against one key (q.k and p.v), all layers

  // The terms of a Llama model whose weights take `weight_bytes` bytes each
  // (2 for bf16) and whose cache keeps `kv_bytes` per value (4 for f32). The
  // embedding is a lookup, not a matmul; a tied LM head is read once.
  static ForwardCost of_llama(const io::LlamaConfig& c, double weight_bytes, double kv_bytes) {
    const double d = static_cast<double>(c.hidden_size), layers = static_cast<double>(c.num_hidden_layers);
    const double q = static_cast<double>(c.num_attention_heads * c.head_dim),
                 kv = static_cast<double>(c.num_key_value_heads * c.head_dim);
    const double per_layer = d * (q + 2 * kv) + q * d + 3 * d * static_cast<double>(c.intermediate_size);
    const double head = static_cast<double>(c.vocab_size) * d;
    const double matmul_params = layers * per_layer + head;
    const double embed = c.tie_word_embeddings ? 0.0 : head;  // a tied head's rows are the embedding's
    ForwardCost f;
    f.weight_bytes = (matmul_params + embed) * weight_bytes;
    f.matmul_flops_per_token = 2.0 * matmul_params;
    f.kv_bytes_per_token = layers * 2.0 * kv * kv_bytes;
    f.attention_flops_per_key = layers * 4.0 * q;
    return f;
  }

  double compute_seconds(const HardwareRates& hw, std::int64_t batch, std::int64_t tokens, std::int64_t keys) const {
    const double rows = static_cast<double>(batch) * static_cast<double>(tokens);
    return rows * (matmul_flops_per_token + static_cast<double>(keys) * attention_flops_per_key) / hw.flops_per_second;
  }
  double memory_seconds(const HardwareRates& hw, std::int64_t batch, std::int64_t keys) const {
    return (weight_bytes + static_cast<double>(batch) * static_cast<double>(keys) * kv_bytes_per_token) /
           hw.bytes_per_second;
  }
  // A forward of `tokens` new tokens for each of `batch` sequences, each
  // attending to `keys` cached keys.
  double seconds(const HardwareRates& hw, std::int64_t batch, std::int64_t tokens, std::int64_t keys,
                 CostOverlap overlap = CostOverlap::kMax) const {
    const double c = compute_seconds(hw, batch, tokens, keys), m = memory_seconds(hw, batch, keys);
    return overlap == CostOverlap::kMax ? std::max(c, m) : c + m;
  }
};

// The draft's side: its forward cost, and the keys a draft step reads at
// most (sink + window for a sparse cache; 0: the whole context).
struct DraftCost {
  ForwardCost forward;
  std::int64_t kv_limit = 0;
};

struct ThroughputPrediction {
  double t_target = 0.0, t_draft = 0.0, t_verify = 0.0;  // seconds
  double delta_t = 0.0;                                  // (k t_draft + t_verify) / t_target
  double multiplier = 0.0;                               // tau / delta_t
};

// tau / Delta t from the three forwards' seconds.
inline ThroughputPrediction throughput_from_seconds(double t_target, double t_draft, double t_verify, std::int32_t k,
                                                    double tau) {
  if (!(t_target > 0.0) || !(t_draft >= 0.0) || !(t_verify > 0.0))
    throw InvalidArgumentError(fmt::format(
        "throughput_from_seconds: t_target {} and t_verify {} must be positive, t_draft {} >= 0", t_target, t_verify,
        t_draft));
  if (k < 0 || !(tau >= 1.0) || tau > k + 1.0)
    throw InvalidArgumentError(fmt::format("throughput_from_seconds: tau {} is outside [1, k + 1 = {}]", tau, k + 1));
  ThroughputPrediction p;
  p.t_target = t_target;
  p.t_draft = t_draft;
  p.t_verify = t_verify;
  p.delta_t = (k * t_draft + t_verify) / t_target;
  p.multiplier = tau / p.delta_t;
  return p;
}

// SPIRe §2 at batch B and context L (the keys each sequence holds), for
// chains of k drafts that emit tau tokens per round on average.
inline ThroughputPrediction predict_throughput(const ForwardCost& target, const DraftCost& draft,
                                               const HardwareRates& hw, std::int64_t batch, std::int64_t context,
                                               std::int32_t k, double tau, CostOverlap overlap = CostOverlap::kMax) {
  if (!(hw.bytes_per_second > 0.0) || !(hw.flops_per_second > 0.0))
    throw InvalidArgumentError("predict_throughput: the machine's bytes/s and FLOP/s must be positive");
  if (batch < 1 || context < 0 || k < 0 || draft.kv_limit < 0)
    throw InvalidArgumentError(fmt::format(
        "predict_throughput: batch {} (>= 1), context {} (>= 0), k {} (>= 0) and kv_limit {} (>= 0)", batch, context,
        k, draft.kv_limit));
  const auto draft_keys = draft.kv_limit > 0 ? std::min(context, draft.kv_limit) : context;
  return throughput_from_seconds(target.seconds(hw, batch, 1, context, overlap),
                                 draft.forward.seconds(hw, batch, 1, draft_keys, overlap),
                                 target.seconds(hw, batch, k + 1, context, overlap), k, tau);
}

// The terms SPIRe's max() leaves out on a CPU, measured on the forward
// itself (docs/RESULTS.md, "MagicDec on this CPU"): the matmuls' time
// depends on how many rows share each read of the weights, well below the
// FLOP rate of a wide forward at tens of rows; and attention runs between a
// layer's matmuls, not overlapped with them, reading each sequence's keys
// once per group of queries. So a forward of B sequences x n new tokens
// whose queries see `keys` cached keys costs
//   weights(B n) + B x keys x attention_seconds_per_key x (1 + later x (reads(n) - 1)),
// with weights(r) the measured seconds of r one-token sequences at no
// context (interpolated linearly between the measured row counts,
// extrapolated from the last two), attention_seconds_per_key measured on
// one-token steps, reads(n) = ceil(n x heads_per_kv / queries_per_read) the
// reads of a kv head's keys for n tokens (specdec's kernel attends up to 4
// queries of a kv head per read; 1 and 1: linear in n), and `later` what a
// read after the first costs against the first: 1 when every read comes
// from memory, less when the first leaves the keys in the cache for the
// next, more when attention is bound by its arithmetic per query (measured
// on 5-token forwards; docs/RESULTS.md, "The performance model's missing
// term, measured").
class MeasuredForwardCost {
 public:
  MeasuredForwardCost(std::vector<std::int64_t> rows, std::vector<double> seconds,
                      double attention_seconds_per_key, std::int64_t heads_per_kv = 1,
                      std::int64_t queries_per_read = 1, double later_read = 1.0)
      : rows_(std::move(rows)),
        seconds_(std::move(seconds)),
        per_key_(attention_seconds_per_key),
        heads_per_kv_(heads_per_kv),
        queries_per_read_(queries_per_read),
        later_read_(later_read) {
    bool ok = rows_.size() >= 2 && rows_.size() == seconds_.size() && per_key_ >= 0.0 && heads_per_kv_ >= 1 &&
              queries_per_read_ >= 1 && later_read_ >= 0.0;
    for (std::size_t i = 0; ok && i < rows_.size(); ++i)
      ok = rows_[i] >= 1 && seconds_[i] > 0.0 && (i == 0 || rows_[i] > rows_[i - 1]);
    if (!ok)
      throw InvalidArgumentError(
          "MeasuredForwardCost: at least two increasing row counts >= 1 with positive seconds, attention "
          "seconds >= 0, heads per kv head and queries per read >= 1, and a later read's cost >= 0");
  }
  double weights_seconds(std::int64_t rows) const {
    std::size_t i = 1;
    while (i + 1 < rows_.size() && rows_[i] < rows) ++i;  // the segment [i - 1, i] that holds rows, or the last
    const double r0 = static_cast<double>(rows_[i - 1]), r1 = static_cast<double>(rows_[i]);
    const double t = seconds_[i - 1] + (seconds_[i] - seconds_[i - 1]) * (static_cast<double>(rows) - r0) / (r1 - r0);
    return std::max(t, seconds_.front() * 0.5);  // below the first count: no cheaper than half a one-row forward
  }
  // Reads of a kv head's keys for `tokens` new tokens of a sequence, as
  // many of the first read's cost as they take (1 for one token).
  double read_cost(std::int64_t tokens) const {
    const auto reads = [&](std::int64_t n) { return (n * heads_per_kv_ + queries_per_read_ - 1) / queries_per_read_; };
    return 1.0 + later_read_ * (static_cast<double>(reads(tokens)) / static_cast<double>(reads(1)) - 1.0);
  }
  double seconds(std::int64_t batch, std::int64_t tokens, std::int64_t keys) const {
    return weights_seconds(batch * tokens) +
           static_cast<double>(batch) * static_cast<double>(keys) * per_key_ * read_cost(tokens);
  }
  double attention_seconds_per_key() const { return per_key_; }
  double later_read() const { return later_read_; }
  // The same costs with another later read's cost (1: every read from memory).
  MeasuredForwardCost with_later_read(double later) const {
    return MeasuredForwardCost(rows_, seconds_, per_key_, heads_per_kv_, queries_per_read_, later);
  }

 private:
  std::vector<std::int64_t> rows_;
  std::vector<double> seconds_;
  double per_key_;
  std::int64_t heads_per_kv_, queries_per_read_;
  double later_read_;
};

// The same prediction from measured costs: a draft step reads at most
// `draft_kv_limit` keys (0: the whole context).
inline ThroughputPrediction predict_throughput(const MeasuredForwardCost& target, const MeasuredForwardCost& draft,
                                               std::int64_t draft_kv_limit, std::int64_t batch, std::int64_t context,
                                               std::int32_t k, double tau) {
  if (batch < 1 || context < 0 || k < 0 || draft_kv_limit < 0)
    throw InvalidArgumentError(fmt::format(
        "predict_throughput: batch {} (>= 1), context {} (>= 0), k {} (>= 0) and kv_limit {} (>= 0)", batch, context,
        k, draft_kv_limit));
  const auto draft_keys = draft_kv_limit > 0 ? std::min(context, draft_kv_limit) : context;
  return throughput_from_seconds(target.seconds(batch, 1, context), draft.seconds(batch, 1, draft_keys),
                                 target.seconds(batch, k + 1, context), k, tau);
}

// Tokens a round emits on average when each draft is accepted with
// probability alpha independently (Leviathan et al., arXiv 2211.17192, eq. 1):
// (1 - alpha^(k+1)) / (1 - alpha).
inline double expected_tokens(double alpha, std::int32_t k) {
  if (!(alpha >= 0.0 && alpha <= 1.0) || k < 0)
    throw InvalidArgumentError(fmt::format("expected_tokens: alpha {} must be in [0, 1] and k {} >= 0", alpha, k));
  if (alpha == 1.0) return k + 1.0;
  return (1.0 - std::pow(alpha, k + 1)) / (1.0 - alpha);
}

// The k in [1, max_k] with the largest predicted multiplier at acceptance
// alpha; 0 when no k beats autoregressive decoding (multiplier <= 1).
inline std::int32_t best_draft_length(const ForwardCost& target, const DraftCost& draft, const HardwareRates& hw,
                                      std::int64_t batch, std::int64_t context, double alpha, std::int32_t max_k) {
  std::int32_t best = 0;
  double best_multiplier = 1.0;
  for (std::int32_t k = 1; k <= max_k; ++k) {
    const double m = predict_throughput(target, draft, hw, batch, context, k, expected_tokens(alpha, k)).multiplier;
    if (m > best_multiplier) {
      best_multiplier = m;
      best = k;
    }
  }
  return best;
}

}  // namespace specdec
