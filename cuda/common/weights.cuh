#pragma once
// Device-side decoding of every weight type: one traits struct per DType, each turning a piece
// of a block (kernels/weight_layout.hpp: which bytes, which columns) into groups of 8 f32 weights
// in registers. The skinny GEMM, the embedding gather and the dequantisation kernel are templates
// over these traits, so adding a type is a traits struct here, a row in piece_layout() /
// group_column() (kernels/weight_layout.hpp) and a case in with_weight_traits() (below).
//
// Bit-exactness: every weight is computed with the float operations of the model layer's
// dequantiser (src/model/quants.cpp, itself bit-exact with ggml and gguf.quants), in its order,
// written with the _rn intrinsics, which nvcc never contracts into fused multiply-adds (a plain
// `dl * q - ml` would become fma(dl, q, -ml) on the GPU and differ in the last bit). The tests
// compare the kernels with the model layer's dequantisers bit for bit.
//
// Integer-to-float conversions: the quants are small non-negative integers q < 2^23, whose float
// value is exact as bits(0x4B000000 | q) - 2^23 (one integer OR and one float subtraction, both
// full-rate instructions) instead of an I2F conversion, which recent GPUs run on a slower unit;
// subtracting 2^23 + offset gives q - offset exactly as well. The result is the same float as a
// conversion (exact either way).
//
// Loads: the quants of a piece are loaded with the widest loads their alignment allows (the
// block size and offset in weight_layout.hpp): 16 bytes for Q4_K / Q5_K / F16 / BF16 / F32, 8 for
// IQ4_XS and Q5_1, 4 for Q4_1 and Q2_K, 2 for Q4_0, Q5_0, Q8_0, IQ4_NL, Q3_K and Q6_K (GGUF only
// guarantees 2-byte alignment of their blocks). The 16 lanes of a row read consecutive pieces,
// so the sectors of one warp-wide load are shared by neighbouring lanes and the narrow loads of a
// piece hit L1 after the first (they use the read-only path, which allocates in L1). Per-block
// scales are read with 1- or 2-byte loads, broadcast to the lanes of the same block.

#include <cstddef>
#include <cstdint>
#include <type_traits>

#include "common/convert.cuh"
#include "common/prelude.cuh"
#include "kernels/weight_layout.hpp"
#include "specdec/model/quant_blocks.hpp"

