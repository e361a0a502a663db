// Skinny GEMM for decode / verify (see skinny_gemm.hpp).
//
// Design: 16 lanes per output row, R rows per half-warp (2 R rows per warp), `warps` warps per
// block. Lane l of a row takes the row's pieces l, l + 16, l + 32, ... (weight_layout.hpp: 8
// weights of a float type, one block of 32 of a 32-block type, 32 or 64 weights of a K-quant
// super-block), loads the piece's bytes (Traits::kInFlight pieces of each of its R rows before
// the first is used, for memory-level parallelism), decodes it group by group into 8 f32 weights
// (common/weights.cuh) and multiplies each group with the matching eight inputs of each of the n
// tokens (two float4; x is small and stays in L1/L2 across the rows of a block). With R rows a
// lane loads each token's eight inputs once for R groups of weights (the same columns of R
// rows): the inputs' L1 traffic, which grows with n and dominates wide steps, drops R-fold. Each
// lane keeps R x NT partial sums (NT = n rounded up to a power of two, R and NT template
// parameters so they stay in registers), and warp_sum_scatter reduces each row's NT sums over
// the 16 lanes with NT - 1 + log2(16 / NT) shuffles. Half-warp rows keep every lane busy on
// short rows and halve the shuffles per row. R changes which lane computes a row, never the
// order of a row's operations: every R gives the same bits (the tests run each).
// skinny_gemm's rows_per_lane = 0 picks R from the matrix's rows (skinny_rows_per_lane).
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

// Adds the eight products of one group of weights of each of R rows (the same columns column ..
// column + 7) to the rows' partial sums of every token: each token's inputs are loaded once.
template <int NT, int R>
SPECDEC_DEVICE void accumulate_group(const float (&w)[R][8], const float* x, int in, int n,
                                     int column, float (&acc)[R][NT]) {
  SPECDEC_UNROLL
  for (int t = 0; t < NT; ++t) {
    if (t < n) {
      const auto* xv =
          reinterpret_cast<const float4*>(x + static_cast<std::size_t>(t) * in + column);
      const float4 a = __ldg(xv);
      const float4 b = __ldg(xv + 1);
      SPECDEC_UNROLL
      for (int i = 0; i < R; ++i) {
        float s = acc[i][t];
        s = fmaf(w[i][0], a.x, s);
        s = fmaf(w[i][1], a.y, s);
        s = fmaf(w[i][2], a.z, s);
        s = fmaf(w[i][3], a.w, s);
        s = fmaf(w[i][4], b.x, s);
        s = fmaf(w[i][5], b.y, s);
        s = fmaf(w[i][6], b.z, s);
        s = fmaf(w[i][7], b.w, s);
        acc[i][t] = s;
      }
    }
  }
}

// Adds one decoded piece of each of R rows (piece p_in_block of the blocks whose first column is
// column0).
template <class Traits, int NT, int R>
SPECDEC_DEVICE void accumulate_piece(const typename Traits::Piece (&piece)[R], int p_in_block,
                                     int column0, const float* x, int in, int n,
                                     float (&acc)[R][NT]) {
  constexpr PieceLayout kLayout = piece_layout(Traits::kType);
  SPECDEC_UNROLL
  for (int g = 0; g < kLayout.groups; ++g) {
    float w[R][8];
    SPECDEC_UNROLL
    for (int i = 0; i < R; ++i) Traits::group(piece[i], g, w[i]);
    accumulate_group<NT, R>(w, x, in, n, column0 + group_column(Traits::kType, p_in_block, g), acc);
  }
}

constexpr int kLanesPerRow = kSkinnyLanesPerRow;
constexpr int kRowsPerWarp = kWarpSize / kLanesPerRow;

