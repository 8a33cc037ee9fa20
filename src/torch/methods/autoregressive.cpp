// autoregressive: the baseline every method is measured against.
#include "specdec/engine/autoregressive_decoder.hpp"
#include "specdec/tree/chain_builder.hpp"

#include "parts.hpp"

namespace specdec::torch_backend::methods {
namespace {

// Batched autoregressive decoding is the one round engine with nothing
// drafted: every round the target scores each request's root alone and the
// rule draws the next token from that row (AutoregressiveDecoder's law, from
// the same random stream).
struct NothingDrafted {
  static constexpr bool kProvidesProbs = true;
  std::int64_t vocab = 0;
  std::int64_t vocab_size() const { return vocab; }
  void begin(std::span<const TokenId>, const SamplingParams&) {}
  void propose(const DraftRequest&, ProbMatrix&) {
    throw InvalidArgumentError("autoregressive: nothing is drafted (the budget is empty)");
  }
  void commit(std::span<const TokenId>) {}
  void end() {}
};
struct NoDraftBudget {
  DraftBudget budget() const { return DraftBudget{0, 0, 0, 0.0f}; }
  void observe(const RoundOutcome&) {}
};

template <class Rule>
using BatchEngine = SpeculativeEngine<NothingDrafted, ChainBuilder, ModelVerifier<Timed>, Rule, NoDraftBudget>;

struct Autoregressive {
  Timed target;
  AutoregressiveDecoder<Timed> decoder;
  ModelVerifier<Timed> verifier;
  explicit Autoregressive(const MethodContext& c) : target(c.target), decoder(target), verifier(target) {
    decoder.set_model_clock(&target.clock());
  }
  GenerationResult generate(std::span<const TokenId> p, const GenerationOptions& o, const TokenCallback& cb) {
    return decoder.generate(p, o, cb);
  }
  BatchRun generate_batch(std::span<const std::vector<TokenId>> p, std::span<const GenerationOptions> o,
                          std::size_t max_batch) {
    // Recursive rejection sampling over an empty tree draws from the root's
    // row: the argmax for a greedy request, so one rule serves a mixed batch.
    if (std::all_of(o.begin(), o.end(), [](const GenerationOptions& x) { return x.sampling.is_greedy(); }))
      return batch(GreedyAcceptance{}, p, o, max_batch);
    return batch(RecursiveRejectionSampling{}, p, o, max_batch);
  }

 private:
  template <class Rule>
  BatchRun batch(Rule rule, std::span<const std::vector<TokenId>> p, std::span<const GenerationOptions> o,
                 std::size_t max_batch) {
    BatchEngine<Rule> engine(ChainBuilder{}, verifier, std::move(rule));
    engine.set_target_clock(&target.clock());
    return run_batch<NothingDrafted>(engine, p, o, max_batch, NoDraftBudget{}, nullptr,
                                     [&](std::int32_t) { return std::tuple(target.vocab_size()); });
  }
};

}  // namespace

MethodInfo autoregressive_method() {
  return {"autoregressive", "the target alone, one token per forward (the baseline)", "", MethodModels::kTargetOnly,
          false, {}, [](const MethodContext& c) { return AnyDecoder::make<Autoregressive>("autoregressive", c); }};
}

}  // namespace specdec::torch_backend::methods
