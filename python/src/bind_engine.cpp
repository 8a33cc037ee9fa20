// The engine from Python: the standard methods by name over a Python model
// (PyModel), driven one step at a time or a whole generation at once.
#include <pybind11/functional.h>
#include <pybind11/stl.h>

#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "bindings.hpp"
#include "decoder.hpp"
#include "py_model.hpp"
#include "specdec/methods/standard_methods.hpp"

namespace specdec::python {

using namespace pybind11::literals;

namespace {

const MethodRegistry<PyModel>& registry() {
  static const MethodRegistry<PyModel> r = standard_methods<PyModel>();
  return r;
}

const char* type_name(ParamType t) {
  switch (t) {
    case ParamType::kText:
      return "text";
    case ParamType::kInt:
      return "int";
    case ParamType::kReal:
      return "real";
    case ParamType::kFlag:
      return "flag";
    case ParamType::kReals:
      return "reals";
  }
  return "?";
}

GenerationOptions options_of(std::int64_t max_new_tokens, const SamplingParams& sampling,
                             const std::vector<TokenId>& stop_tokens, std::uint64_t request_id) {
  GenerationOptions o;
  o.max_new_tokens = max_new_tokens;
  o.sampling = sampling;
  o.stop_tokens = stop_tokens;
  o.request_id = request_id;
  o.validate();
  return o;
}

}  // namespace

void bind_engine(py::module_& m) {
  py::class_<PySequence>(m, "SequenceInput", "One sequence of a forward, as a Python model receives it.")
      .def_readonly("seq", &PySequence::seq)
      .def_readonly("tokens", &PySequence::tokens)
      .def_readonly("positions", &PySequence::positions)
      .def_readonly(
          "mask", &PySequence::mask,
          "None (causal: each token sees the cache and the tokens before it), or a bool [size, size] "
          "array over the staged tokens then these: row i sees column j")
      .def_readonly("extend_staged", &PySequence::extend_staged)
      .def("__repr__", [](const PySequence& s) {
        return fmt::format("SequenceInput(seq={}, tokens={}, extend_staged={})", s.seq,
                           std::string(py::str(static_cast<const py::object&>(s.tokens))), s.extend_staged);
      });

  py::class_<GenerationResult>(m, "GenerationResult")
      .def_readonly("tokens", &GenerationResult::tokens)
      .def_property_readonly("stop_reason",
                             [](const GenerationResult& r) { return to_string(r.stop_reason); })
      .def_property_readonly("rounds", [](const GenerationResult& r) { return r.stats.rounds(); })
      .def_property_readonly(
          "tau", [](const GenerationResult& r) { return r.stats.acceptance.mean_emitted(); },
          "tokens per target forward")
      .def_property_readonly("acceptance_rate",
                             [](const GenerationResult& r) { return r.stats.acceptance.acceptance_rate(); })
      .def_property_readonly("seconds", [](const GenerationResult& r) { return r.stats.total_seconds; })
      .def("__repr__", [](const GenerationResult& r) {
        return fmt::format("GenerationResult({} tokens, stop_reason={}, tau={:.2f})", r.tokens.size(),
                           to_string(r.stop_reason), r.stats.acceptance.mean_emitted());
      });

  m.def(
      "methods",
      [] {
        py::list out;
        for (const auto& info : registry().methods()) {
          py::list params;
          for (const auto& p : info.params)
            params.append(py::dict("key"_a = p.key, "type"_a = type_name(p.type),
                                   "default"_a = p.default_value, "help"_a = p.help));
          out.append(py::dict("name"_a = info.name, "summary"_a = info.summary, "papers"_a = info.papers,
                              "models"_a = describe(info.models), "params"_a = params));
        }
        return out;
      },
      "The methods specdec.method() builds over Python models: name, summary, papers, models, parameters.");

  py::class_<Decoder>(
      m, "Decoder",
      "A decoding method over Python models, driven like the C++ engine: begin() requests, step() "
      "advances every open request by one round (one target forward for all of them).")
      .def_property_readonly("name", &Decoder::name, "the method's canonical spec")
      .def(
          "begin",
          [](Decoder& d, std::int32_t id, const std::vector<TokenId>& prompt, std::int64_t max_new_tokens,
             const SamplingParams& sampling, const std::vector<TokenId>& stop_tokens,
             std::uint64_t request_id, std::optional<std::function<void(TokenId)>> on_token) {
            d.begin(id, prompt, options_of(max_new_tokens, sampling, stop_tokens, request_id),
                    std::move(on_token));
          },
          "id"_a, "prompt"_a, "max_new_tokens"_a = 64, "sampling"_a = SamplingParams{0.0f},
          "stop_tokens"_a = std::vector<TokenId>{}, "request_id"_a = 0, "on_token"_a = py::none(),
          "Opens request `id` (its prompt prefilled). request_id and sampling.seed key its random streams.")
      .def("step", &Decoder::step, "ids"_a = py::none(),
           "One round for the open requests (or those of `ids`).")
      .def("abort", &Decoder::abort, "id"_a, "Ends a request early; what it generated stays in its result.")
      .def("done", &Decoder::done, "id"_a)
      .def("result", &Decoder::result, "id"_a)
      .def("take_result", &Decoder::take_result, "id"_a,
           "The result of a done request; its id is free again.")
      .def_property_readonly("requests", &Decoder::requests)
      .def(
          "generate",
          [](Decoder& d, const std::vector<TokenId>& prompt, std::int64_t max_new_tokens,
             const SamplingParams& sampling, const std::vector<TokenId>& stop_tokens,
             std::uint64_t request_id) {
            return d.generate(prompt, options_of(max_new_tokens, sampling, stop_tokens, request_id));
          },
          "prompt"_a, "max_new_tokens"_a = 64, "sampling"_a = SamplingParams{0.0f},
          "stop_tokens"_a = std::vector<TokenId>{}, "request_id"_a = 0);

  m.def(
      "method",
      [](const std::string& spec, py::object target, py::object draft, const SamplingParams& sampling,
         const std::string& dir) -> std::unique_ptr<Decoder> {
        if (auto torch = torch_method(spec, target, draft, sampling, dir)) return torch;
        auto t = std::make_shared<PyModel>(std::move(target));
        auto d = draft.is_none() ? nullptr : std::make_shared<PyModel>(std::move(draft));
        AnyDecoder decoder;
        {
          const py::gil_scoped_release unlocked;  // DuoDecoding starts its threads here and waits for them
          decoder = registry().make(spec, *t, d.get(), sampling, dir);
        }
        return std::make_unique<Decoder>(std::move(decoder), std::vector<std::shared_ptr<void>>{t, d});
      },
      "spec"_a, "target"_a, "draft"_a = py::none(), "sampling"_a = SamplingParams{0.0f}, "dir"_a = "models",
      "Builds the method `spec` (\"chain:k=4\", specdec.methods() lists them) over Python models "
      "implementing the Model protocol, or over libtorch models from specdec.load() (docs/python.md). "
      "`sampling` is what the method is set up for (rule=auto's choice); each request samples as its "
      "begin() says.");
}

}  // namespace specdec::python
