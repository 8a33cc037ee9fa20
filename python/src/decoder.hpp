// The Python face of a decoding method (bind_engine.cpp, bind_torch.cpp).
#pragma once

#include <pybind11/pybind11.h>

#include <cstdint>
#include <functional>
#include <memory>
#include <optional>
#include <vector>

#include "specdec/engine/any_decoder.hpp"

namespace specdec::python {

namespace py = pybind11;

// A method as Python holds it: the type-erased decoder and the models it
// borrows, which it keeps alive (Python models, or libtorch ones).
class Decoder {
 public:
  Decoder(AnyDecoder decoder, std::vector<std::shared_ptr<void>> models)
      : models_(std::move(models)), decoder_(std::move(decoder)) {}

  // Without the GIL: a method that runs its engine on threads of its own
  // (DuoDecoding's target thread) closes its sequences there, and those
  // calls into the Python models need it.
  ~Decoder() {
    const py::gil_scoped_release unlocked;
    decoder_ = AnyDecoder();
  }
  Decoder(const Decoder&) = delete;
  Decoder& operator=(const Decoder&) = delete;

  const std::string& name() const { return decoder_.name(); }

  void begin(std::int32_t id, const std::vector<TokenId>& prompt, const GenerationOptions& options,
             std::optional<std::function<void(TokenId)>> on_token) {
    TokenCallback callback;
    if (on_token)
      callback = [f = *on_token](TokenId t) {
        const py::gil_scoped_acquire gil;
        f(t);
      };
    const py::gil_scoped_release unlocked;
    decoder_.begin(id, prompt, options, std::move(callback));
  }
  void step(std::optional<std::vector<std::int32_t>> ids) {
    const py::gil_scoped_release unlocked;
    if (ids)
      decoder_.step(*ids);
    else
      decoder_.step();
  }
  void abort(std::int32_t id) {
    const py::gil_scoped_release unlocked;
    decoder_.abort(id);
  }
  bool done(std::int32_t id) const {
    const py::gil_scoped_release unlocked;
    return decoder_.done(id);
  }
  GenerationResult result(std::int32_t id) const {
    const py::gil_scoped_release unlocked;
    return decoder_.result(id);
  }
  GenerationResult take_result(std::int32_t id) {
    const py::gil_scoped_release unlocked;
    return decoder_.take_result(id);
  }
  std::vector<std::int32_t> requests() const {
    const py::gil_scoped_release unlocked;
    return decoder_.requests();
  }
  GenerationResult generate(const std::vector<TokenId>& prompt, const GenerationOptions& options) {
    const py::gil_scoped_release unlocked;
    return decoder_.generate(prompt, options);
  }

 private:
  std::vector<std::shared_ptr<void>> models_;  // declared first: the decoder is destroyed before them
  AnyDecoder decoder_;
};

// The method `spec` over libtorch models when `target` is one (bind_torch.cpp,
// built with the libtorch backend); nullptr otherwise.
std::unique_ptr<Decoder> torch_method(const std::string& spec, const py::object& target,
                                      const py::object& draft, const SamplingParams& sampling,
                                      const std::string& dir);

}  // namespace specdec::python
