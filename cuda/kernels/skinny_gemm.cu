// Skinny GEMM for decode / verify (see skinny_gemm.hpp).
//
// Design: 16 lanes per output row (two rows per warp), `warps` warps per block. Lane l of a row
// streams the row's 16-byte chunks l, l + 16, l + 32, ... (eight 16-bit weights each; two
// chunks in flight per iteration), widens them to f32 and multiplies with the matching eight
// inputs of each of the n tokens (read as two float4; x is small and stays in L1/L2 across the
// rows of a block). Each lane keeps NT <= 16 partial sums (NT = n rounded up to a power of two,
// a template parameter so they stay in registers), and warp_sum_scatter reduces all NT sums over
// the 16 lanes with NT - 1 + log2(16 / NT) shuffles. Half-warp rows keep every lane busy on short
// rows (a 128-wide row is 16 chunks) and halve the shuffles per row.
// When `in` is not a multiple of 8 (rows not 16-byte aligned) a scalar variant reads one weight
// per lane per step instead; both keep a batch-invariant order.
#include "common/check.hpp"
#include "common/convert.cuh"
#include "common/reduce.cuh"
#include "kernels/skinny_gemm.hpp"

namespace specdec::cuda::kernels {

namespace {

// Adds the eight products of one weight chunk to the partial sums of every token.
template <int NT>
SPECDEC_DEVICE void accumulate_chunk(const float (&w)[8], const float* x, int in, int n, int column,
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

constexpr int kLanesPerRow = 16;
constexpr int kRowsPerWarp = kWarpSize / kLanesPerRow;

template <class T, int NT, bool kVector>
__global__ void skinny_gemm_kernel(const T* w, const float* x, float* y, int n, int out, int in) {
  // Both half-warps run the whole kernel (rows past the end compute on row `out - 1` and do
  // not store), so that every shuffle has its full warp.
  const int lane = lane_id() % kLanesPerRow;
  const int first_row =
      (static_cast<int>(blockIdx.x) * warps_per_block() + warp_id()) * kRowsPerWarp;
  if (first_row >= out) return;  // the whole warp leaves together: no collective is skipped
  const int row = first_row + lane_id() / kLanesPerRow;
  const bool store = row < out;
  const int read_row = store ? row : out - 1;
  float acc[NT];
  SPECDEC_UNROLL
  for (int t = 0; t < NT; ++t) acc[t] = 0.0f;

  if constexpr (kVector) {
    const auto* wrow = reinterpret_cast<const uint4*>(w + static_cast<std::size_t>(read_row) * in);
    const int chunks = in / 8;
    for (int c = lane; c < chunks; c += 2 * kLanesPerRow) {
      // Both loads are issued before either chunk is used (memory-level parallelism); the sums
      // still see chunk c before chunk c + 16, the same order as a one-chunk loop.
      const bool second = c + kLanesPerRow < chunks;
      const uint4 p0 = load_streaming(wrow + c);
      const uint4 p1 = second ? load_streaming(wrow + c + kLanesPerRow) : make_uint4(0, 0, 0, 0);
      float w0[8];
      unpack8(p0, w0, T{});
      accumulate_chunk<NT>(w0, x, in, n, 8 * c, acc);
      if (second) {
        float w1[8];
        unpack8(p1, w1, T{});
        accumulate_chunk<NT>(w1, x, in, n, 8 * (c + kLanesPerRow), acc);
      }
    }
  } else {
    const T* wrow = w + static_cast<std::size_t>(read_row) * in;
    for (int k = lane; k < in; k += kLanesPerRow) {
      const float wk = to_float(wrow[k]);
      SPECDEC_UNROLL
      for (int t = 0; t < NT; ++t) {
        if (t < n) acc[t] = fmaf(wk, x[static_cast<std::size_t>(t) * in + k], acc[t]);
      }
    }
  }

  const float sum = warp_sum_scatter<NT, kLanesPerRow>(acc);
  const int slot = scatter_slot<NT, kLanesPerRow>(lane);
  constexpr int kLanesPerSlot = kLanesPerRow / NT;
  if (store && lane % kLanesPerSlot == 0 && slot < n)
    y[static_cast<std::size_t>(slot) * out + row] = sum;
}

template <class T, int NT>
void run(const void* w, const float* x, float* y, int n, int out, int in, int warps,
         cudaStream_t stream) {
  const dim3 grid(static_cast<unsigned>(ceil_div(out, warps * kRowsPerWarp)));
  const dim3 block(static_cast<unsigned>(warps * kWarpSize));
  const auto* typed = static_cast<const T*>(w);
  const bool vector = in % 8 == 0 && reinterpret_cast<std::uintptr_t>(w) % 16 == 0 &&
                      reinterpret_cast<std::uintptr_t>(x) % 16 == 0;
  if (vector) {
    launch(skinny_gemm_kernel<T, NT, true>, grid, block, 0, stream, typed, x, y, n, out, in);
  } else {
    launch(skinny_gemm_kernel<T, NT, false>, grid, block, 0, stream, typed, x, y, n, out, in);
  }
}

template <class T>
void dispatch(const void* w, const float* x, float* y, int n, int out, int in, int warps,
              cudaStream_t stream) {
  if (n == 1) return run<T, 1>(w, x, y, n, out, in, warps, stream);
  if (n == 2) return run<T, 2>(w, x, y, n, out, in, warps, stream);
  if (n <= 4) return run<T, 4>(w, x, y, n, out, in, warps, stream);
  if (n <= 8) return run<T, 8>(w, x, y, n, out, in, warps, stream);
  return run<T, 16>(w, x, y, n, out, in, warps, stream);
}

}  // namespace

void skinny_gemm(WeightType type, const void* w, const float* x, float* y, int n, int out, int in,
                 cudaStream_t stream, int warps) {
  if (n < 1 || n > kSkinnyMaxTokens) throw Error("skinny_gemm: n must be in [1, 16]");
  if (out <= 0 || in <= 0) throw Error("skinny_gemm: empty matrix");
  if (warps < 1 || warps > 32) throw Error("skinny_gemm: warps must be in [1, 32]");
  if (type == WeightType::f16) {
    dispatch<__half>(w, x, y, n, out, in, warps, stream);
  } else {
    dispatch<__nv_bfloat16>(w, x, y, n, out, in, warps, stream);
  }
  SPECDEC_CUDA_CHECK_LAUNCH("skinny_gemm_kernel");
}

}  // namespace specdec::cuda::kernels
