#pragma once
// Warp and block reductions and scans, written once for every kernel (CUB does not compile
// under the emulator).
//
// Conventions:
//   - blocks are one-dimensional with blockDim.x a multiple of 32 (every warp is full, so the
//     full-mask shuffles below are legal; the emulator reports a partial warp);
//   - reductions are "all-reduce": every participating thread gets the result;
//   - results are deterministic: the combination tree depends only on the block size, never on
//     timing, and every thread combines in the same order, so all threads get bit-identical
//     values (floating-point + and max are commutative, so a butterfly's two partners agree);
//   - the block-level functions contain __syncthreads: every thread of the block must call them.

#include "prelude.cuh"

namespace specdec::cuda {

struct SumOp {
  template <class T>
  SPECDEC_DEVICE T operator()(T a, T b) const {
    return a + b;
  }
};

struct MaxOp {
  template <class T>
  SPECDEC_DEVICE T operator()(T a, T b) const {
    return a > b ? a : b;
  }
};

struct MinOp {
  template <class T>
  SPECDEC_DEVICE T operator()(T a, T b) const {
    return a < b ? a : b;
  }
};

/// A value and where it came from; the larger value wins, ties go to the smaller index (the
/// same rule as the host's argmax: the first maximum).
struct ArgMax {
  float value;
  int index;
};

struct ArgMaxOp {
  SPECDEC_DEVICE ArgMax operator()(ArgMax a, ArgMax b) const {
    if (a.value > b.value) return a;
    if (b.value > a.value) return b;
    return a.index <= b.index ? a : b;
  }
};

SPECDEC_DEVICE int lane_id() { return static_cast<int>(threadIdx.x) & (kWarpSize - 1); }
SPECDEC_DEVICE int warp_id() { return static_cast<int>(threadIdx.x) / kWarpSize; }
SPECDEC_DEVICE int warps_per_block() { return static_cast<int>(blockDim.x) / kWarpSize; }

/// Shuffles an ArgMax (two shuffles: value and index).
SPECDEC_DEVICE ArgMax shfl_xor(ArgMax v, int lane_mask, int width = kWarpSize) {
  return ArgMax{__shfl_xor_sync(kFullMask, v.value, lane_mask, width),
                __shfl_xor_sync(kFullMask, v.index, lane_mask, width)};
}
template <class T>
SPECDEC_DEVICE T shfl_xor(T v, int lane_mask, int width = kWarpSize) {
  return __shfl_xor_sync(kFullMask, v, lane_mask, width);
}
SPECDEC_DEVICE ArgMax shfl_up(ArgMax v, unsigned delta) {
  return ArgMax{__shfl_up_sync(kFullMask, v.value, delta),
                __shfl_up_sync(kFullMask, v.index, delta)};
}
template <class T>
SPECDEC_DEVICE T shfl_up(T v, unsigned delta) {
  return __shfl_up_sync(kFullMask, v, delta);
}

/// Butterfly all-reduce over groups of `Width` consecutive lanes (Width a power of two <= 32);
/// every lane of the group gets op over the group. All 32 lanes must call it.
template <int Width = kWarpSize, class T, class Op>
SPECDEC_DEVICE T warp_all_reduce(T v, Op op) {
  static_assert(Width >= 1 && Width <= kWarpSize && (Width & (Width - 1)) == 0);
  SPECDEC_UNROLL
  for (int offset = Width / 2; offset > 0; offset /= 2) v = op(v, shfl_xor(v, offset, Width));
  return v;
}

template <int Width = kWarpSize>
SPECDEC_DEVICE float warp_sum(float v) {
  return warp_all_reduce<Width>(v, SumOp{});
}
template <int Width = kWarpSize>
SPECDEC_DEVICE float warp_max(float v) {
  return warp_all_reduce<Width>(v, MaxOp{});
}

/// Sums N values per lane over each group of Width consecutive lanes (Width a power of two,
/// N <= Width) with N - 1 + log2(Width / N) shuffles instead of N log2(Width): a reduce-scatter
/// (each step halves the values a lane holds and exchanges the other half) followed by a
/// butterfly. Returns, in lane l, the group's sum of v[slot] for slot = scatter_slot<N, Width>(l);
/// lanes with the same slot get the same bits.
/// The combination tree of every slot is the plain butterfly's (partners differing in the
/// highest lane bit of the group first, then the next, ... bit 0), so the result for a slot does
/// not depend on N: this is what makes the skinny GEMM batch-invariant.
namespace detail {
/// One reduce-scatter step of warp_sum_scatter on the first Count values (a template recursion
/// rather than a loop, so that every loop has a compile-time trip count and nvcc unrolls it
/// completely: the values stay in registers).
template <int Count, int Offset, int N>
SPECDEC_DEVICE void scatter_steps(float (&v)[N], int lane) {
  if constexpr (Count > 1) {
    const bool upper = (lane & Offset) != 0;
    SPECDEC_UNROLL
    for (int i = 0; i < Count / 2; ++i) {
      const float send = upper ? v[i] : v[i + Count / 2];
      const float keep = upper ? v[i + Count / 2] : v[i];
      v[i] = keep + __shfl_xor_sync(kFullMask, send, Offset);
    }
    scatter_steps<Count / 2, Offset / 2>(v, lane);
  }
}
}  // namespace detail

template <int N, int Width = kWarpSize>
SPECDEC_DEVICE float warp_sum_scatter(float (&v)[N]) {
  static_assert(N >= 1 && N <= Width && (N & (N - 1)) == 0);
  static_assert(Width <= kWarpSize && (Width & (Width - 1)) == 0);
  detail::scatter_steps<N, Width / 2>(v, lane_id());
  float s = v[0];
  SPECDEC_UNROLL
  for (int offset = Width / N / 2; offset > 0; offset /= 2)
    s += __shfl_xor_sync(kFullMask, s, offset);
  return s;
}

/// The slot whose sum warp_sum_scatter<N, Width> returns in lane `lane`.
template <int N, int Width = kWarpSize>
SPECDEC_HD constexpr int scatter_slot(int lane) {
  int shift = 0;  // log2(Width / N)
  for (int w = Width; w > N; w /= 2) ++shift;
  return (lane % Width) >> shift;
}

/// Block-wide all-reduce. `scratch` is shared memory for at least warps_per_block() values.
/// Starts with a barrier, so the same scratch can serve consecutive calls.
template <class T, class Op>
SPECDEC_DEVICE T block_all_reduce(T v, Op op, T* scratch) {
  v = warp_all_reduce(v, op);
  __syncthreads();
  if (lane_id() == 0) scratch[warp_id()] = v;
  __syncthreads();
  T r = scratch[0];
  const int warps = warps_per_block();
  for (int w = 1; w < warps; ++w) r = op(r, scratch[w]);
  return r;
}

/// block_all_reduce with its own shared scratch (one per instantiation).
template <class T, class Op>
SPECDEC_DEVICE T block_all_reduce(T v, Op op) {
  __shared__ T scratch[kWarpSize];
  return block_all_reduce(v, op, scratch);
}

SPECDEC_DEVICE float block_sum(float v) { return block_all_reduce(v, SumOp{}); }
SPECDEC_DEVICE float block_max(float v) { return block_all_reduce(v, MaxOp{}); }
SPECDEC_DEVICE ArgMax block_argmax(ArgMax v) { return block_all_reduce(v, ArgMaxOp{}); }

/// Inclusive scan over the warp (Hillis-Steele, log2(32) shuffles).
template <class T, class Op>
SPECDEC_DEVICE T warp_inclusive_scan(T v, Op op) {
  const int lane = lane_id();
  SPECDEC_UNROLL
  for (int offset = 1; offset < kWarpSize; offset *= 2) {
    const T other = shfl_up(v, static_cast<unsigned>(offset));
    if (lane >= offset) v = op(other, v);
  }
  return v;
}

template <class T>
struct ScanResult {
  T inclusive;  ///< op over the values of threads 0 ... this one
  T exclusive;  ///< op over the values of threads 0 ... this one - 1 (`identity` for thread 0)
  T total;      ///< op over the whole block
};

/// Block-wide scan in thread order. `scratch`: shared memory for warps_per_block() values.
/// Starts with a barrier, so the same scratch can serve consecutive calls.
template <class T, class Op>
SPECDEC_DEVICE ScanResult<T> block_scan(T v, Op op, T identity, T* scratch) {
  const int lane = lane_id();
  const int warp = warp_id();
  const T inclusive_in_warp = warp_inclusive_scan(v, op);
  T exclusive_in_warp = shfl_up(inclusive_in_warp, 1u);
  if (lane == 0) exclusive_in_warp = identity;
  __syncthreads();
  if (lane == kWarpSize - 1) scratch[warp] = inclusive_in_warp;
  __syncthreads();
  T prefix = identity;  // op over the warps before this one, combined in warp order
  for (int w = 0; w < warp; ++w) prefix = op(prefix, scratch[w]);
  T total = identity;  // the same order in every thread, so every thread gets the same bits
  const int warps = warps_per_block();
  for (int w = 0; w < warps; ++w) total = op(total, scratch[w]);
  return ScanResult<T>{op(prefix, inclusive_in_warp), op(prefix, exclusive_in_warp), total};
}

template <class T, class Op>
SPECDEC_DEVICE ScanResult<T> block_scan(T v, Op op, T identity) {
  __shared__ T scratch[kWarpSize];
  return block_scan(v, op, identity, scratch);
}

}  // namespace specdec::cuda
