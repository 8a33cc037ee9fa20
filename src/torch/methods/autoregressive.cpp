// autoregressive: the baseline every method is measured against; the one
// round engine with nothing drafted (engine/autoregressive_decoder.hpp), one
// request or a continuous batch.
#include "specdec/engine/autoregressive_decoder.hpp"

#include "parts.hpp"

namespace specdec::torch_backend::methods {
namespace {

struct Autoregressive {
  Timed target;
  AutoregressiveDecoder<Timed> decoder;
  explicit Autoregressive(const MethodContext& c) : target(c.target), decoder(target) {
    decoder.set_model_clock(&target.clock());
  }
  GenerationResult generate(std::span<const TokenId> p, const GenerationOptions& o, const TokenCallback& cb) {
    return decoder.generate(p, o, cb);
  }
  void set_round_view_observer(std::function<void(const RoundView&)> f) {
    decoder.engine().set_round_view_observer(std::move(f));
  }
  BatchRun generate_batch(std::span<const std::vector<TokenId>> p, std::span<const GenerationOptions> o,
                          std::size_t max_batch) {
    return run_batch<NothingDrafted>(decoder.engine(), p, o, max_batch, NoDraftBudget{}, nullptr,
                                     [&](std::int32_t) { return std::tuple(decoder.vocab_size()); });
  }
};

}  // namespace

MethodInfo autoregressive_method() {
  return {"autoregressive", "the target alone, one token per forward (the baseline)", "", MethodModels::kTargetOnly,
          false, {}, [](const MethodContext& c) { return AnyDecoder::make<Autoregressive>("autoregressive", c); }};
}

}  // namespace specdec::torch_backend::methods
