// Autoregressive decoding over any Model: the baseline every speculative
// method is measured against. It is the one round engine with nothing
// drafted (docs/design.md §1): every round the target scores the root alone
// and the rule draws the next token from that row, so prefill, warping,
// random streams, stop conditions and Stats are the speculative methods'
// own. Recursive rejection sampling over an empty tree is a draw from the
// root's row (its argmax for a greedy request), one uniform per token from
// the request's rule stream.
#pragma once

#include <cstdint>
#include <span>

#include "specdec/accept/recursive_rejection_sampling.hpp"
#include "specdec/engine/generation.hpp"
#include "specdec/engine/speculative_engine.hpp"
#include "specdec/engine/timed_model.hpp"
#include "specdec/tree/chain_builder.hpp"
#include "specdec/verify/model_verifier.hpp"

namespace specdec {

// The drafter of autoregressive decoding: asked for nothing (its budget is
// empty), it only says the vocabulary.
struct NothingDrafted {
  static constexpr bool kProvidesProbs = true;
  std::int64_t vocab = 0;
  std::int64_t vocab_size() const { return vocab; }
  void begin(std::span<const TokenId>, const SamplingParams&) {}
  void propose(const DraftRequest&, ProbMatrix&) {
    throw InvalidArgumentError("autoregressive decoding: nothing is drafted (the budget is empty)");
  }
  void commit(std::span<const TokenId>) {}
  void end() {}
};

// Its length policy: no drafts, ever.
struct NoDraftBudget {
  DraftBudget budget() const { return DraftBudget{0, 0, 0, 0.0f}; }
  void observe(const RoundOutcome&) {}
};

template <Model M>
class AutoregressiveDecoder {
 public:
  using Engine =
      SpeculativeEngine<NothingDrafted, ChainBuilder, ModelVerifier<M>, RecursiveRejectionSampling, NoDraftBudget>;

  explicit AutoregressiveDecoder(M& model, std::int32_t seq = 0)
      : verifier_(model),
        engine_(ChainBuilder{}, verifier_, RecursiveRejectionSampling{}),
        drafter_{model.vocab_size()},
        seq_(seq) {}
  AutoregressiveDecoder(const AutoregressiveDecoder&) = delete;  // the engine points at the verifier
  AutoregressiveDecoder& operator=(const AutoregressiveDecoder&) = delete;

  void set_model_clock(const ModelClock* target) { engine_.set_target_clock(target); }
  // The engine, for a host that steps requests itself (a batch of them:
  // each Request with its own NothingDrafted and NoDraftBudget).
  Engine& engine() { return engine_; }
  std::int64_t vocab_size() const { return drafter_.vocab; }

  GenerationResult generate(std::span<const TokenId> prompt, const GenerationOptions& options,
                            const TokenCallback& on_token = {}) {
    typename Engine::Request request(seq_, drafter_, policy_, options, on_token);
    engine_.begin(request, prompt);
    while (!request.done()) engine_.step(request);
    return request.take_result();
  }

 private:
  ModelVerifier<M> verifier_;
  Engine engine_;
  NothingDrafted drafter_;
  NoDraftBudget policy_;
  std::int32_t seq_;
};

}  // namespace specdec
