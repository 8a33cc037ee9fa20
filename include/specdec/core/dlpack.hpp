// TensorView <-> DLTensor (DLPack, `dlpack/dlpack.h`, from libdlpack-dev), the
// exchange format of libtorch (at::toDLPack), CuPy, JAX and TVM.
//
// Both directions are zero-copy and non-owning: a DLTensor made from a view
// points into that view's shape and stride arrays, so it lives no longer than
// the view; the caller keeps the underlying memory alive.
#pragma once

#include <dlpack/dlpack.h>

#include <fmt/format.h>

#include "specdec/core/error.hpp"
#include "specdec/core/tensor_view.hpp"

namespace specdec {

inline DLDataType to_dlpack(DType t) {
  switch (t) {
    case DType::kF32: return {kDLFloat, 32, 1};
    case DType::kF16: return {kDLFloat, 16, 1};
    case DType::kBF16: return {kDLBfloat, 16, 1};
    case DType::kF64: return {kDLFloat, 64, 1};
    case DType::kI32: return {kDLInt, 32, 1};
    case DType::kI64: return {kDLInt, 64, 1};
    case DType::kU8: return {kDLUInt, 8, 1};
  }
  throw UnsupportedError("to_dlpack: unknown DType");
}

inline DType from_dlpack(DLDataType t) {
  if (t.lanes != 1)
    throw UnsupportedError(fmt::format("from_dlpack: vector dtypes (lanes = {}) are not supported", t.lanes));
  if (t.code == kDLFloat && t.bits == 32) return DType::kF32;
  if (t.code == kDLFloat && t.bits == 16) return DType::kF16;
  if (t.code == kDLFloat && t.bits == 64) return DType::kF64;
  if (t.code == kDLBfloat && t.bits == 16) return DType::kBF16;
  if (t.code == kDLInt && t.bits == 32) return DType::kI32;
  if (t.code == kDLInt && t.bits == 64) return DType::kI64;
  if (t.code == kDLUInt && t.bits == 8) return DType::kU8;
  throw UnsupportedError(
      fmt::format("from_dlpack: dtype (code {}, {} bits) is not supported", t.code, t.bits));
}

// A view of a DLTensor's memory (byte_offset applied; null strides = contiguous).
inline TensorView from_dlpack(const DLTensor& t) {
  Device device;
  switch (t.device.device_type) {
    case kDLCPU: device = {DeviceKind::kCPU, t.device.device_id}; break;
    case kDLCUDA: device = {DeviceKind::kCUDA, t.device.device_id}; break;
    default:
      throw UnsupportedError(
          fmt::format("from_dlpack: device type {} is not supported (CPU and CUDA are)",
                      static_cast<int>(t.device.device_type)));
  }
  void* data = static_cast<char*>(t.data) + t.byte_offset;
  return TensorView(data, from_dlpack(t.dtype), t.shape, t.ndim, t.strides, device);
}

// A DLTensor describing the view's memory; valid while `view` is alive.
inline DLTensor to_dlpack(const TensorView& view) {
  DLTensor t{};
  t.data = view.data();
  t.device = {view.device().kind == DeviceKind::kCUDA ? kDLCUDA : kDLCPU, view.device().index};
  t.ndim = view.ndim();
  t.dtype = to_dlpack(view.dtype());
  t.shape = const_cast<std::int64_t*>(view.shape_data());
  t.strides = const_cast<std::int64_t*>(view.stride_data());
  t.byte_offset = 0;
  return t;
}

}  // namespace specdec