namespace specdec::cuda {

// ------------------------------------------------------------------------ helpers

/// A binary16 scale (its bits) as f32, exactly.
SPECDEC_DEVICE float half_bits(std::uint16_t bits) { return __half2float(__ushort_as_half(bits)); }

/// float(q - offset) for 0 <= q < 2^22 and a small offset, exactly, without a conversion
/// instruction: bits(2^23 + q) - (2^23 + offset).
template <int Offset>
SPECDEC_DEVICE float small_int(unsigned q) {
  return __fsub_rn(__uint_as_float(0x4B000000u | q), 8388608.0f + static_cast<float>(Offset));
}

/// Read-only loads of the given width from a byte address with that alignment.
SPECDEC_DEVICE unsigned load_u8(const std::uint8_t* p) { return __ldg(p); }
SPECDEC_DEVICE unsigned load_u16(const std::uint8_t* p) {
  return __ldg(reinterpret_cast<const unsigned short*>(p));
}
SPECDEC_DEVICE unsigned load_u32(const std::uint8_t* p) {
  return __ldg(reinterpret_cast<const unsigned int*>(p));
}

/// 4 * N bytes at p as N little-endian words, loaded `Align` bytes at a time (p is
/// Align-aligned; Align = 16 uses the streaming load of convert.cuh, which skips L1).
template <int Align, int N>
SPECDEC_DEVICE void load_words(const std::uint8_t* p, unsigned (&w)[N]) {
  static_assert(Align == 2 || Align == 4 || Align == 8 || Align == 16);
  if constexpr (Align == 16) {
    static_assert(N % 4 == 0);
    SPECDEC_UNROLL
    for (int i = 0; i < N / 4; ++i) {
      const uint4 v = load_streaming(reinterpret_cast<const uint4*>(p) + i);
      w[4 * i] = v.x;
      w[4 * i + 1] = v.y;
      w[4 * i + 2] = v.z;
      w[4 * i + 3] = v.w;
    }
  } else if constexpr (Align == 8) {
    static_assert(N % 2 == 0);
    SPECDEC_UNROLL
    for (int i = 0; i < N / 2; ++i) {
      const uint2 v = __ldg(reinterpret_cast<const uint2*>(p) + i);
      w[2 * i] = v.x;
      w[2 * i + 1] = v.y;
    }
  } else if constexpr (Align == 4) {
    SPECDEC_UNROLL
    for (int i = 0; i < N; ++i) w[i] = load_u32(p + 4 * i);
  } else {
    SPECDEC_UNROLL
    for (int i = 0; i < N; ++i) w[i] = load_u16(p + 4 * i) | (load_u16(p + 4 * i + 2) << 16);
  }
}

/// Byte b (a compile-time index after unrolling) of the little-endian words w.
template <int N>
SPECDEC_DEVICE unsigned byte_of(const unsigned (&w)[N], int b) {
  return (w[b / 4] >> (8 * (b % 4))) & 0xFFu;
}

/// The IQ4_NL / IQ4_XS grid value of a nibble as float: the 16 values + 128 packed into two
/// 64-bit constants (from the model layer's table), selected with a shift: no memory access.
SPECDEC_HD constexpr unsigned long long iq4_packed(int half) {
  unsigned long long v = 0;
  for (int i = 0; i < 8; ++i)
    v |= static_cast<unsigned long long>(quant::kIq4NlValues[8 * half + i] + 128) << (8 * i);
  return v;
}
SPECDEC_DEVICE float iq4_value(unsigned nibble) {
  constexpr unsigned long long lo = iq4_packed(0), hi = iq4_packed(1);
  const unsigned biased =
      static_cast<unsigned>(((nibble < 8 ? lo : hi) >> (8 * (nibble & 7))) & 0xFF);
  return small_int<128>(biased);
}

// ------------------------------------------------------------------------ float types
// Their "block" is 8 weights; rows whose length is not a multiple of 8 (or not 16-byte aligned)
// are read element by element (element()).

struct TraitsF16 {
  static constexpr DType kType = DType::f16;
  static constexpr bool kFloat = true;
  static constexpr int kInFlight = 2;  // pieces loaded before the first is used
  struct Piece {
    uint4 raw;
  };
  SPECDEC_DEVICE static Piece load(const std::uint8_t* block, int /*p*/) {
    return {load_streaming(reinterpret_cast<const uint4*>(block))};
  }
  SPECDEC_DEVICE static void group(const Piece& piece, int /*g*/, float (&w)[8]) {
    unpack8(piece.raw, w, __half{});
  }
  SPECDEC_DEVICE static float element(const std::uint8_t* row, int k) {
    return to_float(reinterpret_cast<const __half*>(row)[k]);
  }
};

struct TraitsBF16 {
  static constexpr DType kType = DType::bf16;
  static constexpr bool kFloat = true;
  static constexpr int kInFlight = 2;
  struct Piece {
    uint4 raw;
  };
  SPECDEC_DEVICE static Piece load(const std::uint8_t* block, int /*p*/) {
    return {load_streaming(reinterpret_cast<const uint4*>(block))};
  }
  SPECDEC_DEVICE static void group(const Piece& piece, int /*g*/, float (&w)[8]) {
    unpack8(piece.raw, w, __nv_bfloat16{});
  }
  SPECDEC_DEVICE static float element(const std::uint8_t* row, int k) {
    return to_float(reinterpret_cast<const __nv_bfloat16*>(row)[k]);
  }
};

struct TraitsF32 {
  static constexpr DType kType = DType::f32;
  static constexpr bool kFloat = true;
  static constexpr int kInFlight = 2;
  struct Piece {
    unsigned raw[8];
  };
  SPECDEC_DEVICE static Piece load(const std::uint8_t* block, int /*p*/) {
    Piece piece;
    load_words<16>(block, piece.raw);
    return piece;
  }
  SPECDEC_DEVICE static void group(const Piece& piece, int /*g*/, float (&w)[8]) {
    SPECDEC_UNROLL
    for (int i = 0; i < 8; ++i) w[i] = __uint_as_float(piece.raw[i]);
  }
  SPECDEC_DEVICE static float element(const std::uint8_t* row, int k) {
    return reinterpret_cast<const float*>(row)[k];
  }
};

// ------------------------------------------------------------------------ 32-blocks
// One piece per block; groups 0, 1 are the low nibbles (or bytes 0-15) of the first and second 8
// bytes of qs, groups 2, 3 the high nibbles (bytes 16-31).

/// Nibble i of group g of 16 bytes of 4-bit quants (low nibbles for g < 2, high for g >= 2).
SPECDEC_DEVICE unsigned nibble_of(const unsigned (&qs)[4], int g, int i) {
  return (byte_of(qs, 8 * (g % 2) + i) >> (g < 2 ? 0 : 4)) & 0xF;
}

struct TraitsQ4_0 {
  static constexpr DType kType = DType::q4_0;
  static constexpr bool kFloat = false;
  static constexpr int kInFlight = 1;
  struct Piece {
    float d;
    unsigned qs[4];
  };
  SPECDEC_DEVICE static Piece load(const std::uint8_t* block, int /*p*/) {
    Piece piece;
    piece.d = half_bits(static_cast<std::uint16_t>(load_u16(block)));
    load_words<2>(block + offsetof(quant::BlockQ4_0, qs), piece.qs);
    return piece;
  }
  SPECDEC_DEVICE static void group(const Piece& piece, int g, float (&w)[8]) {
    SPECDEC_UNROLL
    for (int i = 0; i < 8; ++i) w[i] = __fmul_rn(piece.d, small_int<8>(nibble_of(piece.qs, g, i)));
  }
};

struct TraitsQ4_1 {
  static constexpr DType kType = DType::q4_1;
  static constexpr bool kFloat = false;
  static constexpr int kInFlight = 1;
  struct Piece {
    float d, m;
    unsigned qs[4];
  };
  SPECDEC_DEVICE static Piece load(const std::uint8_t* block, int /*p*/) {
    Piece piece;
    const unsigned dm = load_u32(block);
    piece.d = half_bits(static_cast<std::uint16_t>(dm & 0xFFFF));
    piece.m = half_bits(static_cast<std::uint16_t>(dm >> 16));
    load_words<4>(block + offsetof(quant::BlockQ4_1, qs), piece.qs);
    return piece;
  }
  SPECDEC_DEVICE static void group(const Piece& piece, int g, float (&w)[8]) {
    SPECDEC_UNROLL
    for (int i = 0; i < 8; ++i)
      w[i] = __fadd_rn(__fmul_rn(piece.d, small_int<0>(nibble_of(piece.qs, g, i))), piece.m);
  }
};

/// The fifth bit of column c (0..31) of a Q5_0 / Q5_1 block, as 0 or 16.
SPECDEC_DEVICE unsigned fifth_bit(unsigned qh, int c) { return ((qh >> c) & 1u) << 4; }

struct TraitsQ5_0 {
  static constexpr DType kType = DType::q5_0;
  static constexpr bool kFloat = false;
  static constexpr int kInFlight = 1;
  struct Piece {
    float d;
    unsigned qh;
    unsigned qs[4];
  };
  SPECDEC_DEVICE static Piece load(const std::uint8_t* block, int /*p*/) {
    Piece piece;
    piece.d = half_bits(static_cast<std::uint16_t>(load_u16(block)));
    const std::uint8_t* qh = block + offsetof(quant::BlockQ5_0, qh);
    piece.qh = load_u16(qh) | (load_u16(qh + 2) << 16);
    load_words<2>(block + offsetof(quant::BlockQ5_0, qs), piece.qs);
    return piece;
  }
  SPECDEC_DEVICE static void group(const Piece& piece, int g, float (&w)[8]) {
    SPECDEC_UNROLL
    for (int i = 0; i < 8; ++i) {
      const unsigned q = nibble_of(piece.qs, g, i) | fifth_bit(piece.qh, 8 * g + i);
      w[i] = __fmul_rn(piece.d, small_int<16>(q));
    }
  }
};

struct TraitsQ5_1 {
  static constexpr DType kType = DType::q5_1;
  static constexpr bool kFloat = false;
  static constexpr int kInFlight = 1;
  struct Piece {
    float d, m;
    unsigned qh;
    unsigned qs[4];
  };
  SPECDEC_DEVICE static Piece load(const std::uint8_t* block, int /*p*/) {
    Piece piece;
    const unsigned dm = load_u32(block);
    piece.d = half_bits(static_cast<std::uint16_t>(dm & 0xFFFF));
    piece.m = half_bits(static_cast<std::uint16_t>(dm >> 16));
    piece.qh = load_u32(block + offsetof(quant::BlockQ5_1, qh));
    load_words<8>(block + offsetof(quant::BlockQ5_1, qs), piece.qs);
    return piece;
  }
  SPECDEC_DEVICE static void group(const Piece& piece, int g, float (&w)[8]) {
    SPECDEC_UNROLL
    for (int i = 0; i < 8; ++i) {
      const unsigned q = nibble_of(piece.qs, g, i) | fifth_bit(piece.qh, 8 * g + i);
      w[i] = __fadd_rn(__fmul_rn(piece.d, small_int<0>(q)), piece.m);
    }
  }
};

struct TraitsQ8_0 {
  static constexpr DType kType = DType::q8_0;
  static constexpr bool kFloat = false;
  static constexpr int kInFlight = 1;
  struct Piece {
    float d;
    unsigned qs[8];
  };
  SPECDEC_DEVICE static Piece load(const std::uint8_t* block, int /*p*/) {
    Piece piece;
    piece.d = half_bits(static_cast<std::uint16_t>(load_u16(block)));
    load_words<2>(block + offsetof(quant::BlockQ8_0, qs), piece.qs);
    return piece;
  }
  SPECDEC_DEVICE static void group(const Piece& piece, int g, float (&w)[8]) {
    SPECDEC_UNROLL
    for (int i = 0; i < 8; ++i) {
      // int8 q: (byte ^ 0x80) = q + 128.
      const float q = small_int<128>(byte_of(piece.qs, 8 * g + i) ^ 0x80u);
      w[i] = __fmul_rn(q, piece.d);
    }
  }
};

struct TraitsIQ4_NL {
  static constexpr DType kType = DType::iq4_nl;
  static constexpr bool kFloat = false;
  static constexpr int kInFlight = 1;
  struct Piece {
    float d;
    unsigned qs[4];
  };
  SPECDEC_DEVICE static Piece load(const std::uint8_t* block, int /*p*/) {
    Piece piece;
    piece.d = half_bits(static_cast<std::uint16_t>(load_u16(block)));
    load_words<2>(block + offsetof(quant::BlockIQ4NL, qs), piece.qs);
    return piece;
  }
  SPECDEC_DEVICE static void group(const Piece& piece, int g, float (&w)[8]) {
    SPECDEC_UNROLL
    for (int i = 0; i < 8; ++i) w[i] = __fmul_rn(piece.d, iq4_value(nibble_of(piece.qs, g, i)));
  }
};

// ------------------------------------------------------------------------ K-quants

/// Q4_K / Q5_K: piece p = 2 * pair + h holds 16 bytes of qs (the low nibbles belong to
/// sub-block 2 pair, the high ones to 2 pair + 1); Q5_K adds the matching 16 bytes of qh.
template <bool kFive>
struct TraitsQ45K {
  using Block = std::conditional_t<kFive, quant::BlockQ5_K, quant::BlockQ4_K>;
  static constexpr DType kType = kFive ? DType::q5_k : DType::q4_k;
  static constexpr bool kFloat = false;
  static constexpr int kInFlight = 2;
  struct Piece {
    float dl[2], ml[2];  // per sub-block (low nibbles, high nibbles): d * scale, dmin * min
    unsigned qs[4];
    unsigned qh[kFive ? 4 : 1];
    int sub;  // the sub-block of the low nibbles (its qh bit)
  };
  SPECDEC_DEVICE static Piece load(const std::uint8_t* block, int p) {
    Piece piece;
    const int pair = p / 2, h = p % 2;
    load_words<16>(block + offsetof(Block, qs) + 32 * pair + 16 * h, piece.qs);
    if constexpr (kFive) load_words<16>(block + offsetof(Block, qh) + 16 * h, piece.qh);
    const unsigned dm = load_u32(block);
    const float d = half_bits(static_cast<std::uint16_t>(dm & 0xFFFF));
    const float dmin = half_bits(static_cast<std::uint16_t>(dm >> 16));
    piece.sub = 2 * pair;
    SPECDEC_UNROLL
    for (int s = 0; s < 2; ++s) {
      std::uint8_t sc = 0, m = 0;
      quant::k_scale_min(2 * pair + s, block + offsetof(Block, scales), sc, m);
      piece.dl[s] = __fmul_rn(d, static_cast<float>(sc));
      piece.ml[s] = __fmul_rn(dmin, static_cast<float>(m));
    }
    return piece;
  }
  SPECDEC_DEVICE static void group(const Piece& piece, int g, float (&w)[8]) {
    const int s = g / 2;
    SPECDEC_UNROLL
    for (int i = 0; i < 8; ++i) {
      unsigned q = nibble_of(piece.qs, g, i);
      if constexpr (kFive) q |= ((byte_of(piece.qh, 8 * (g % 2) + i) >> (piece.sub + s)) & 1u) << 4;
      w[i] = __fsub_rn(__fmul_rn(piece.dl[s], small_int<0>(q)), piece.ml[s]);
    }
  }
};
using TraitsQ4_K = TraitsQ45K<false>;
using TraitsQ5_K = TraitsQ45K<true>;

/// Q2_K: piece p = 2 n + part holds 16 bytes of qs; bit pair j of them belongs to sub-block
/// (of 16) 8 n + 2 j + part.
struct TraitsQ2_K {
  static constexpr DType kType = DType::q2_k;
  static constexpr bool kFloat = false;
  static constexpr int kInFlight = 1;
  struct Piece {
    float d, dmin;
    unsigned qs[4];
    unsigned scales;  // the 4 scale bytes of the piece's sub-blocks, j = 0..3
  };
  SPECDEC_DEVICE static Piece load(const std::uint8_t* block, int p) {
    using quant::BlockQ2_K;
    Piece piece;
    const int n = p / 2, part = p % 2;
    load_words<4>(block + offsetof(BlockQ2_K, qs) + 32 * n + 16 * part, piece.qs);
    const unsigned dm = load_u32(block + offsetof(BlockQ2_K, d));
    piece.d = half_bits(static_cast<std::uint16_t>(dm & 0xFFFF));
    piece.dmin = half_bits(static_cast<std::uint16_t>(dm >> 16));
    const std::uint8_t* sc = block + offsetof(BlockQ2_K, scales) + 8 * n + part;
    piece.scales = 0;
    SPECDEC_UNROLL
    for (int j = 0; j < 4; ++j) piece.scales |= load_u8(sc + 2 * j) << (8 * j);
    return piece;
  }
  SPECDEC_DEVICE static void group(const Piece& piece, int g, float (&w)[8]) {
    const int j = g / 2, half = g % 2;
    const unsigned sc = (piece.scales >> (8 * j)) & 0xFF;
    const float dl = __fmul_rn(piece.d, static_cast<float>(sc & 0xF));
    const float ml = __fmul_rn(piece.dmin, static_cast<float>(sc >> 4));
    SPECDEC_UNROLL
    for (int i = 0; i < 8; ++i) {
      const unsigned q = (byte_of(piece.qs, 8 * half + i) >> (2 * j)) & 3u;
      w[i] = __fsub_rn(__fmul_rn(dl, small_int<0>(q)), ml);
    }
  }
};

/// Q3_K: as Q2_K, plus the third bit of each quant in hmask (bit 4 n + j of hmask[l]; clear
/// means minus 4) and signed 6-bit scales.
struct TraitsQ3_K {
  static constexpr DType kType = DType::q3_k;
  static constexpr bool kFloat = false;
  static constexpr int kInFlight = 1;
  struct Piece {
    float dl[4];  // d * scale of the sub-blocks j = 0..3
    unsigned qs[4], hm[4];
    int n;
  };
  SPECDEC_DEVICE static Piece load(const std::uint8_t* block, int p) {
    using quant::BlockQ3_K;
    Piece piece;
    const int n = p / 2, part = p % 2;
    load_words<2>(block + offsetof(BlockQ3_K, qs) + 32 * n + 16 * part, piece.qs);
    load_words<2>(block + offsetof(BlockQ3_K, hmask) + 16 * part, piece.hm);
    const float d = half_bits(static_cast<std::uint16_t>(load_u16(block + offsetof(BlockQ3_K, d))));
    const std::uint8_t* packed = block + offsetof(BlockQ3_K, scales);
    SPECDEC_UNROLL
    for (int j = 0; j < 4; ++j) {
      // quant::q3_k_scales, for one scale: low four bits in byte is % 8, top two in 8 + is % 4.
      const int is = 8 * n + 2 * j + part;
      const int low = static_cast<int>(load_u8(packed + is % 8) >> (is < 8 ? 0 : 4)) & 0xF;
      const int high = static_cast<int>(load_u8(packed + 8 + is % 4) >> (2 * (is / 4))) & 3;
      piece.dl[j] = __fmul_rn(d, static_cast<float>((low | (high << 4)) - 32));
    }
    piece.n = n;
    return piece;
  }
  SPECDEC_DEVICE static void group(const Piece& piece, int g, float (&w)[8]) {
    const int j = g / 2, half = g % 2;
    SPECDEC_UNROLL
    for (int i = 0; i < 8; ++i) {
      const int b = 8 * half + i;
      const unsigned low = (byte_of(piece.qs, b) >> (2 * j)) & 3u;
      const unsigned high = (byte_of(piece.hm, b) >> (4 * piece.n + j)) & 1u;
      w[i] = __fmul_rn(piece.dl[j], small_int<4>(low | (high << 2)));  // low - 4 * !high
    }
  }
};

/// Q6_K: piece p = 2 n + h holds positions l = 16 h .. 16 h + 15 of the half n: low nibbles of
/// ql[l] (part 0) and ql[l + 32] (part 1), high nibbles (parts 2, 3), two bits each of qh[l].
struct TraitsQ6_K {
  static constexpr DType kType = DType::q6_k;
  static constexpr bool kFloat = false;
  static constexpr int kInFlight = 1;
  struct Piece {
    float dl[4];  // d * scale of parts 0..3
    unsigned ql[2][4], qh[4];
  };
  SPECDEC_DEVICE static Piece load(const std::uint8_t* block, int p) {
    using quant::BlockQ6_K;
    Piece piece;
    const int n = p / 2, h = p % 2;
    const std::uint8_t* ql = block + offsetof(BlockQ6_K, ql) + 64 * n + 16 * h;
    load_words<2>(ql, piece.ql[0]);
    load_words<2>(ql + 32, piece.ql[1]);
    load_words<2>(block + offsetof(BlockQ6_K, qh) + 32 * n + 16 * h, piece.qh);
    const float d = half_bits(static_cast<std::uint16_t>(load_u16(block + offsetof(BlockQ6_K, d))));
    const std::uint8_t* sc = block + offsetof(BlockQ6_K, scales) + 8 * n + h;
    SPECDEC_UNROLL
    for (int part = 0; part < 4; ++part) {
      const auto scale = static_cast<std::int8_t>(load_u8(sc + 2 * part));
      piece.dl[part] = __fmul_rn(d, static_cast<float>(scale));
    }
    return piece;
  }
  SPECDEC_DEVICE static void group(const Piece& piece, int g, float (&w)[8]) {
    const int part = g / 2, half = g % 2;
    SPECDEC_UNROLL
    for (int i = 0; i < 8; ++i) {
      const int b = 8 * half + i;
      const unsigned low = (byte_of(piece.ql[part % 2], b) >> (part < 2 ? 0 : 4)) & 0xF;
      const unsigned high = (byte_of(piece.qh, b) >> (2 * part)) & 3u;
      w[i] = __fmul_rn(piece.dl[part], small_int<32>(low | (high << 4)));
    }
  }
};

/// IQ4_XS: piece = sub-block ib of 32 (16 bytes of qs, nibbles as in IQ4_NL), scale d * (ls - 32).
struct TraitsIQ4_XS {
  static constexpr DType kType = DType::iq4_xs;
  static constexpr bool kFloat = false;
  static constexpr int kInFlight = 2;
  struct Piece {
    float dl;
    unsigned qs[4];
  };
  SPECDEC_DEVICE static Piece load(const std::uint8_t* block, int p) {
    using quant::BlockIQ4XS;
    Piece piece;
    load_words<8>(block + offsetof(BlockIQ4XS, qs) + 16 * p, piece.qs);
    const float d = half_bits(static_cast<std::uint16_t>(load_u16(block)));
    const int low =
        static_cast<int>(load_u8(block + offsetof(BlockIQ4XS, scales_l) + p / 2) >> (4 * (p % 2))) &
        0xF;
    const int high =
        static_cast<int>(load_u16(block + offsetof(BlockIQ4XS, scales_h)) >> (2 * p)) & 3;
    piece.dl = __fmul_rn(d, static_cast<float>((low | (high << 4)) - 32));
    return piece;
  }
  SPECDEC_DEVICE static void group(const Piece& piece, int g, float (&w)[8]) {
    SPECDEC_UNROLL
    for (int i = 0; i < 8; ++i) w[i] = __fmul_rn(piece.dl, iq4_value(nibble_of(piece.qs, g, i)));
  }
};

// ------------------------------------------------------------------------ dispatch

template <class T>
struct TypeTag {
  using type = T;
};

/// Calls f(TypeTag<Traits>{}) with the traits of `t`; returns false for a type without traits.
template <class F>
bool with_weight_traits(DType t, F&& f) {
  switch (t) {
    case DType::f32:
      return f(TypeTag<TraitsF32>{}), true;
    case DType::f16:
      return f(TypeTag<TraitsF16>{}), true;
    case DType::bf16:
      return f(TypeTag<TraitsBF16>{}), true;
    case DType::q4_0:
      return f(TypeTag<TraitsQ4_0>{}), true;
    case DType::q4_1:
      return f(TypeTag<TraitsQ4_1>{}), true;
    case DType::q5_0:
      return f(TypeTag<TraitsQ5_0>{}), true;
    case DType::q5_1:
      return f(TypeTag<TraitsQ5_1>{}), true;
    case DType::q8_0:
      return f(TypeTag<TraitsQ8_0>{}), true;
    case DType::iq4_nl:
      return f(TypeTag<TraitsIQ4_NL>{}), true;
    case DType::q2_k:
      return f(TypeTag<TraitsQ2_K>{}), true;
    case DType::q3_k:
      return f(TypeTag<TraitsQ3_K>{}), true;
    case DType::q4_k:
      return f(TypeTag<TraitsQ4_K>{}), true;
    case DType::q5_k:
      return f(TypeTag<TraitsQ5_K>{}), true;
    case DType::q6_k:
      return f(TypeTag<TraitsQ6_K>{}), true;
    case DType::iq4_xs:
      return f(TypeTag<TraitsIQ4_XS>{}), true;
  }
  return false;
}

}  // namespace specdec::cuda
