// Bulk f16 / bf16 / f64 <-> f32 conversion over host tensors.
#include "specdec/io/float_convert.hpp"

#include <cstring>

#include <fmt/format.h>

namespace specdec::io {
namespace {

template <class T>
T load(const unsigned char* p) {
  T v;
  std::memcpy(&v, p, sizeof(T));
  return v;
}

template <class T>
void store(unsigned char* p, T v) {
  std::memcpy(p, &v, sizeof(T));
}

}  // namespace

void to_f32(const TensorView& src, float* dst) {
  if (src.device().kind != DeviceKind::kCPU)
    throw UnsupportedError("to_f32: the source tensor must be in host memory");
  if (!src.is_contiguous()) throw UnsupportedError("to_f32: the source tensor must be contiguous");
  const std::int64_t n = src.numel();
  if (n == 0) return;
  const auto* p = static_cast<const unsigned char*>(src.data());
  const auto count = static_cast<std::size_t>(n);
  switch (src.dtype()) {
    case DType::kF32:
      std::memcpy(dst, p, count * sizeof(float));
      return;
    case DType::kF16:
      for (std::size_t i = 0; i < count; ++i) dst[i] = f16_to_f32(load<std::uint16_t>(p + 2 * i));
      return;
    case DType::kBF16:
      for (std::size_t i = 0; i < count; ++i) dst[i] = bf16_to_f32(load<std::uint16_t>(p + 2 * i));
      return;
    case DType::kF64:
      for (std::size_t i = 0; i < count; ++i) dst[i] = static_cast<float>(load<double>(p + 8 * i));
      return;
    default:
      break;
  }
  throw UnsupportedError(
      fmt::format("to_f32: expected a f32, f16, bf16 or f64 tensor, got {}", dtype_name(src.dtype())));
}

void from_f32(const float* src, std::int64_t n, DType dst_dtype, void* dst) {
  if (n < 0) throw InvalidArgumentError(fmt::format("from_f32: negative element count {}", n));
  auto* p = static_cast<unsigned char*>(dst);
  const auto count = static_cast<std::size_t>(n);
  switch (dst_dtype) {
    case DType::kF32:
      if (count != 0) std::memcpy(p, src, count * sizeof(float));
      return;
    case DType::kF16:
      for (std::size_t i = 0; i < count; ++i) store(p + 2 * i, f32_to_f16(src[i]));
      return;
    case DType::kBF16:
      for (std::size_t i = 0; i < count; ++i) store(p + 2 * i, f32_to_bf16(src[i]));
      return;
    case DType::kF64:
      for (std::size_t i = 0; i < count; ++i) store(p + 8 * i, static_cast<double>(src[i]));
      return;
    default:
      break;
  }
  throw UnsupportedError(
      fmt::format("from_f32: expected f32, f16, bf16 or f64 as the target, got {}", dtype_name(dst_dtype)));
}

}  // namespace specdec::io