template <class Traits, int NT, int R, bool kElementwise>
__global__ void skinny_gemm_kernel(const std::uint8_t* w, std::size_t row_bytes, const float* x,
                                   float* y, int n, int out, int in, int ldy) {
  // Both half-warps run the whole kernel (rows past the end compute on row `out - 1` and do
  // not store), so that every shuffle has its full warp. Half-warp h of the warp takes rows
  // first_row + h R .. + R - 1.
  const int lane = lane_id() % kLanesPerRow;
  const int first_row =
      (static_cast<int>(blockIdx.x) * warps_per_block() + warp_id()) * kRowsPerWarp * R;
  if (first_row >= out) return;  // the whole warp leaves together: no collective is skipped
  const int row0 = first_row + lane_id() / kLanesPerRow * R;
  const std::uint8_t* wrow[R];
  SPECDEC_UNROLL
  for (int i = 0; i < R; ++i)
    wrow[i] = w + static_cast<std::size_t>(min_of(row0 + i, out - 1)) * row_bytes;
  float acc[R][NT];
  SPECDEC_UNROLL
  for (int i = 0; i < R; ++i) {
    SPECDEC_UNROLL
    for (int t = 0; t < NT; ++t) acc[i][t] = 0.0f;
  }

  if constexpr (kElementwise) {
    for (int k = lane; k < in; k += kLanesPerRow) {
      float wk[R];
      SPECDEC_UNROLL
      for (int i = 0; i < R; ++i) wk[i] = Traits::element(wrow[i], k);
      SPECDEC_UNROLL
      for (int t = 0; t < NT; ++t) {
        if (t < n) {
          const float xk = x[static_cast<std::size_t>(t) * in + k];
          SPECDEC_UNROLL
          for (int i = 0; i < R; ++i) acc[i][t] = fmaf(wk[i], xk, acc[i][t]);
        }
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
      Piece piece[kInFlight][R];
      SPECDEC_UNROLL
      for (int k = 0; k < kInFlight; ++k) {
        const int q = p + k * kLanesPerRow;
        SPECDEC_UNROLL
        for (int i = 0; i < R; ++i) {
          piece[k][i] = k == 0 || q < pieces
                            ? Traits::load(wrow[i] + static_cast<std::size_t>(q / kLayout.pieces) *
                                                         kLayout.block_bytes,
                                           q % kLayout.pieces)
                            : Piece{};
        }
      }
      SPECDEC_UNROLL
      for (int k = 0; k < kInFlight; ++k) {
        const int q = p + k * kLanesPerRow;
        if (k == 0 || q < pieces) {
          accumulate_piece<Traits, NT, R>(piece[k], q % kLayout.pieces,
                                          q / kLayout.pieces * kLayout.block_elems, x, in, n, acc);
        }
      }
    }
  }

  const int slot = scatter_slot<NT, kLanesPerRow>(lane);
  constexpr int kLanesPerSlot = kLanesPerRow / NT;
  SPECDEC_UNROLL
  for (int i = 0; i < R; ++i) {
    const float sum = warp_sum_scatter<NT, kLanesPerRow>(acc[i]);
    if (row0 + i < out && lane % kLanesPerSlot == 0 && slot < n)
      y[static_cast<std::size_t>(slot) * ldy + row0 + i] = sum;
  }
}

struct Args {
  const void* w;
  const float* x;
  float* y;
  int n, out, in, warps, ldy, rows;
  cudaStream_t stream;
};

template <class Traits, int NT, int R>
void run(const Args& a) {
  constexpr PieceLayout kLayout = piece_layout(Traits::kType);
  const dim3 grid(static_cast<unsigned>(ceil_div(a.out, a.warps * kRowsPerWarp * R)));
  const dim3 block(static_cast<unsigned>(a.warps * kWarpSize));
  const auto* w = static_cast<const std::uint8_t*>(a.w);
  const auto aligned16 = [](const void* p) {
    return reinterpret_cast<std::uintptr_t>(p) % 16 == 0;
  };
  if constexpr (Traits::kFloat) {
    const std::size_t row_bytes =
        static_cast<std::size_t>(a.in) * (kLayout.block_bytes / kLayout.block_elems);
    if (a.in % kLayout.block_elems == 0 && aligned16(a.w) && aligned16(a.x)) {
      launch(skinny_gemm_kernel<Traits, NT, R, false>, grid, block, 0, a.stream, w, row_bytes, a.x,
             a.y, a.n, a.out, a.in, a.ldy);
    } else {
      launch(skinny_gemm_kernel<Traits, NT, R, true>, grid, block, 0, a.stream, w, row_bytes, a.x,
             a.y, a.n, a.out, a.in, a.ldy);
    }
  } else {
    const std::size_t row_bytes =
        static_cast<std::size_t>(a.in / kLayout.block_elems) * kLayout.block_bytes;
    launch(skinny_gemm_kernel<Traits, NT, R, false>, grid, block, 0, a.stream, w, row_bytes, a.x,
           a.y, a.n, a.out, a.in, a.ldy);
  }
}

// Rows per lane at most: 2 for the 64-weight pieces of Q2_K, Q3_K and Q6_K and for IQ4_XS (its
// pieces in flight and codebook lookups), whose four rows' decoded groups and partial sums
// would spill registers (ptxas, sm_80 and sm_90 at NT = 16); 4 otherwise.
template <class Traits>
constexpr int kMaxRowsPerLane = piece_layout(Traits::kType).groups > 4 || Traits::kType
                                                                              == DType::iq4_xs
                                    ? 2
                                    : 4;

template <class Traits, int NT>
void dispatch_rows(const Args& a) {
  if (a.rows == 1) return run<Traits, NT, 1>(a);
  if (a.rows == 2 || kMaxRowsPerLane<Traits> == 2) return run<Traits, NT, 2>(a);
  if constexpr (kMaxRowsPerLane<Traits> == 4) run<Traits, NT, 4>(a);
}

template <class Traits>
void dispatch(const Args& a) {
  if (a.n == 1) return dispatch_rows<Traits, 1>(a);
  if (a.n == 2) return dispatch_rows<Traits, 2>(a);
  if (a.n <= 4) return dispatch_rows<Traits, 4>(a);
  if (a.n <= 8) return dispatch_rows<Traits, 8>(a);
  return dispatch_rows<Traits, 16>(a);
}

}  // namespace

