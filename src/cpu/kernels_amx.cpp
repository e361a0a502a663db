// AMX kernels (AMX-TILE, AMX-BF16, AMX-INT8, with AVX-512 for the Q8_0 scales). Compiled with
// -mamx-tile -mamx-bf16 -mamx-int8 and the AVX-512 flags; called only after kernels.cpp checked
// the CPU and obtained the tile permission.
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
inline void load_tile_config(const TileConfig& config) { __asm__ volatile("ldtilecfg %0" : : "m"(config)); }

/// Writes a 16 x 16 (row = weight row, column = token) float tile into y[t * ldy + r].
inline void store_tile(const float* c /* [16][16] */, std::size_t rows_valid, std::size_t tokens, float* y,
                       std::size_t ldy) {
  for (std::size_t t = 0; t < tokens; ++t)
    for (std::size_t r = 0; r < rows_valid; ++r) y[t * ldy + r] = c[r * 16 + t];
}

// Tile registers of the BF16 kernel: C0 = tmm0, C1 = tmm1 (32 weight rows), A0 = tmm4, A1 = tmm5,
// B = tmm6. (The _tile_* macros paste their tile number into the assembly: literals only.)
enum Bf16Tiles { kC0 = 0, kC1 = 1, kA0 = 4, kA1 = 5, kB = 6 };

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

void bf16_matmul_amx(const AmxBf16Args& a) {
  TileConfig config;
  const int tiles[] = {kC0, kC1, kA0, kA1, kB};
  for (int tile : tiles) {
    config.rows[tile] = 16;
    config.colsb[tile] = 64;
  }
  load_tile_config(config);
  const std::size_t steps = a.cols / 32;  // 32 bf16 of k per tile multiply
  const std::size_t chunks = (a.n + 15) / 16;
  alignas(64) float c[2][16 * 16];
  for (std::size_t g = 0; g < a.rows; g += 32) {
    const bool two = a.rows - g >= 32;
    const std::byte* w0 = a.w + g * a.row_bytes;
    const std::byte* w1 = w0 + 16 * a.row_bytes;
    for (std::size_t chunk = 0; chunk < chunks; ++chunk) {
      const std::uint16_t* xt = a.xt + chunk * steps * 512;
      _tile_zero(0);
      _tile_zero(1);
      for (std::size_t s = 0; s < steps; ++s) {
        _tile_loadd(6, xt + s * 512, 64);
        _tile_loadd(4, w0 + s * 64, static_cast<long>(a.row_bytes));
        _tile_dpbf16ps(0, 4, 6);
        if (two) {
          _tile_loadd(5, w1 + s * 64, static_cast<long>(a.row_bytes));
          _tile_dpbf16ps(1, 5, 6);
        }
      }
      _tile_stored(0, c[0], 64);
      const std::size_t tokens = a.n - chunk * 16 < 16 ? a.n - chunk * 16 : 16;
      float* y = a.y + chunk * 16 * a.ldy + g;
      store_tile(c[0], 16, tokens, y, a.ldy);
      if (two) {
        _tile_stored(1, c[1], 64);
        store_tile(c[1], 16, tokens, y + 16, a.ldy);
      }
    }
  }
  _tile_release();
}

namespace {
// Tile registers of the Q8_0 kernel: four blocks in flight, C0..C3 = tmm0..3, A = tmm4/tmm5 and
// B = tmm6/tmm7 alternating.
enum Q8Tiles { kQC0 = 0, kQC1 = 1, kQC2 = 2, kQC3 = 3, kQA0 = 4, kQA1 = 5, kQB0 = 6, kQB1 = 7 };

/// Tiles for a chunk of `tokens` (1..16) columns. The integer products are exact whatever the tile
/// shape, so sizing C and B to the real token count changes no result, only the work: a decode
/// step (one token) stores one int32 per weight row instead of sixteen.
void configure_q8(std::size_t tokens) {
  TileConfig config;
  const auto colsb = static_cast<std::uint16_t>(4 * tokens);
  const int c_tiles[] = {kQC0, kQC1, kQC2, kQC3}, a_tiles[] = {kQA0, kQA1}, b_tiles[] = {kQB0, kQB1};
  for (int tile : c_tiles) {
    config.rows[tile] = 16;
    config.colsb[tile] = colsb;  // int32 per token
  }
  for (int tile : a_tiles) {
    config.rows[tile] = 16;
    config.colsb[tile] = 32;  // one block of 32 int8 per weight row
  }
  for (int tile : b_tiles) {
    config.rows[tile] = 8;
    config.colsb[tile] = colsb;  // 8 groups of 4 k, 4 bytes per token
  }
  load_tile_config(config);
}
}  // namespace

