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

namespace {

// Q8_0. A weight row is a run of 34-byte blocks {f16 scale, 32 int8 quants}. One tile multiply
// takes a 64-byte window of 16 rows: bytes 2..65 of a pair of blocks (2p, 2p+1), i.e. block 2p's
// quants, block 2p+1's scale, and block 2p+1's quants 0..29. The activation tile has two columns
// per token (pack_q8_0_pairs_avx512): block 2p's activations against the first 32 bytes, block
// 2p+1's against the last 30, zeros elsewhere, so C gets the two blocks' integer sums separately,
// and quants 30 and 31 of block 2p+1 are added from a gather. A tile multiply thus covers 68 bytes
// of every row where one block per multiply would cover 34: half the multiplies, which are what
// bounds this kernel (the tile unit takes the same time for 32- and 64-byte rows).
//
// An odd last block is a pair whose second column is zero: its window reads 32 bytes past the
// block, which the matrix's next row provides (the dispatcher pads a copy of the matrix's last
// rows, so nothing is read past a tensor).
//
// Tiles: C0..C3 = tmm0..3 (two pairs per step, alternating between C0/C1 and C2/C3 so that the
// next step's multiplies run while this step's results are stored and used), A0, A1 = tmm4, 5
// (16 rows x 64-byte windows), B0, B1 = tmm6, 7.
void configure_q8(std::size_t tokens) {
  TileConfig config;
  const auto columns = static_cast<std::uint16_t>(8 * tokens);  // two int32 per token
  for (int tile = 0; tile < 4; ++tile) {
    config.rows[tile] = 16;
    config.colsb[tile] = columns;  // C
  }
  for (int tile = 4; tile < 6; ++tile) {
    config.rows[tile] = 16;
    config.colsb[tile] = 64;  // A: a pair's window of 16 rows
  }
  for (int tile = 6; tile < 8; ++tile) {
    config.rows[tile] = 16;
    config.colsb[tile] = columns;  // B: 16 groups of 4 bytes x 2 columns per token
  }
  load_tile_config(config);
}

/// The f32 scales of block b of 16 rows (the f16 in the low half of the dword at the block start).
inline __m512 block_scales(const std::byte* w, __m512i row_offsets, std::size_t b) {
  const __m512i d = _mm512_i32gather_epi32(row_offsets, w + b * q8_block_bytes, 1);
  return _mm512_cvtph_ps(_mm512_cvtepi32_epi16(d));
}

/// Quants 30 and 31 of block b (odd) of 16 rows, as int16 pairs (q30 low, q31 high) per row.
inline __m512i last_two_quants(const std::byte* w, __m512i row_offsets, std::size_t b) {
  // The dword at the block's byte 30 (within the row) holds quants 28..31.
  const __m512i g = _mm512_i32gather_epi32(row_offsets, w + b * q8_block_bytes + 2 + 28, 1);
  const __m512i q30 = _mm512_srai_epi32(_mm512_slli_epi32(g, 8), 24);
  const __m512i q31 = _mm512_srai_epi32(g, 24);
  return _mm512_or_si512(_mm512_and_si512(q30, _mm512_set1_epi32(0xffff)),
                         _mm512_slli_epi32(q31, 16));
}

}  // namespace

