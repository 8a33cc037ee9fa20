// autoregressive: the baseline every method is measured against.
#include "specdec/engine/autoregressive_decoder.hpp"

#include "parts.hpp"

namespace specdec::torch_backend::methods {
namespace {

struct Autoregressive {
  Timed target;
  AutoregressiveDecoder<Timed> decoder;
  explicit Autoregressive(const MethodContext& c) : target(c.target), decoder(target, c.sampling) {
    decoder.set_model_clock(&target.clock());
  }
  GenerationResult generate(std::span<const TokenId> p, const GenerationOptions& o, const TokenCallback& cb) {
    return decoder.generate(p, o, cb);
  }
};

}  // namespace

MethodInfo autoregressive_method() {
  return {"autoregressive", "the target alone, one token per forward (the baseline)", "", MethodModels::kTargetOnly,
          false, {}, [](const MethodContext& c) { return AnyDecoder::make<Autoregressive>("autoregressive", c); }};
}

}  // namespace specdec::torch_backend::methods
