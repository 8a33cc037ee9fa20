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
  if (!(tau >= 1.0) || tau > k + 1.0)
    throw InvalidArgumentError(fmt::format("predict_throughput: tau {} is outside [1, k + 1 = {}]", tau, k + 1));
  const auto draft_keys = draft.kv_limit > 0 ? std::min(context, draft.kv_limit) : context;
  ThroughputPrediction p;
  p.t_target = target.seconds(hw, batch, 1, context, overlap);
  p.t_verify = target.seconds(hw, batch, k + 1, context, overlap);
  p.t_draft = draft.forward.seconds(hw, batch, 1, draft_keys, overlap);
  p.delta_t = (k * p.t_draft + p.t_verify) / p.t_target;
  p.multiplier = tau / p.delta_t;
  return p;
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
