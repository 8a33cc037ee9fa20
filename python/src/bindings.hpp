// Shared pieces of the Python bindings (python/src/*.cpp): NumPy arrays as
// the rows the rules read, without copies when the array is float32 and
// C-contiguous.
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <cstdint>
#include <string_view>

#include <fmt/format.h>

#include "specdec/core/error.hpp"
#include "specdec/core/prob_matrix.hpp"

namespace specdec::python {

namespace py = pybind11;

// A float32 array as NumPy gives it: C order, converted (copied) only when it
// is not float32 C-contiguous already.
using FloatArray = py::array_t<float, py::array::c_style | py::array::forcecast>;

// A 2-d [rows, vocab] array (a 1-d one is one row) as ProbRows; the view is
// valid while `a` lives.
inline ProbRows rows_of(const FloatArray& a, std::string_view what) {
  if (a.ndim() == 1) return {a.data(), 1, a.shape(0)};
  if (a.ndim() != 2)
    throw ShapeError(fmt::format("{}: expected [rows, vocab] or [vocab], got {} dimensions", what, a.ndim()));
  return {a.data(), a.shape(0), a.shape(1)};
}

void bind_core(py::module_& m);
void bind_rules(py::module_& m);
void bind_engine(py::module_& m);
void bind_torch(py::module_& m);
void bind_testing(py::module_& m);

}  // namespace specdec::python
