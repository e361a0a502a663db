// Skinny GEMM for decode / verify (see skinny_gemm.hpp).
//
// Design: 16 lanes per output row (two rows per warp), `warps` warps per block. Lane l of a row
// takes the row's pieces l, l + 16, l + 32, ... (weight_layout.hpp: 8 weights of a float type,
// one block of 32 of a 32-block type, 32 or 64 weights of a K-quant super-block), loads the
// piece's bytes (Traits::kInFlight pieces before the first is used, for memory-level
// parallelism), decodes it group by group into 8 f32 weights (common/weights.cuh) and
// multiplies each group with the matching eight inputs of each of the n tokens (two float4; x is
// small and stays in L1/L2 across the rows of a block). Each lane keeps NT <= 16 partial sums
// (NT = n rounded up to a power of two, a template parameter so they stay in registers), and
// warp_sum_scatter reduces all NT sums over the 16 lanes with NT - 1 + log2(16 / NT) shuffles.
// Half-warp rows keep every lane busy on short rows and halve the shuffles per row.
// F32 / F16 / BF16 rows whose length is not a multiple of 8 (or that are not 16-byte aligned)
// are read one weight per lane per step instead; both orders are batch-invariant.
#include <cstdint>
#include <string>

#include "common/check.hpp"
#include "common/reduce.cuh"
#include "common/weights.cuh"
#include "kernels/skinny_gemm.hpp"

