#include "specdec/io/weights.hpp"

#include <algorithm>
#include <cstring>

#include <fmt/format.h>

namespace specdec::io {
namespace {

// The first element whose exponent bits are all ones (inf or NaN), for
// elements of `Bits` with exponent mask `kExp`; blocks of 64 are tested with
// a branch-free any() first, so finite data streams at memory speed.
template <class Bits, Bits kExp>
std::int64_t first_all_ones_exponent(const void* data, std::int64_t n) {
  const auto* p = static_cast<const unsigned char*>(data);
  constexpr std::int64_t kBlock = 64;
  for (std::int64_t start = 0; start < n; start += kBlock) {
    const auto len = std::min(kBlock, n - start);
    Bits block[kBlock];
    std::memcpy(block, p + start * static_cast<std::int64_t>(sizeof(Bits)),
                static_cast<std::size_t>(len) * sizeof(Bits));
    bool any = false;
    for (std::int64_t i = 0; i < len; ++i) any |= (block[i] & kExp) == kExp;
    if (!any) continue;
    for (std::int64_t i = 0; i < len; ++i)
      if ((block[i] & kExp) == kExp) return start + i;
  }
  return -1;
}

}  // namespace

std::int64_t first_non_finite(const TensorView& v) {
  if (!v.is_contiguous()) throw UnsupportedError("first_non_finite: the tensor is not contiguous");
  switch (v.dtype()) {
    case DType::kF32:
      return first_all_ones_exponent<std::uint32_t, 0x7f800000u>(v.data(), v.numel());
    case DType::kBF16:
      return first_all_ones_exponent<std::uint16_t, 0x7f80u>(v.data(), v.numel());
    case DType::kF16:
      return first_all_ones_exponent<std::uint16_t, 0x7c00u>(v.data(), v.numel());
    default:
      throw UnsupportedError(
          fmt::format("first_non_finite: {} is not a floating-point dtype it reads", dtype_name(v.dtype())));
  }
}

}  // namespace specdec::io
