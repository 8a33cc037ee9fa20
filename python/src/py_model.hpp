// A Python object as a specdec Model (concepts.hpp): the engine calls it as it
// calls a C++ model, and it writes its logits straight into the caller's
// buffers, seen from Python as NumPy arrays (no copy). docs/python.md,
// "A model of your own", says what the object implements.
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cstdint>
#include <limits>
#include <span>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "specdec/core/error.hpp"
#include "specdec/core/round.hpp"

namespace specdec::python {

namespace py = pybind11;

// One sequence of a forward, as the Python model sees it.
struct PySequence {
  std::int32_t seq = 0;
  py::array_t<std::int32_t> tokens;     // the new tokens
  py::array_t<std::int64_t> positions;  // their positions
  py::object mask;                      // None (causal), or bool [size, size]: row i sees column j
  bool extend_staged = false;           // the tokens extend the previous forward's, not the committed cache
};

class PyModel {
 public:
  explicit PyModel(py::object model) : model_(std::move(model)) {
    for (const char* method : {"open", "close", "forward", "accept", "rollback"})
      if (!py::hasattr(model_, method))
        throw InvalidArgumentError(
            fmt::format("a Python model needs the method {}() (docs/python.md)", method));
    vocab_ = attribute("vocab_size", -1);
    if (vocab_ < 1) throw InvalidArgumentError("a Python model needs vocab_size, a positive int");
    hidden_ = attribute("hidden_size", 0);
    max_context_ = attribute("max_context", std::numeric_limits<std::int64_t>::max());
  }

  std::int64_t vocab_size() const { return vocab_; }
  std::int64_t hidden_size() const { return hidden_; }
  std::int64_t max_context() const { return max_context_; }
  const py::object& object() const { return model_; }

  void open(std::int32_t seq, const CachePolicy& policy = {}) {
    if (policy.kind != CachePolicy::Kind::kDense)
      throw UnsupportedError(
          "a Python model keeps every token of a sequence (dense cache); this method needs a "
          "sink + window cache");
    const py::gil_scoped_acquire gil;
    model_.attr("open")(seq);
  }
  void close(std::int32_t seq) {
    const py::gil_scoped_acquire gil;
    model_.attr("close")(seq);
  }
  void accept(std::int32_t seq, std::span<const std::int32_t> path) {
    const py::gil_scoped_acquire gil;
    model_.attr("accept")(seq, std::vector<std::int32_t>(path.begin(), path.end()));
  }
  void rollback(std::int32_t seq, std::int64_t length) {
    const py::gil_scoped_acquire gil;
    model_.attr("rollback")(seq, length);
  }

  void forward(const ForwardRequest& request) {
    const py::gil_scoped_acquire gil;
    py::list sequences;
    for (const auto& in : request.sequences) {
      PySequence s;
      s.seq = in.seq_id;
      s.tokens = py::array_t<std::int32_t>(static_cast<py::ssize_t>(in.tokens.size()), in.tokens.data());
      s.positions =
          py::array_t<std::int64_t>(static_cast<py::ssize_t>(in.positions.size()), in.positions.data());
      s.mask = py::none();
      if (!in.mask.empty()) {
        const auto n = static_cast<py::ssize_t>(in.mask.size);
        py::array_t<bool> mask({n, n});
        auto m = mask.mutable_unchecked<2>();
        for (py::ssize_t i = 0; i < n; ++i)
          for (py::ssize_t j = 0; j < n; ++j)
            m(i, j) = in.mask.test(static_cast<std::int32_t>(i), static_cast<std::int32_t>(j));
        s.mask = std::move(mask);
      }
      s.extend_staged = in.extend_staged;
      sequences.append(py::cast(std::move(s)));
    }
    if (!request.hidden.empty() && (request.hidden_layer != -1 || request.hidden_layers != 1))
      throw UnsupportedError("a Python model writes the final hidden state only (hidden_layer -1)");
    model_.attr("forward")(sequences, output(request.logits, "logits"), output(request.hidden, "hidden"));
  }

 private:
  std::int64_t attribute(const char* name, std::int64_t fallback) const {
    if (!py::hasattr(model_, name)) return fallback;
    py::object v = model_.attr(name);
    if (PyCallable_Check(v.ptr())) v = v();
    return v.cast<std::int64_t>();
  }

  // A writable NumPy view of a host float32 [rows, width] output, or None.
  static py::object output(const TensorView& out, const char* what) {
    if (out.empty()) return py::none();
    if (out.device().kind != DeviceKind::kCPU || out.dtype() != DType::kF32 || out.ndim() != 2 ||
        out.stride(1) != 1)
      throw UnsupportedError(
          fmt::format("a Python model writes host float32 rows; its {} view is not", what));
    // The base keeps NumPy from copying; the memory is the caller's and
    // outlives the call.
    return py::array_t<float>({out.size(0), out.size(1)}, {out.stride(0) * 4, std::int64_t{4}},
                              out.data_as<float>(), py::capsule(out.data(), [](void*) {}));
  }

  py::object model_;
  std::int64_t vocab_ = 0, hidden_ = 0, max_context_ = 0;
};

}  // namespace specdec::python
