// The verifier the registry's recipes put over their target model: a
// ModelVerifier, which warps and verifies on the host, unless the model's
// backend specialises TargetVerifier for it (the CUDA model verifies on its
// device: cuda/llama_methods.hpp). A specialisation gives `type` (a
// Verifier) and `make(model)`, and must be visible wherever the recipes are
// instantiated for that model.
#pragma once

#include "specdec/verify/model_verifier.hpp"

namespace specdec {

template <class M>
struct TargetVerifier {
  using type = ModelVerifier<M>;
  static type make(M& model) { return type(model); }
};

template <class M>
using target_verifier_t = typename TargetVerifier<M>::type;

}  // namespace specdec
