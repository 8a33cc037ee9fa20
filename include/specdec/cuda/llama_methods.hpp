// The library's methods over the CUDA model: the standard registry
// (methods/standard_methods.hpp) instantiated for cuda::LlamaModel, with the
// target verified on the device. The recipes that put a TargetVerifier over
// their target (autoregressive, chain, tree, dynamic, sequoia, ngram) get a
// cuda::DeviceVerifier on the model's stream: warp and rule run on the
// device and only the accepted paths come back. DuoDecoding and SV verify
// with the host path (their rows brought back). The feature-head methods
// (lyanna, eagle) need libtorch's heads and are not here.
//
// Link specdec::cuda; no CUDA headers needed.
#pragma once

#include "specdec/cuda/device_verifier.hpp"
#include "specdec/cuda/llama_model.hpp"
#include "specdec/engine/timed_model.hpp"
#include "specdec/methods/method_registry.hpp"
#include "specdec/verify/target_verifier.hpp"

namespace specdec {

template <>
struct TargetVerifier<TimedModel<cuda::LlamaModel>> {
  using type = cuda::DeviceVerifier<TimedModel<cuda::LlamaModel>>;
  static type make(TimedModel<cuda::LlamaModel>& model) {
    return type(model, {}, model.inner().stream(), model.inner().device());
  }
};

namespace cuda {

// The registry (built once); its load_model loads bf16 weights on device 0.
const MethodRegistry<LlamaModel>& method_registry();

}  // namespace cuda
}  // namespace specdec
