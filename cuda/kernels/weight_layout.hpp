#pragma once
// How the weight kernels walk a row of weights of each type (plain C++, shared by the kernels,
// their launchers and the tests' exact-order references; no CUDA header).
//
// A row of `in` weights is stored as in / block_elems blocks of block_bytes bytes (the file's
// bytes: specdec/model/quant_blocks.hpp for the quantised layouts; the float types are cut into
// blocks of 8 weights here). Each block is cut into `pieces`: the unit of work of one lane per
// step (the bytes one lane loads at once). A piece is decoded in `groups` of 8 weights whose
// columns are consecutive: group g of piece p of a block covers the block's columns
// group_column(t, p, g) .. + 7, so that the matching activations are two float4 loads.
//
// The skinny GEMM's lane l of a row takes the row's pieces l, l + 16, l + 32, ... (piece index =
// block * pieces + piece in block), their groups in order, the 8 weights of a group in order:
// that fixed sequence is the GEMM's summation order (docs/cuda.md, tests/cuda/reference.hpp).
//
// Pieces per type (32-blocks are 2-byte aligned and smaller than 16 bytes of quants, so their
// piece is the whole block; the K-quants' pieces follow their sub-block structure):
//   F32               8 weights: 32 bytes (two 16-byte loads)
//   F16, BF16         8 weights: 16 bytes (one 16-byte load)
//   Q4_0 ... IQ4_NL   the block of 32 (scale + all quants), groups at columns 0, 8, 16, 24
//   Q4_K, Q5_K        32 weights: 16 bytes of qs (one 16-byte load) = 16 low nibbles of sub-block
//                     2 * pair and 16 high nibbles of sub-block 2 * pair + 1 (+ 16 bytes of qh)
//   IQ4_XS            one sub-block of 32: its 16 bytes of qs (two 8-byte loads)
//   Q2_K, Q3_K        64 weights: 16 bytes of qs (and of hmask) hold 2 bits of 64 weights
//   Q6_K              64 weights: 2 x 16 bytes of ql and 16 bytes of qh

#include <cstddef>

#include "specdec/common.hpp"
#include "specdec/model/dtype.hpp"
#include "specdec/model/quant_blocks.hpp"

namespace specdec::cuda {

struct PieceLayout {
  int block_elems;  ///< weights per block
  int block_bytes;  ///< bytes per block
  int pieces;       ///< pieces per block
  int groups;       ///< groups of 8 weights per piece
  int align;        ///< the alignment (bytes) every block start has when the row data does
};

/// The layout of a weight type (sizes from the model layer's block structs).
SPECDEC_HD constexpr PieceLayout piece_layout(DType t) {
  using namespace quant;
  switch (t) {
    case DType::f32:
      return {8, 32, 1, 1, 16};
    case DType::f16:
    case DType::bf16:
      return {8, 16, 1, 1, 16};
    case DType::q4_0:
      return {kQK, sizeof(BlockQ4_0), 1, 4, 2};
    case DType::q4_1:
      return {kQK, sizeof(BlockQ4_1), 1, 4, 4};
    case DType::q5_0:
      return {kQK, sizeof(BlockQ5_0), 1, 4, 2};
    case DType::q5_1:
      return {kQK, sizeof(BlockQ5_1), 1, 4, 8};
    case DType::q8_0:
      return {kQK, sizeof(BlockQ8_0), 1, 4, 2};
    case DType::iq4_nl:
      return {kQK, sizeof(BlockIQ4NL), 1, 4, 2};
    case DType::q2_k:
      return {kQK_K, sizeof(BlockQ2_K), 4, 8, 4};
    case DType::q3_k:
      return {kQK_K, sizeof(BlockQ3_K), 4, 8, 2};
    case DType::q4_k:
      return {kQK_K, sizeof(BlockQ4_K), 8, 4, 16};
    case DType::q5_k:
      return {kQK_K, sizeof(BlockQ5_K), 8, 4, 16};
    case DType::q6_k:
      return {kQK_K, sizeof(BlockQ6_K), 4, 8, 2};
    case DType::iq4_xs:
      return {kQK_K, sizeof(BlockIQ4XS), 8, 4, 8};
  }
  return {1, 1, 1, 1, 1};  // unreachable for a valid DType
}

/// First column, within its block, of the 8 consecutive weights of group g of piece p.
SPECDEC_HD constexpr int group_column(DType t, int p, int g) {
  switch (t) {
    case DType::f32:
    case DType::f16:
    case DType::bf16:
      return 0;
    case DType::q4_0:
    case DType::q4_1:
    case DType::q5_0:
    case DType::q5_1:
    case DType::q8_0:
    case DType::iq4_nl:
      return 8 * g;  // groups 0, 1: low nibbles of bytes 0-7, 8-15; groups 2, 3: high nibbles
    case DType::iq4_xs:
      return 32 * p + 8 * g;  // piece = sub-block of 32, as the 32-blocks
    case DType::q4_k:
    case DType::q5_k: {
      // Piece p = 2 * pair + h: bytes 32 pair + 16 h .. + 15 of qs. Groups 0, 1: low nibbles
      // (sub-block 2 pair, columns 16 h ..); groups 2, 3: high nibbles (sub-block 2 pair + 1).
      const int pair = p / 2, h = p % 2;
      return 64 * pair + 32 * (g / 2) + 16 * h + 8 * (g % 2);
    }
    case DType::q2_k:
    case DType::q3_k: {
      // Piece p = 2 * n + part: bytes 32 n + 16 part .. + 15 of qs. Group g = 2 j + half takes
      // bit pair j of bytes 8 half .. 8 half + 7: columns 128 n + 32 j + 16 part + 8 half.
      const int n = p / 2, part = p % 2, j = g / 2, half = g % 2;
      return 128 * n + 32 * j + 16 * part + 8 * half;
    }
    case DType::q6_k: {
      // Piece p = 2 * n + h: the half n of 128 weights, positions l = 16 h .. 16 h + 15 of each
      // of its four parts of 32. Group g = 2 part + half: columns 128 n + 32 part + 16 h + 8 half.
      const int n = p / 2, h = p % 2, part = g / 2, half = g % 2;
      return 128 * n + 32 * part + 16 * h + 8 * half;
    }
  }
  return 0;
}

/// Lanes that share one output row in the skinny GEMM (two rows per warp).
inline constexpr int kSkinnyLanesPerRow = 16;

}  // namespace specdec::cuda
