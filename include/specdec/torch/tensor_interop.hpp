// libtorch <-> specdec views, zero-copy both ways. This is the libtorch
// backend's adapter layer (docs/design.md §3: components never see
// torch::Tensor; the adapter is the only place that does).
//
// Including this header pulls in libtorch's ATen headers; link specdec::torch.
#pragma once

#include <ATen/ATen.h>

#include "specdec/core/prob_matrix.hpp"
#include "specdec/core/tensor_view.hpp"

namespace specdec::torch_backend {

// DType of a libtorch scalar type; throws UnsupportedError for others.
DType dtype_of(at::ScalarType t);
at::ScalarType scalar_type_of(DType t);

// A view of a tensor's memory (the tensor must outlive the view).
TensorView view_of(const at::Tensor& t);

// A tensor aliasing a view's memory (no copy; the memory must outlive it).
at::Tensor tensor_of(const TensorView& v);

// Rows of a 2-d float32 CPU tensor whose last dimension is contiguous, as the
// ProbRows every acceptance rule reads. Throws ShapeError / UnsupportedError
// naming what is wrong otherwise.
ProbRows prob_rows_of(const at::Tensor& t);

}  // namespace specdec::torch_backend
