#include "specdec/io/crc32c.hpp"

#include <array>
#include <cstring>

#if defined(__x86_64__) && (defined(__GNUC__) || defined(__clang__))
#include <nmmintrin.h>
#define SPECDEC_CRC32C_SSE42 1
#endif

namespace specdec::io {
namespace {

// Slicing-by-8 tables for the reflected polynomial 0x82f63b78.
constexpr std::array<std::array<std::uint32_t, 256>, 8> make_tables() {
  std::array<std::array<std::uint32_t, 256>, 8> t{};
  for (std::uint32_t i = 0; i < 256; ++i) {
    std::uint32_t c = i;
    for (int k = 0; k < 8; ++k) c = (c >> 1) ^ (0x82f63b78u & (0u - (c & 1u)));
    t[0][i] = c;
  }
  for (std::size_t s = 1; s < 8; ++s)
    for (std::size_t i = 0; i < 256; ++i) t[s][i] = (t[s - 1][i] >> 8) ^ t[0][t[s - 1][i] & 0xffu];
  return t;
}
constexpr auto kTables = make_tables();

std::uint32_t portable(const unsigned char* p, std::size_t n, std::uint32_t c) {
  for (; n >= 8; n -= 8, p += 8) {
    std::uint32_t lo, hi;
    std::memcpy(&lo, p, 4);
    std::memcpy(&hi, p + 4, 4);
    lo ^= c;  // little-endian words (x86, aarch64); the format is little-endian too
    c = kTables[7][lo & 0xffu] ^ kTables[6][(lo >> 8) & 0xffu] ^ kTables[5][(lo >> 16) & 0xffu] ^
        kTables[4][lo >> 24] ^ kTables[3][hi & 0xffu] ^ kTables[2][(hi >> 8) & 0xffu] ^
        kTables[1][(hi >> 16) & 0xffu] ^ kTables[0][hi >> 24];
  }
  for (; n > 0; --n, ++p) c = (c >> 8) ^ kTables[0][(c ^ *p) & 0xffu];
  return c;
}

#ifdef SPECDEC_CRC32C_SSE42
__attribute__((target("sse4.2"))) std::uint32_t hardware(const unsigned char* p, std::size_t n,
                                                         std::uint32_t c) {
  std::uint64_t c64 = c;
  for (; n >= 8; n -= 8, p += 8) {
    std::uint64_t w;
    std::memcpy(&w, p, 8);
    c64 = _mm_crc32_u64(c64, w);
  }
  c = static_cast<std::uint32_t>(c64);
  for (; n > 0; --n, ++p) c = _mm_crc32_u8(c, *p);
  return c;
}
#endif

}  // namespace

std::uint32_t crc32c_portable(std::span<const std::byte> bytes, std::uint32_t crc) {
  return ~portable(reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size(), ~crc);
}

std::uint32_t crc32c(std::span<const std::byte> bytes, std::uint32_t crc) {
#ifdef SPECDEC_CRC32C_SSE42
  static const bool has_sse42 = __builtin_cpu_supports("sse4.2");
  if (has_sse42) return ~hardware(reinterpret_cast<const unsigned char*>(bytes.data()), bytes.size(), ~crc);
#endif
  return crc32c_portable(bytes, crc);
}

}  // namespace specdec::io
