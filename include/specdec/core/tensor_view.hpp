// Non-owning tensor views in the DLPack model: data pointer, dtype, device,
// shape and strides (in elements). libtorch tensors, CUDA buffers and plain
// host arrays all hand their memory over as a TensorView without a copy;
// core/dlpack.hpp converts to and from DLTensor.
#pragma once

#include <array>
#include <cstdint>
#include <initializer_list>
#include <string_view>

#include <fmt/format.h>

#include "specdec/core/error.hpp"

namespace specdec {

enum class DType : std::uint8_t { kF32, kF16, kBF16, kF64, kI32, kI64, kU8 };

inline constexpr std::size_t dtype_size(DType t) {
  switch (t) {
    case DType::kF32: case DType::kI32: return 4;
    case DType::kF16: case DType::kBF16: return 2;
    case DType::kF64: case DType::kI64: return 8;
    case DType::kU8: return 1;
  }
  return 0;
}

inline constexpr std::string_view dtype_name(DType t) {
  switch (t) {
    case DType::kF32: return "f32";
    case DType::kF16: return "f16";
    case DType::kBF16: return "bf16";
    case DType::kF64: return "f64";
    case DType::kI32: return "i32";
    case DType::kI64: return "i64";
    case DType::kU8: return "u8";
  }
  return "?";
}

template <class T> inline constexpr bool kHasDType = false;
template <class T> inline constexpr DType kDTypeOf = DType::kU8;
#define SPECDEC_DTYPE_OF(T, D)                  \
  template <> inline constexpr bool kHasDType<T> = true; \
  template <> inline constexpr DType kDTypeOf<T> = D;
SPECDEC_DTYPE_OF(float, DType::kF32)
SPECDEC_DTYPE_OF(double, DType::kF64)
SPECDEC_DTYPE_OF(std::int32_t, DType::kI32)
SPECDEC_DTYPE_OF(std::int64_t, DType::kI64)
SPECDEC_DTYPE_OF(std::uint8_t, DType::kU8)
#undef SPECDEC_DTYPE_OF

enum class DeviceKind : std::uint8_t { kCPU, kCUDA };

struct Device {
  DeviceKind kind = DeviceKind::kCPU;
  std::int32_t index = 0;
  friend bool operator==(const Device&, const Device&) = default;
};

class TensorView {
 public:
  static constexpr int kMaxDims = 6;

  TensorView() = default;
  // Contiguous (row-major) view.
  TensorView(void* data, DType dtype, std::initializer_list<std::int64_t> shape, Device device = {})
      : data_(data), dtype_(dtype), device_(device) {
    set_shape(shape.begin(), static_cast<int>(shape.size()), nullptr);
  }
  // General view; strides in elements (null = contiguous).
  TensorView(void* data, DType dtype, const std::int64_t* shape, int ndim, const std::int64_t* strides,
             Device device = {})
      : data_(data), dtype_(dtype), device_(device) {
    set_shape(shape, ndim, strides);
  }

  void* data() const { return data_; }
  DType dtype() const { return dtype_; }
  Device device() const { return device_; }
  int ndim() const { return ndim_; }
  std::int64_t size(int dim) const { return shape_.at(checked(dim)); }
  std::int64_t stride(int dim) const { return strides_.at(checked(dim)); }
  const std::int64_t* shape_data() const { return shape_.data(); }
  const std::int64_t* stride_data() const { return strides_.data(); }
  std::int64_t numel() const {
    std::int64_t n = 1;
    for (int i = 0; i < ndim_; ++i) n *= shape_[static_cast<std::size_t>(i)];
    return n;
  }
  bool empty() const { return data_ == nullptr || numel() == 0; }
  bool is_contiguous() const {
    std::int64_t expect = 1;
    for (int i = ndim_ - 1; i >= 0; --i) {
      const auto d = static_cast<std::size_t>(i);
      if (shape_[d] != 1 && strides_[d] != expect) return false;
      expect *= shape_[d];
    }
    return true;
  }

  // Typed pointer; throws UnsupportedError when T is not this view's dtype.
  template <class T>
  T* data_as() const {
    static_assert(kHasDType<T>, "TensorView::data_as: T has no DType");
    if (kDTypeOf<T> != dtype_)
      throw UnsupportedError(fmt::format("TensorView holds {}, requested as {}", dtype_name(dtype_),
                                         dtype_name(kDTypeOf<T>)));
    return static_cast<T*>(data_);
  }

 private:
  std::size_t checked(int dim) const {
    if (dim < 0 || dim >= ndim_)
      throw ShapeError(fmt::format("TensorView: dimension {} of a {}-d view", dim, ndim_));
    return static_cast<std::size_t>(dim);
  }
  void set_shape(const std::int64_t* shape, int ndim, const std::int64_t* strides) {
    if (ndim < 0 || ndim > kMaxDims)
      throw ShapeError(fmt::format("TensorView: {} dimensions, at most {} supported", ndim, kMaxDims));
    ndim_ = ndim;
    std::int64_t running = 1;
    for (int i = ndim - 1; i >= 0; --i) {
      const auto d = static_cast<std::size_t>(i);
      if (shape[i] < 0)
        throw ShapeError(fmt::format("TensorView: dimension {} has negative size {}", i, shape[i]));
      shape_[d] = shape[i];
      strides_[d] = strides ? strides[i] : running;
      running *= shape[i];
    }
  }

  void* data_ = nullptr;
  DType dtype_ = DType::kF32;
  Device device_{};
  int ndim_ = 0;
  std::array<std::int64_t, kMaxDims> shape_{};
  std::array<std::int64_t, kMaxDims> strides_{};
};

}  // namespace specdec