bool has_weight_kernels(DType t) noexcept {
  return with_weight_traits(t, [](auto) {});
}

int skinny_rows_per_lane(int out) noexcept {
  // Measured on an H200 (132 SMs; docs/cuda.md, section 10.5): more rows per lane pay on tall
  // matrices at every n (Q4_K, 151936 x 1536: 1.6x at n = 1, 3.0x at n = 16; 11264 x 2048:
  // 1.5-1.9x) and lose on short ones (2048-2560 rows: up to 1.5x slower), whose grids then
  // have too few warps to hide the memory latency. So: at least 1024 warps (two rows each).
  return out >= 8192 ? 4 : out >= 4096 ? 2 : 1;
}

void skinny_gemm(DType type, const void* w, const float* x, float* y, int n, int out, int in,
                 cudaStream_t stream, int warps, int ldy, int rows_per_lane) {
  if (n < 1 || n > kSkinnyMaxTokens) throw Error("skinny_gemm: n must be in [1, 16]");
  if (!valid_rows_per_lane(rows_per_lane))
    throw Error("skinny_gemm: rows_per_lane must be 0 (automatic), 1, 2 or 4, not " +
                std::to_string(rows_per_lane));
  if (rows_per_lane == 0) rows_per_lane = skinny_rows_per_lane(out);
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
  const Args args{w, x, y, n, out, in, warps, ldy, rows_per_lane, stream};
  if (!with_weight_traits(type, [&](auto tag) { dispatch<typename decltype(tag)::type>(args); }))
    throw Error(std::string("skinny_gemm: no kernel for ") + dtype_name(type) + " weights");
  SPECDEC_CUDA_CHECK_LAUNCH("skinny_gemm_kernel");
}

}  // namespace specdec::cuda::kernels
