// The libtorch models and the tokenizer from Python: specdec.load(dir) gives
// a LlamaModel that specdec.method() builds every registered method over,
// the feature-head methods (lyanna, eagle, spire) included.
#include <pybind11/stl.h>

#include <string>

#include "bindings.hpp"
#include "decoder.hpp"
#include "specdec/tokenizer/tokenizer.hpp"
#ifdef SPECDEC_PYTHON_TORCH
#include "specdec/torch/inference_dtype.hpp"
#include "specdec/torch/llama_model.hpp"
#include "specdec/torch/methods.hpp"
#endif

namespace specdec::python {

using namespace pybind11::literals;

#ifdef SPECDEC_PYTHON_TORCH
namespace tb = torch_backend;

std::unique_ptr<Decoder> torch_method(const std::string& spec, const py::object& target,
                                      const py::object& draft, const SamplingParams& sampling,
                                      const std::string& dir) {
  if (!py::isinstance<tb::LlamaModel>(target)) return nullptr;
  if (!draft.is_none() && !py::isinstance<tb::LlamaModel>(draft))
    throw InvalidArgumentError("specdec.method: a libtorch target takes a libtorch draft (specdec.load)");
  auto t = target.cast<std::shared_ptr<tb::LlamaModel>>();
  auto d = draft.is_none() ? nullptr : draft.cast<std::shared_ptr<tb::LlamaModel>>();
  AnyDecoder decoder;
  {
    const py::gil_scoped_release unlocked;
    decoder = tb::make_method(tb::parse_method(spec), *t, d.get(), sampling, dir);
  }
  return std::make_unique<Decoder>(std::move(decoder), std::vector<std::shared_ptr<void>>{t, d});
}

static void bind_llama(py::module_& m) {
  py::class_<tb::LlamaModel, std::shared_ptr<tb::LlamaModel>>(
      m, "LlamaModel", "A Llama checkpoint on specdec's libtorch backend (specdec.load).")
      .def_property_readonly("vocab_size", &tb::LlamaModel::vocab_size)
      .def_property_readonly("hidden_size", &tb::LlamaModel::hidden_size)
      .def_property_readonly("max_context", &tb::LlamaModel::max_context)
      .def_property_readonly("num_parameters", &tb::LlamaModel::num_parameters);
  m.def(
      "load",
      [](const std::string& dir, const std::string& dtype) {
        const auto precision = tb::choose_inference_dtype(dtype);
        const py::gil_scoped_release unlocked;
        auto model = std::make_shared<tb::LlamaModel>(tb::LlamaModel::load(dir));
        model->set_inference_dtype(precision.dtype);
        return model;
      },
      "dir"_a, "dtype"_a = "auto",
      "A Llama checkpoint directory (config.json, model.safetensors) on the libtorch backend, its weights "
      "packed as `dtype`: auto (bf16 where the CPU runs it natively), bf16 or f32.");
}
#else
std::unique_ptr<Decoder> torch_method(const std::string&, const py::object&, const py::object&,
                                      const SamplingParams&, const std::string&) {
  return nullptr;
}
static void bind_llama(py::module_&) {}
#endif

void bind_torch(py::module_& m) {
  bind_llama(m);
  py::class_<tokenizer::Tokenizer>(m, "Tokenizer",
                                   "SentencePiece tokenizer.model or Hugging Face tokenizer.json.")
      .def_static(
          "load", [](const std::string& path) { return tokenizer::Tokenizer::load(path); }, "path"_a)
      .def(
          "encode",
          [](const tokenizer::Tokenizer& t, const std::string& text, bool add_bos) {
            return t.encode(text, add_bos);
          },
          "text"_a, "add_bos"_a = true)
      .def(
          "decode",
          [](const tokenizer::Tokenizer& t, const std::vector<TokenId>& ids) { return t.decode(ids); },
          "ids"_a)
      .def_property_readonly("vocab_size", &tokenizer::Tokenizer::vocab_size)
      .def_property_readonly("bos_id", &tokenizer::Tokenizer::bos_id)
      .def_property_readonly("eos_id", &tokenizer::Tokenizer::eos_id);
}

}  // namespace specdec::python
