// specdec.testing's C++ half: the chi-square test, exact laws, and the small
// Markov model the C++ suite tests its rules and engine against.
#include <pybind11/functional.h>
#include <pybind11/stl.h>

#include <vector>

#include "bindings.hpp"
#include "specdec/testing/chi_square.hpp"
#include "specdec/testing/exact_law.hpp"
#include "specdec/testing/hashed_context_model.hpp"

namespace specdec::python {

using namespace pybind11::literals;
using testing::ChiSquareResult;
using testing::HashedContextModel;

void bind_testing(py::module_& m) {
  py::class_<ChiSquareResult>(m, "ChiSquareResult")
      .def_readonly("statistic", &ChiSquareResult::statistic)
      .def_readonly("degrees_of_freedom", &ChiSquareResult::degrees_of_freedom)
      .def_readonly("p_value", &ChiSquareResult::p_value)
      .def_readonly("impossible", &ChiSquareResult::impossible,
                    "observations in outcomes the law gives probability 0")
      .def("rejects", &ChiSquareResult::rejects, "alpha"_a,
           "True when the counts are impossible under the law or p < alpha.")
      .def("__repr__", [](const ChiSquareResult& r) { return "ChiSquareResult(" + r.describe() + ")"; });

  m.def(
      "chi_square_gof",
      [](const py::array_t<std::int64_t, py::array::c_style | py::array::forcecast>& observed,
         const py::array_t<double, py::array::c_style | py::array::forcecast>& expected) {
        return testing::chi_square_gof(std::span(observed.data(), static_cast<std::size_t>(observed.size())),
                                       std::span(expected.data(), static_cast<std::size_t>(expected.size())));
      },
      "observed"_a, "expected"_a,
      "Pearson's goodness of fit of counts to probabilities (flattened); bins expected below 5 counts are "
      "pooled, "
      "and any count where the law is 0 makes the result reject.");

  m.def(
      "exact_law",
      [](const std::function<FloatArray(std::vector<TokenId>)>& logits_of, const std::vector<TokenId>& prompt,
         int n, std::int64_t vocab, const SamplingParams& sampling) {
        const auto law = testing::exact_law(
            [&](std::span<const TokenId> context) {
              const FloatArray a = logits_of(std::vector<TokenId>(context.begin(), context.end()));
              if (a.ndim() != 1) throw ShapeError("exact_law: logits_of must return a 1-d array");
              return std::vector<float>(a.data(), a.data() + a.shape(0));
            },
            prompt, n, vocab, sampling);
        std::vector<py::ssize_t> shape(static_cast<std::size_t>(n), static_cast<py::ssize_t>(vocab));
        py::array_t<double> out(shape);
        std::copy(law.begin(), law.end(), out.mutable_data());
        return out;
      },
      "logits_of"_a, "prompt"_a, "n"_a, "vocab"_a, "sampling"_a,
      "The law of the first n tokens after `prompt`: an array of shape [vocab] * n whose entry [t1, ..., tn] "
      "is the product of the warped conditionals. logits_of(context: list[int]) returns the next-token "
      "logits.");

  py::class_<HashedContextModel>(m, "MarkovModel",
                                 "A small model whose next-token logits are a seeded random function of the "
                                 "last `order` tokens (the model "
                                 "specdec's C++ suite tests its rules and engine with). A second one with "
                                 "the same seed and noise > 0 is a "
                                 "correlated draft.")
      .def(py::init<std::int64_t, std::uint64_t, int, float, float, std::uint64_t>(), "vocab"_a, "seed"_a,
           "order"_a = 2, "sharpness"_a = 2.0f, "noise"_a = 0.0f, "noise_seed"_a = 7)
      .def_property_readonly("vocab_size", &HashedContextModel::vocab_size)
      .def(
          "logits",
          [](const HashedContextModel& model, const std::vector<TokenId>& context) {
            const auto l = model.logits_after(context);
            py::array_t<float> out(static_cast<py::ssize_t>(l.size()));
            std::copy(l.begin(), l.end(), out.mutable_data());
            return out;
          },
          "context"_a, "The next-token logits after `context`.");
}

}  // namespace specdec::python
