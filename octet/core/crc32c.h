// CRC-32C (Castagnoli polynomial 0x1EDC6F41, reflected 0x82F63B78; initial
// value and final XOR 0xFFFFFFFF), the checksum of iSCSI, ext4 metadata and
// Snappy/LevelDB. Check value: Crc32c("123456789") == 0xE3069283.
//
// Used to checksum checkpoint files (NOTE [safetensors checksums] in
// nn/safetensors.h). Runs on the SSE4.2 CRC32 instruction when the CPU has
// it (chosen at run time), else a slicing-by-8 table; both give the same value.
#pragma once

#include <octet/core/cxx20.h>  // first: the headers need C++20

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace octet {

// Extends `crc` (the value returned for the preceding bytes; 0 for none)
// with `n` bytes, so Crc32cExtend(Crc32c(a), b) == Crc32c(a + b).
uint32_t Crc32cExtend(uint32_t crc, const void* data, size_t n);

inline uint32_t Crc32c(const void* data, size_t n) { return Crc32cExtend(0, data, n); }
inline uint32_t Crc32c(std::string_view s) { return Crc32cExtend(0, s.data(), s.size()); }

namespace internal {
// The portable (table) path alone, for tests comparing it with the dispatched one.
uint32_t Crc32cExtendPortable(uint32_t crc, const void* data, size_t n);
}  // namespace internal

// 8 lower-case hex digits, and back (exactly 8 hex digits, either case).
std::string Crc32cHex(uint32_t crc);
bool ParseCrc32cHex(std::string_view text, uint32_t* crc);

}  // namespace octet
