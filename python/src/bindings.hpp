// Shared pieces of the Python bindings (python/src/*.cpp): NumPy arrays as
// the rows the rules read, without copies when the array is float32 and
// C-contiguous.
#pragma once

#include <pybind11/numpy.h>
#include <pybind11/pybind11.h>

#include <cstdint>
#include <memory>
#include <string_view>
#include <vector>

#include <dlpack/dlpack.h>

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

// Rows a rule or the warp reads, from any array: a NumPy array through its
// buffer, another object (a torch tensor, JAX or CuPy host arrays) through
// DLPack, both in place when they hold float32 rows in C order; anything
// else converted by NumPy (a copy). The rows are valid while this lives.
class InputRows {
 public:
  InputRows(const py::handle& obj, std::string_view what) {
    if (!py::isinstance<py::array>(obj) && py::hasattr(obj, "__dlpack__") && take_dlpack(obj, what)) return;
    array_ = FloatArray::ensure(obj);
    if (!array_) throw py::error_already_set();
    rows_ = rows_of(array_, what);
    shape_.assign(array_.shape(), array_.shape() + array_.ndim());
  }
  InputRows(const InputRows&) = delete;
  InputRows& operator=(const InputRows&) = delete;

  const ProbRows& rows() const { return rows_; }
  const std::vector<py::ssize_t>& shape() const { return shape_; }  // as given: [vocab] or [rows, vocab]

 private:
  // Reads the DLPack tensor in place when it is host float32 in C order;
  // false (the caller converts) when it is not.
  bool take_dlpack(const py::handle& obj, std::string_view what) {
    py::object capsule;
    try {
      capsule = obj.attr("__dlpack__")();
    } catch (const py::error_already_set&) {
      return false;  // e.g. a tensor that requires grad: NumPy's conversion says why
    }
    auto* managed = static_cast<DLManagedTensor*>(PyCapsule_GetPointer(capsule.ptr(), "dltensor"));
    if (managed == nullptr) throw py::error_already_set();
    // The tensor is ours now: the capsule, renamed, leaves it to managed_.
    PyCapsule_SetName(capsule.ptr(), "used_dltensor");
    managed_.reset(managed);
    const DLTensor& t = managed->dl_tensor;
    if (t.device.device_type == kDLCUDA || t.device.device_type == kDLCUDAManaged)
      throw UnsupportedError(fmt::format(
          "{}: a CUDA tensor; the rules from Python read host rows (specdec.ops takes CUDA tensors)", what));
    if (t.device.device_type != kDLCPU || t.dtype.code != kDLFloat || t.dtype.bits != 32 ||
        t.dtype.lanes != 1 || (t.ndim != 1 && t.ndim != 2))
      return false;
    const std::int64_t vocab = t.shape[t.ndim - 1], rows = t.ndim == 2 ? t.shape[0] : 1;
    const bool c_order = t.strides == nullptr || ((vocab == 1 || t.strides[t.ndim - 1] == 1) &&
                                                  (t.ndim == 1 || rows == 1 || t.strides[0] == vocab));
    if (!c_order) return false;
    rows_ = {reinterpret_cast<const float*>(static_cast<const char*>(t.data) + t.byte_offset), rows, vocab};
    shape_.assign(t.shape, t.shape + t.ndim);
    return true;
  }

  struct Release {
    void operator()(DLManagedTensor* m) const {
      if (m->deleter != nullptr) m->deleter(m);
    }
  };
  FloatArray array_;
  std::unique_ptr<DLManagedTensor, Release> managed_;  // a member: released when a constructor throws too
  ProbRows rows_;
  std::vector<py::ssize_t> shape_;
};

void bind_core(py::module_& m);
void bind_rules(py::module_& m);
void bind_drafting(py::module_& m);
void bind_engine(py::module_& m);
void bind_torch(py::module_& m);
void bind_testing(py::module_& m);

}  // namespace specdec::python
