// The AMX tile configuration octet's own AMX code loads (internal to
// ops/cpu/: the GEMM-path probe in cpu_gemm_path.cc, the attention's
// products in attention_amx.cc and the GEMM in amx_gemm.cc). x86-64 only.
#pragma once

#include <cstdint>

namespace octet::cpu {

// The 64-byte operand of LDTILECFG, palette 1 (Intel SDM): per tile its
// bytes per row (colsb) and rows.
struct alignas(64) TileConfig {
  uint8_t palette_id = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};
static_assert(sizeof(TileConfig) == 64);

// All eight tiles (tmm0-7) at their largest: 16 rows of 64 bytes (16 f32,
// or 32 bf16 as 16 pairs).
inline const TileConfig& FullTiles() {
  static const TileConfig config = [] {
    TileConfig c;
    for (int t = 0; t < 8; ++t) {
      c.colsb[t] = 64;
      c.rows[t] = 16;
    }
    return c;
  }();
  return config;
}

}  // namespace octet::cpu
