// AMX kernels (AMX-TILE, AMX-BF16). Compiled with -mamx-tile -mamx-bf16 -mamx-int8 and the AVX-512
// flags; called only after kernels.cpp checked the CPU and obtained the tile permission. The
// integer types (Q8_0 included) use the AVX512-VNNI kernels on AMX machines too: an AMX-INT8 Q8_0
// kernel was slower for the token counts of decoding and verification (one thread, in L2, on the
// project's Xeon: 22.2 against 10.3 us at n = 1, 27.9 against 16.4 at n = 2, equal at n = 8).
//
// A tile multiply C += A * B takes A = 16 weight rows x 64 bytes (read in place from the memory
// map with the row stride) and B = activations of 16 tokens in the "VNNI" layout the packing
// produced, so each C element is one (weight row, token) dot product: C is 16 rows x 16 tokens.
// Fewer than 16 tokens are zero-padded, which makes the cost the same for n = 1 .. 16 and each C
// element independent of the others: batch invariance holds by construction.
#include <immintrin.h>

#if defined(__linux__)
#include <sys/syscall.h>
#include <unistd.h>
#endif

#include "kernels_impl.hpp"

namespace specdec::cpu::detail {
namespace {

/// The LDTILECFG memory operand (palette 1).
struct alignas(64) TileConfig {
  std::uint8_t palette = 1;
  std::uint8_t start_row = 0;
  std::uint8_t reserved[14] = {};
  std::uint16_t colsb[16] = {};
  std::uint8_t rows[16] = {};
};

/// LDTILECFG. Not GCC 12's _tile_loadconfig: its asm declares only the first 8 bytes of the
/// configuration as read, so the compiler may drop the stores of the tile shapes before it.
inline void load_tile_config(const TileConfig& config) {
  __asm__ volatile("ldtilecfg %0" : : "m"(config));
}

/// Writes a 16 x 16 (row = weight row, column = token) float tile into y[t * ldy + r].
inline void store_tile(const float* c /* [16][16] */, std::size_t rows_valid, std::size_t tokens,
                       float* y, std::size_t ldy) {
  for (std::size_t t = 0; t < tokens; ++t)
    for (std::size_t r = 0; r < rows_valid; ++r) y[t * ldy + r] = c[r * 16 + t];
}

}  // namespace

bool amx_request_permission() {
#if defined(__linux__)
  constexpr long arch_req_xcomp_perm = 0x1023;
  constexpr long xfeature_xtiledata = 18;
  return syscall(SYS_arch_prctl, arch_req_xcomp_perm, xfeature_xtiledata) == 0;
#else
  return false;
#endif
}

namespace {

/// C and B sized to a chunk of `tokens` (each C element is computed on its own, so the tile
/// width changes no result; the invariance tests compare n = 1 with n = 16 bit for bit).
/// Tiles: C0..C3 = tmm0..3 (64 weight rows, four independent accumulation chains to cover the
/// multiply's latency), A0..A2 = tmm4..6 (16 rows x 64 bytes, rotating), B = tmm7.
void configure_bf16(std::size_t tokens) {
  TileConfig config;
  for (int tile = 0; tile < 8; ++tile) {
    config.rows[tile] = 16;
    config.colsb[tile] = tile < 4 || tile == 7 ? static_cast<std::uint16_t>(4 * tokens) : 64;
  }
  load_tile_config(config);
}

}  // namespace

void bf16_matmul_amx(const AmxBf16Args& a) {
  const std::size_t steps = a.cols / 32;  // 32 bf16 of k per tile multiply
  const std::size_t chunks = (a.n + 15) / 16;
  const long stride = static_cast<long>(a.row_bytes);
  alignas(64) float c[16 * 16];
  std::size_t configured = 0;
  for (std::size_t g = 0; g < a.rows; g += 64) {
    const std::size_t groups = a.rows - g >= 64 ? 4 : (a.rows - g) / 16;  // of 16 rows
    const std::byte* w = a.w + g * a.row_bytes;
    for (std::size_t chunk = 0; chunk < chunks; ++chunk) {
      const std::size_t tokens = a.n - chunk * 16 < 16 ? a.n - chunk * 16 : 16;
      if (tokens != configured) {
        configure_bf16(tokens);
        configured = tokens;
      }
      const std::uint16_t* xt = a.xt + chunk * steps * 512;
      const long b_stride = static_cast<long>(4 * tokens);
      _tile_zero(0);
      _tile_zero(1);
      _tile_zero(2);
      _tile_zero(3);
      for (std::size_t s = 0; s < steps; ++s) {
        const std::byte* k = w + s * 64;
        _tile_loadd(7, xt + s * 32 * tokens, b_stride);
        _tile_loadd(4, k, stride);
        _tile_dpbf16ps(0, 4, 7);
        if (groups > 1) {
          _tile_loadd(5, k + 16 * a.row_bytes, stride);
          _tile_dpbf16ps(1, 5, 7);
        }
        if (groups > 2) {
          _tile_loadd(6, k + 32 * a.row_bytes, stride);
          _tile_dpbf16ps(2, 6, 7);
        }
        if (groups > 3) {
          _tile_loadd(4, k + 48 * a.row_bytes, stride);
          _tile_dpbf16ps(3, 4, 7);
        }
      }
      float* y = a.y + chunk * 16 * a.ldy + g;
      _tile_stored(0, c, 64);
      store_tile(c, 16, tokens, y, a.ldy);
      if (groups > 1) {
        _tile_stored(1, c, 64);
        store_tile(c, 16, tokens, y + 16, a.ldy);
      }
      if (groups > 2) {
        _tile_stored(2, c, 64);
        store_tile(c, 16, tokens, y + 32, a.ldy);
      }
      if (groups > 3) {
        _tile_stored(3, c, 64);
        store_tile(c, 16, tokens, y + 48, a.ldy);
      }
    }
  }
  _tile_release();
}

}  // namespace specdec::cpu::detail