void q8_matmul_amx(const AmxQ8Args& a) {
  const std::size_t blocks = a.cols / q8_block_elems;
  const std::size_t slots = (blocks + 1) / 2;
  const std::size_t chunks = (a.n + 7) / 8;
  const long stride = static_cast<long>(a.row_bytes);
  const __m512i lane = _mm512_setr_epi32(0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15);
  const __m512i row_offsets =
      _mm512_mullo_epi32(lane, _mm512_set1_epi32(static_cast<int>(a.row_bytes)));
  const __m512i even = _mm512_slli_epi32(lane, 1),
                odd = _mm512_add_epi32(even, _mm512_set1_epi32(1));
  // Up to this many tokens one vector per token (over the 16 rows) is cheaper than one per row.
  constexpr std::size_t by_token_max = 4;
  alignas(64) std::int32_t isum[2][16 * 16];  // the two slots of a step: [row][2 * tokens]
  alignas(64) float dw0[16], dw1[16], result[16 * 16];
  alignas(64) std::int32_t last2[16];
  std::size_t configured = 0;

  for (std::size_t g = 0; g < a.rows; g += 16) {
    const std::byte* w = a.w + g * a.row_bytes;
    for (std::size_t chunk = 0; chunk < chunks; ++chunk) {
      const std::uint32_t* xt = a.xt + chunk * slots * 256;
      const float* xd = a.xd + chunk * blocks * 8;
      const std::uint32_t* fix = a.fix + chunk * slots * 8;
      const std::size_t tokens = a.n - chunk * 8 < 8 ? a.n - chunk * 8 : 8;
      if (tokens != configured) {
        configure_q8(tokens);
        configured = tokens;
      }
      const long isum_stride = static_cast<long>(8 * tokens);
      const long b_stride = isum_stride;  // activation tile rows: 2 dwords per token
      const bool by_token = tokens <= by_token_max;
      const __m512i token_columns =
          _mm512_mullo_epi32(lane, _mm512_set1_epi32(static_cast<int>(2 * tokens)));
      const __mmask16 token_mask = static_cast<__mmask16>((1u << tokens) - 1u);
      __m512 acc[16];
      for (auto& v : acc) v = _mm512_setzero_ps();

      // acc[r][t] = fma(float(isum_b[r][t]), d_w[r][b] * d_x[t][b], acc[r][t]), blocks in
      // increasing order. Two vectorisations of the same element operations (so the same bits):
      // with few tokens one vector per token over the 16 rows, else one per row over the tokens.
      auto epilogue = [&](const std::int32_t* sums, std::size_t b, bool pair,
                          __m512i quants_30_31) {
        const __m512 d0 = block_scales(w, row_offsets, b);
        const __m512 d1 = pair ? block_scales(w, row_offsets, b + 1) : _mm512_setzero_ps();
        const std::uint32_t* fix_pair = fix + (b / 2) * 8;
        if (by_token) {
          for (std::size_t t = 0; t < tokens; ++t) {
            __m512i s0, s1;
            if (tokens == 1) {  // [r0 b, r0 b+1, r1 b, ...]: split even and odd
              const __m512i lo = _mm512_load_si512(sums), hi = _mm512_load_si512(sums + 16);
              s0 = _mm512_permutex2var_epi32(lo, even, hi);
              s1 = _mm512_permutex2var_epi32(lo, odd, hi);
            } else {  // columns t and tokens + t
              s0 = _mm512_i32gather_epi32(token_columns, sums + t, 4);
              s1 = _mm512_i32gather_epi32(token_columns, sums + tokens + t, 4);
            }
            acc[t] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s0),
                                     _mm512_mul_ps(d0, _mm512_set1_ps(xd[b * 8 + t])), acc[t]);
            if (!pair) continue;
            s1 = _mm512_add_epi32(
                s1,
                _mm512_madd_epi16(quants_30_31, _mm512_set1_epi32(static_cast<int>(fix_pair[t]))));
            acc[t] =
                _mm512_fmadd_ps(_mm512_cvtepi32_ps(s1),
                                _mm512_mul_ps(d1, _mm512_set1_ps(xd[(b + 1) * 8 + t])), acc[t]);
          }
          return;
        }
        _mm512_store_ps(dw0, d0);
        _mm512_store_ps(dw1, d1);
        _mm512_store_si512(last2, quants_30_31);
        const __m512 x0 = _mm512_maskz_loadu_ps(token_mask, xd + b * 8);
        const __m512 x1 =
            pair ? _mm512_maskz_loadu_ps(token_mask, xd + (b + 1) * 8) : _mm512_setzero_ps();
        const __m512i fixes = _mm512_maskz_loadu_epi32(token_mask, fix_pair);
        // A row of sums: [block b, per token | block b + 1, per token].
        for (std::size_t r = 0; r < 16; ++r) {
          const std::int32_t* row = sums + r * 2 * tokens;
          const __m512i s0 = _mm512_maskz_loadu_epi32(token_mask, row);
          acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s0),
                                   _mm512_mul_ps(_mm512_set1_ps(dw0[r]), x0), acc[r]);
          if (!pair) continue;
          const __m512i s1 =
              _mm512_add_epi32(_mm512_maskz_loadu_epi32(token_mask, row + tokens),
                               _mm512_madd_epi16(_mm512_set1_epi32(last2[r]), fixes));
          acc[r] = _mm512_fmadd_ps(_mm512_cvtepi32_ps(s1),
                                   _mm512_mul_ps(_mm512_set1_ps(dw1[r]), x1), acc[r]);
        }
      };

      // Steps of two slots (pairs; the last slot may be an odd block). Step i multiplies into
      // C0/C1 (even i) or C2/C3 (odd i); its results are stored and used during step i + 1.
      auto multiply = [&](std::size_t slot, bool high) {
        const std::byte* window = w + slot * 2 * q8_block_bytes + 2;
        const std::uint32_t* b_tile = xt + slot * 32 * tokens;
        if (!high) {
          _tile_zero(0);
          _tile_loadd(4, window, stride);
          _tile_loadd(6, b_tile, b_stride);
          _tile_dpbssd(0, 4, 6);
          if (slot + 1 < slots) {
            _tile_zero(1);
            _tile_loadd(5, window + 2 * q8_block_bytes, stride);
            _tile_loadd(7, b_tile + 32 * tokens, b_stride);
            _tile_dpbssd(1, 5, 7);
          }
        } else {
          _tile_zero(2);
          _tile_loadd(4, window, stride);
          _tile_loadd(6, b_tile, b_stride);
          _tile_dpbssd(2, 4, 6);
          if (slot + 1 < slots) {
            _tile_zero(3);
            _tile_loadd(5, window + 2 * q8_block_bytes, stride);
            _tile_loadd(7, b_tile + 32 * tokens, b_stride);
            _tile_dpbssd(3, 5, 7);
          }
        }
      };
      auto finish = [&](std::size_t slot, bool high) {
        const bool second = slot + 1 < slots;
        if (!high) {
          _tile_stored(0, isum[0], isum_stride);
          if (second) _tile_stored(1, isum[1], isum_stride);
        } else {
          _tile_stored(2, isum[0], isum_stride);
          if (second) _tile_stored(3, isum[1], isum_stride);
        }
        for (std::size_t i = 0; i < (second ? 2u : 1u); ++i) {
          const std::size_t b = 2 * (slot + i);
          const bool pair = b + 1 < blocks;
          epilogue(isum[i], b, pair,
                   pair ? last_two_quants(w, row_offsets, b + 1) : _mm512_setzero_si512());
        }
      };
      for (std::size_t slot = 0, step = 0; slot < slots; slot += 2, ++step) {
        // Stream the next group's rows into L2 alongside this group's: 32 rows in flight instead
        // of 16, which the memory system rewards (measured: +20% from DRAM on one core; 48 rows
        // were slower again).
        if (chunk == 0 && g + 32 <= a.rows)
          for (std::size_t r = 16; r < 32; ++r) {
            const char* line =
                reinterpret_cast<const char*>(w + r * a.row_bytes + slot * 2 * q8_block_bytes);
            _mm_prefetch(line, _MM_HINT_T1);
            _mm_prefetch(line + 64, _MM_HINT_T1);
            _mm_prefetch(line + 128, _MM_HINT_T1);
          }
        multiply(slot, step % 2 == 1);
        if (step > 0) finish(slot - 2, step % 2 == 0);
      }
      const std::size_t steps = (slots + 1) / 2;
      finish(2 * (steps - 1), (steps - 1) % 2 == 1);

      float* y = a.y + chunk * 8 * a.ldy + g;
      if (by_token) {  // acc[t] holds the 16 rows of token t
        for (std::size_t t = 0; t < tokens; ++t) _mm512_storeu_ps(y + t * a.ldy, acc[t]);
      } else {
        for (int r = 0; r < 16; ++r) _mm512_store_ps(result + r * 16, acc[r]);
        store_tile(result, 16, tokens, y, a.ldy);
      }
    }
  }
  _tile_release();
}

}  // namespace specdec::cpu::detail
