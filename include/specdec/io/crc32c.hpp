// CRC-32C (Castagnoli; RFC 3720 §B.4, the checksum of iSCSI, ext4 and
// SSE4.2's crc32 instruction), which specdec writes into the safetensors
// files it saves and checks when it opens them: it detects every single-bit
// flip and every burst of up to 32 flipped bits.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace specdec::io {

// The CRC-32C of `bytes` continuing from a previous `crc` (0 to start):
// crc32c(b, crc32c(a)) == crc32c(a + b). crc32c("123456789") == 0xe3069283.
// Uses the SSE4.2 instruction where the CPU has it, a table otherwise; both
// give the same value.
std::uint32_t crc32c(std::span<const std::byte> bytes, std::uint32_t crc = 0);

// The table version alone (what tests compare the instruction against).
std::uint32_t crc32c_portable(std::span<const std::byte> bytes, std::uint32_t crc = 0);

}  // namespace specdec::io