namespace specdec::cuda::kernels {

namespace {

// Adds the eight products of one group of weights (columns column .. column + 7) to the partial
// sums of every token.
template <int NT>
SPECDEC_DEVICE void accumulate_group(const float (&w)[8], const float* x, int in, int n, int column,
                                     float (&acc)[NT]) {
  SPECDEC_UNROLL
  for (int t = 0; t < NT; ++t) {
    if (t < n) {
      const auto* xv =
          reinterpret_cast<const float4*>(x + static_cast<std::size_t>(t) * in + column);
      const float4 a = __ldg(xv);
      const float4 b = __ldg(xv + 1);
      float s = acc[t];
      s = fmaf(w[0], a.x, s);
      s = fmaf(w[1], a.y, s);
      s = fmaf(w[2], a.z, s);
      s = fmaf(w[3], a.w, s);
      s = fmaf(w[4], b.x, s);
      s = fmaf(w[5], b.y, s);
      s = fmaf(w[6], b.z, s);
      s = fmaf(w[7], b.w, s);
      acc[t] = s;
    }
  }
}

// Adds one decoded piece (piece p_in_block of the block whose first column is column0).
template <class Traits, int NT>
SPECDEC_DEVICE void accumulate_piece(const typename Traits::Piece& piece, int p_in_block,
                                     int column0, const float* x, int in, int n, float (&acc)[NT]) {
  constexpr PieceLayout kLayout = piece_layout(Traits::kType);
  SPECDEC_UNROLL
  for (int g = 0; g < kLayout.groups; ++g) {
    float w[8];
    Traits::group(piece, g, w);
    accumulate_group<NT>(w, x, in, n, column0 + group_column(Traits::kType, p_in_block, g), acc);
  }
}

constexpr int kLanesPerRow = kSkinnyLanesPerRow;
constexpr int kRowsPerWarp = kWarpSize / kLanesPerRow;

template <class Traits, int NT, bool kElementwise>
__global__ void skinny_gemm_kernel(const std::uint8_t* w, std::size_t row_bytes, const float* x,
                                   float* y, int n, int out, int in, int ldy) {
  // Both half-warps run the whole kernel (rows past the end compute on row `out - 1` and do
  // not store), so that every shuffle has its full warp.
  const int lane = lane_id() % kLanesPerRow;
  const int first_row =
      (static_cast<int>(blockIdx.x) * warps_per_block() + warp_id()) * kRowsPerWarp;
  if (first_row >= out) return;  // the whole warp leaves together: no collective is skipped
  const int row = first_row + lane_id() / kLanesPerRow;
  const bool store = row < out;
  const int read_row = store ? row : out - 1;
  const std::uint8_t* wrow = w + static_cast<std::size_t>(read_row) * row_bytes;
  float acc[NT];
  SPECDEC_UNROLL
  for (int t = 0; t < NT; ++t) acc[t] = 0.0f;

  if constexpr (kElementwise) {
    for (int k = lane; k < in; k += kLanesPerRow) {
      const float wk = Traits::element(wrow, k);
      SPECDEC_UNROLL
      for (int t = 0; t < NT; ++t) {
        if (t < n) acc[t] = fmaf(wk, x[static_cast<std::size_t>(t) * in + k], acc[t]);
      }
    }
  } else {
    constexpr PieceLayout kLayout = piece_layout(Traits::kType);
    constexpr int kInFlight = Traits::kInFlight;
    using Piece = typename Traits::Piece;
    const int pieces = in / kLayout.block_elems * kLayout.pieces;
    for (int p = lane; p < pieces; p += kInFlight * kLanesPerRow) {
      // All loads first; the sums still see piece p before piece p + 16, the order of a
      // one-piece loop.
      Piece piece[kInFlight];
      SPECDEC_UNROLL
      for (int k = 0; k < kInFlight; ++k) {
        const int q = p + k * kLanesPerRow;
        piece[k] = k == 0 || q < pieces
                       ? Traits::load(wrow + static_cast<std::size_t>(q / kLayout.pieces) *
                                                 kLayout.block_bytes,
                                      q % kLayout.pieces)
                       : Piece{};
      }
      SPECDEC_UNROLL
      for (int k = 0; k < kInFlight; ++k) {
        const int q = p + k * kLanesPerRow;
        if (k == 0 || q < pieces) {
          accumulate_piece<Traits, NT>(piece[k], q % kLayout.pieces,
                                       q / kLayout.pieces * kLayout.block_elems, x, in, n, acc);
        }
      }
    }
  }

  const float sum = warp_sum_scatter<NT, kLanesPerRow>(acc);
  const int slot = scatter_slot<NT, kLanesPerRow>(lane);
  constexpr int kLanesPerSlot = kLanesPerRow / NT;
  if (store && lane % kLanesPerSlot == 0 && slot < n)
    y[static_cast<std::size_t>(slot) * ldy + row] = sum;
}

struct Args {
  const void* w;
  const float* x;
  float* y;
  int n, out, in, warps, ldy;
  cudaStream_t stream;
};

template <class Traits, int NT>
void run(const Args& a) {
  constexpr PieceLayout kLayout = piece_layout(Traits::kType);
  const dim3 grid(static_cast<unsigned>(ceil_div(a.out, a.warps * kRowsPerWarp)));
  const dim3 block(static_cast<unsigned>(a.warps * kWarpSize));
  const auto* w = static_cast<const std::uint8_t*>(a.w);
  const auto aligned16 = [](const void* p) {
    return reinterpret_cast<std::uintptr_t>(p) % 16 == 0;
  };
  if constexpr (Traits::kFloat) {
    const std::size_t row_bytes =
        static_cast<std::size_t>(a.in) * (kLayout.block_bytes / kLayout.block_elems);
    if (a.in % kLayout.block_elems == 0 && aligned16(a.w) && aligned16(a.x)) {
      launch(skinny_gemm_kernel<Traits, NT, false>, grid, block, 0, a.stream, w, row_bytes, a.x,
             a.y, a.n, a.out, a.in, a.ldy);
    } else {
      launch(skinny_gemm_kernel<Traits, NT, true>, grid, block, 0, a.stream, w, row_bytes, a.x, a.y,
             a.n, a.out, a.in, a.ldy);
    }
  } else {
    const std::size_t row_bytes =
        static_cast<std::size_t>(a.in / kLayout.block_elems) * kLayout.block_bytes;
    launch(skinny_gemm_kernel<Traits, NT, false>, grid, block, 0, a.stream, w, row_bytes, a.x, a.y,
           a.n, a.out, a.in, a.ldy);
  }
}

template <class Traits>
void dispatch(const Args& a) {
  if (a.n == 1) return run<Traits, 1>(a);
  if (a.n == 2) return run<Traits, 2>(a);
  if (a.n <= 4) return run<Traits, 4>(a);
  if (a.n <= 8) return run<Traits, 8>(a);
  return run<Traits, 16>(a);
}

}  // namespace

bool has_weight_kernels(DType t) noexcept {
  return with_weight_traits(t, [](auto) {});
}

void skinny_gemm(DType type, const void* w, const float* x, float* y, int n, int out, int in,
                 cudaStream_t stream, int warps, int ldy) {
  if (n < 1 || n > kSkinnyMaxTokens) throw Error("skinny_gemm: n must be in [1, 16]");
  if (out <= 0 || in <= 0) throw Error("skinny_gemm: empty matrix");
  if (warps < 1 || warps > 32) throw Error("skinny_gemm: warps must be in [1, 32]");
  if (ldy == 0) ldy = out;
  if (ldy < out) {
    throw Error("skinny_gemm: ldy " + std::to_string(ldy) + " is less than out " +
                std::to_string(out));
  }
  if (!is_float_dtype(type)) {
    const PieceLayout layout = piece_layout(type);
    if (in % layout.block_elems != 0)
      throw Error(std::string("skinny_gemm: ") + dtype_name(type) + " rows of " +
                  std::to_string(in) + " weights are not whole blocks of " +
                  std::to_string(layout.block_elems));
    if (reinterpret_cast<std::uintptr_t>(w) % static_cast<unsigned>(layout.align) != 0)
      throw Error(std::string("skinny_gemm: ") + dtype_name(type) + " weights must be " +
                  std::to_string(layout.align) + "-byte aligned");
    if (reinterpret_cast<std::uintptr_t>(x) % 16 != 0)
      throw Error("skinny_gemm: x must be 16-byte aligned for quantised weights");
  }
  const Args args{w, x, y, n, out, in, warps, ldy, stream};
  if (!with_weight_traits(type, [&](auto tag) { dispatch<typename decltype(tag)::type>(args); }))
    throw Error(std::string("skinny_gemm: no kernel for ") + dtype_name(type) + " weights");
  SPECDEC_CUDA_CHECK_LAUNCH("skinny_gemm_kernel");
}

}  // namespace specdec::cuda::kernels
