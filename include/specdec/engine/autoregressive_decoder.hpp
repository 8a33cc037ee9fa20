// Autoregressive decoding over any Model: the baseline every speculative method
// is measured against, with the same prefill, warping, stop conditions and
// Stats (each round verifies an empty tree and emits one token).
#pragma once

#include <chrono>
#include <cstdint>
#include <span>

#include "specdec/accept/row_math.hpp"
#include "specdec/engine/generation.hpp"
#include "specdec/engine/timed_model.hpp"
#include "specdec/verify/model_verifier.hpp"

namespace specdec {

template <Model M>
class AutoregressiveDecoder {
 public:
  explicit AutoregressiveDecoder(M& model, std::int32_t seq = 0) : verifier_(model), seq_(seq) {}

  void set_model_clock(const ModelClock* target) { target_clock_ = target; }

  GenerationResult generate(std::span<const TokenId> prompt, const GenerationOptions& options,
                            const TokenCallback& on_token = {}) {
    options.validate();
    if (prompt.empty()) throw InvalidArgumentError("generate: the prompt is empty (it needs at least one token)");
    GenerationResult out;
    Stats& stats = out.stats;
    stats.prompt_tokens = static_cast<std::int64_t>(prompt.size());
    TokenSink sink(options, out, on_token);
    sink.limit_context(verifier_.max_context(), stats.prompt_tokens, "AutoregressiveDecoder");
    RandomStream rng(options.sampling.seed, options.rule_stream());  // the stream the rules draw bonus tokens from
    const auto start = Clock::now();
    verifier_.begin(seq_, prompt);
    stats.prefill_seconds = seconds_between(start, Clock::now());
    const ModelClock target0 = target_clock_ ? *target_clock_ : ModelClock{};
    DraftTree tree(prompt.back());
    VerifyResult result;
    bool done = sink.full();
    while (!done) {
      const auto t0 = Clock::now();
      const ProbRows probs = verifier_.score(seq_, tree, options.sampling);
      const auto t1 = Clock::now();
      const auto row = probs.row(0);
      result.clear();
      result.bonus_token = row_math::sample_row(row.data(), static_cast<std::int64_t>(row.size()), rng.uniform());
      if (result.bonus_token == kNoToken)
        throw InvalidDistributionError("AutoregressiveDecoder: the target distribution has no mass");
      verifier_.commit(seq_, tree, result);
      stats.verify_seconds += seconds_between(t0, t1);
      stats.accept_seconds += seconds_between(t1, Clock::now());
      stats.acceptance.record(result, true);
      const bool first = out.tokens.empty();
      done = sink.push(result.bonus_token);
      if (first) stats.time_to_first_token_seconds = seconds_between(start, Clock::now());
      tree.clear(result.bonus_token);
    }
    verifier_.end(seq_);
    stats.total_seconds = seconds_between(start, Clock::now());
    stats.new_tokens = static_cast<std::int64_t>(out.tokens.size());
    record_model_time(target_clock_, target0, stats.target_model_seconds, stats.target_forwards);
    return out;
  }

 private:
  using Clock = DecodeClock;

  ModelVerifier<M> verifier_;
  std::int32_t seq_;
  const ModelClock* target_clock_ = nullptr;
};

}  // namespace specdec
