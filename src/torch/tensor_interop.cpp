#include "specdec/torch/tensor_interop.hpp"

#include <vector>

#include <fmt/format.h>

#include "specdec/core/error.hpp"

namespace specdec::torch_backend {

DType dtype_of(at::ScalarType t) {
  switch (t) {
    case at::kFloat: return DType::kF32;
    case at::kHalf: return DType::kF16;
    case at::kBFloat16: return DType::kBF16;
    case at::kDouble: return DType::kF64;
    case at::kInt: return DType::kI32;
    case at::kLong: return DType::kI64;
    case at::kByte: return DType::kU8;
    default:
      throw UnsupportedError(fmt::format("libtorch dtype {} has no specdec DType", c10::toString(t)));
  }
}

at::ScalarType scalar_type_of(DType t) {
  switch (t) {
    case DType::kF32: return at::kFloat;
    case DType::kF16: return at::kHalf;
    case DType::kBF16: return at::kBFloat16;
    case DType::kF64: return at::kDouble;
    case DType::kI32: return at::kInt;
    case DType::kI64: return at::kLong;
    case DType::kU8: return at::kByte;
  }
  throw UnsupportedError("unknown DType");
}

TensorView view_of(const at::Tensor& t) {
  if (t.dim() > TensorView::kMaxDims)
    throw ShapeError(fmt::format("view_of: a {}-d tensor; at most {} dimensions", t.dim(), TensorView::kMaxDims));
  Device device;
  if (t.is_cuda())
    device = {DeviceKind::kCUDA, t.device().index()};
  else if (!t.is_cpu())
    throw UnsupportedError(fmt::format("view_of: tensors on {} are not supported", t.device().str()));
  const auto sizes = t.sizes();
  const auto strides = t.strides();
  return TensorView(t.data_ptr(), dtype_of(t.scalar_type()), sizes.data(), static_cast<int>(t.dim()),
                    strides.data(), device);
}

at::Tensor tensor_of(const TensorView& v) {
  std::vector<std::int64_t> sizes(v.shape_data(), v.shape_data() + v.ndim());
  std::vector<std::int64_t> strides(v.stride_data(), v.stride_data() + v.ndim());
  const at::Device device = v.device().kind == DeviceKind::kCUDA
                                ? at::Device(at::kCUDA, static_cast<c10::DeviceIndex>(v.device().index))
                                : at::Device(at::kCPU);
  return at::from_blob(v.data(), sizes, strides, at::TensorOptions().dtype(scalar_type_of(v.dtype())).device(device));
}

ProbRows prob_rows_of(const at::Tensor& t) {
  if (t.dim() != 2)
    throw ShapeError(fmt::format("prob_rows_of: expected a 2-d [rows, vocab] tensor, got {} dimensions", t.dim()));
  if (t.scalar_type() != at::kFloat)
    throw UnsupportedError(fmt::format("prob_rows_of: expected float32, got {}", c10::toString(t.scalar_type())));
  if (!t.is_cpu()) throw UnsupportedError("prob_rows_of: the host rules read CPU tensors");
  if (t.size(1) > 1 && t.stride(1) != 1)
    throw ShapeError("prob_rows_of: the vocabulary dimension must be contiguous (stride 1)");
  return ProbRows(t.data_ptr<float>(), t.size(0), t.size(1), t.size(0) > 1 ? t.stride(0) : t.size(1));
}

}  // namespace specdec::torch_backend