void q8_matmul_amx(const AmxQ8Args& a) {
  const std::size_t blocks = a.cols / q8_block_elems;
  const std::size_t chunks = (a.n + 15) / 16;
  const long stride = static_cast<long>(a.row_bytes);
  const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  // Byte offsets of the 16 rows' block scales, for a gather.
  const __m512i row_offsets = _mm512_mullo_epi32(lane, _mm512_set1_epi32(static_cast<int>(a.row_bytes)));
  // Up to this many tokens one vector per token (over the 16 rows) is cheaper than one per row.
  constexpr std::size_t by_token_max = 6;
  alignas(64) std::int32_t isum[4][16 * 16];  // [block][row][token], `tokens` int32 per row
  alignas(64) float dw[16];
  alignas(64) float result[16 * 16];
  std::size_t configured = 0;
  for (std::size_t g = 0; g < a.rows; g += 16) {
    const std::byte* w = a.w + g * a.row_bytes;
    for (std::size_t chunk = 0; chunk < chunks; ++chunk) {
      const std::int8_t* xt = a.xt + chunk * blocks * 512;
      const float* xd = a.xd + chunk * blocks * 16;
      const std::size_t tokens = a.n - chunk * 16 < 16 ? a.n - chunk * 16 : 16;
      if (tokens != configured) {
        configure_q8(tokens);
        configured = tokens;
      }
      const bool by_token = tokens <= by_token_max;
      const __m512i column_offsets = _mm512_mullo_epi32(lane, _mm512_set1_epi32(static_cast<int>(tokens)));
      const __mmask16 token_mask = static_cast<__mmask16>((1u << tokens) - 1u);
      const long isum_stride = static_cast<long>(4 * tokens);
      __m512 acc[16];
      for (auto& v : acc) v = _mm512_setzero_ps();
      for (std::size_t b0 = 0; b0 < blocks; b0 += 4) {
        const std::size_t count = blocks - b0 < 4 ? blocks - b0 : 4;
        // Integer block dot products of 16 rows x `tokens`, up to four blocks.
        const std::byte* wb = w + b0 * q8_block_bytes + 2;
        const std::int8_t* xb = xt + b0 * 512;
        _tile_zero(0);
        _tile_loadd(4, wb, stride);
        _tile_loadd(6, xb, 64);
        _tile_dpbssd(0, 4, 6);
        if (count > 1) {
          _tile_zero(1);
          _tile_loadd(5, wb + q8_block_bytes, stride);
          _tile_loadd(7, xb + 512, 64);
          _tile_dpbssd(1, 5, 7);
        }
        if (count > 2) {
          _tile_zero(2);
          _tile_loadd(4, wb + 2 * q8_block_bytes, stride);
          _tile_loadd(6, xb + 2 * 512, 64);
          _tile_dpbssd(2, 4, 6);
        }
        if (count > 3) {
          _tile_zero(3);
          _tile_loadd(5, wb + 3 * q8_block_bytes, stride);
          _tile_loadd(7, xb + 3 * 512, 64);
          _tile_dpbssd(3, 5, 7);
        }
        _tile_stored(0, isum[0], isum_stride);
        if (count > 1) _tile_stored(1, isum[1], isum_stride);
        if (count > 2) _tile_stored(2, isum[2], isum_stride);
        if (count > 3) _tile_stored(3, isum[3], isum_stride);
        // acc[r][t] = fma(float(isum[r][t]), d_w[r] * d_x[t], acc[r][t]), blocks in increasing
        // order. Two vectorisations of the same element operations (so the same bits): with few
        // tokens, one vector per token over the 16 rows (a column of isum); with many, one vector
        // per row over the tokens.
        for (std::size_t i = 0; i < count; ++i) {
          const std::size_t b = b0 + i;
          const __m512i d16 = _mm512_i32gather_epi32(row_offsets, w + b * q8_block_bytes, 1);
          const __m512 dw_rows = _mm512_cvtph_ps(_mm512_cvtepi32_epi16(d16));
          if (by_token) {
            for (std::size_t t = 0; t < tokens; ++t) {
              const __m512i column = tokens == 1 ? _mm512_load_si512(isum[i])
                                                 : _mm512_i32gather_epi32(column_offsets, isum[i] + t, 4);
              const __m512 scale = _mm512_mul_ps(dw_rows, _mm512_set1_ps(xd[b * 16 + t]));
              acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(column), scale, acc[t]);
            }
          } else {
            _mm512_store_ps(dw, dw_rows);
            const __m512 dx = _mm512_load_ps(xd + b * 16);
            for (std::size_t r = 0; r < 16; ++r) {
              const __m512 scale = _mm512_mul_ps(_mm512_set1_ps(dw[r]), dx);
              const __m512 s = _mm512_cvtepi32_ps(_mm512_maskz_loadu_epi32(token_mask, isum[i] + r * tokens));
              acc[r] = _mm512_fmadd_ps(s, scale, acc[r]);
            }
          }
        }
      }
      if (by_token) {  // acc[t] holds the 16 rows of token t
        for (std::size_t t = 0; t < tokens; ++t) _mm512_storeu_ps(a.y + (chunk * 16 + t) * a.ldy + g, acc[t]);
      } else {
        for (int r = 0; r < 16; ++r) _mm512_store_ps(result + r * 16, acc[r]);
        store_tile(result, 16, tokens, a.y + chunk * 16 * a.ldy + g, a.ldy);
      }
    }
  }
  _tile_release();
}

}  // namespace specdec::cpu::detail
