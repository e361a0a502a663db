#pragma once
// Block-level building blocks of the sampling kernels: one thread block works on one row of V
// values (a distribution or a row of logits).
//
// Bit-exactness with the host sampling core (include/specdec/sampling/verify.hpp). Every
// decision the host makes from a processed distribution is reproduced bit for bit:
//   - acceptance u * q(x) < p(x) and the Philox uniforms are the core's own SPECDEC_HD functions;
//   - the inverse CDF's block sums follow the core's fixed association: 256-entry blocks, each
//     summed by 8 lanes (lane j adds entries j, j + 8, ... in order, starting from 0) combined as
//     ((l0 + l1) + (l2 + l3)) + ((l4 + l5) + (l6 + l7)). Here a group of 8 threads owns a block,
//     thread j of the group is lane j, and an xor-butterfly over 1, 2, 4 forms exactly that tree
//     (IEEE addition is commutative, so both partners of a butterfly hold the same bits);
//   - the double-precision totals, the crossing-block search and the walk inside the crossing
//     block are serial, in the core's order, on thread 0 (a few hundred operations).
// Processing logits into a distribution (process_row) reproduces the core's kept set exactly
// for temperature and top-k (an exact radix select) and min-p, and for top-p except when the
// cumulative mass lands within rounding of top_p; the probabilities themselves differ from the
// host's by rounding (device expf, parallel sums). See docs/cuda.md.

#include <cstdint>

#include <cstddef>
#include <string>

#include "common/reduce.cuh"
#include "specdec/common.hpp"
#include "specdec/sampling/philox.hpp"
#include "specdec/sampling/process.hpp"
#include "specdec/sampling/verify.hpp"

namespace specdec::cuda::sampling_device {

using sampling::VerifyError;
using sampling::VerifyOutcome;

inline constexpr int kScanBlock = static_cast<int>(sampling::kScanBlock);  // 256
inline constexpr int kGroup = 8;                                           // lanes per block sum

SPECDEC_HD constexpr int scan_blocks(int vocab) { return (vocab + kScanBlock - 1) / kScanBlock; }

// ------------------------------------------------------------------ lane-order block sums

/// sums[c * blocks + b] = the core's lane-order sum of weight c over scan block b, for the
/// `Count` weights that entry(i, values) produces for entry i. Returns (in every thread)
/// whether entry() reported a negative input anywhere. Ends with a barrier.
template <int Count, class Entry>
SPECDEC_DEVICE bool lane_order_block_sums(const Entry& entry, int vocab, float* sums) {
  const int blocks = scan_blocks(vocab);
  const int group = static_cast<int>(threadIdx.x) / kGroup;
  const int lane = static_cast<int>(threadIdx.x) % kGroup;
  const int groups = static_cast<int>(blockDim.x) / kGroup;
  bool negative = false;
  // The trip count is the same for every thread, so every shuffle has its whole warp.
  for (int base = 0; base < blocks; base += groups) {
    const int b = base + group;
    float acc[Count];
    SPECDEC_UNROLL
    for (int c = 0; c < Count; ++c) acc[c] = 0.0f;
    if (b < blocks) {
      const int end = min_of(b * kScanBlock + kScanBlock, vocab);
      for (int i = b * kScanBlock + lane; i < end; i += kGroup) {
        float v[Count];
        negative |= entry(i, v);
        SPECDEC_UNROLL
        for (int c = 0; c < Count; ++c) acc[c] += v[c];
      }
    }
    SPECDEC_UNROLL
    for (int c = 0; c < Count; ++c) {
      float s = acc[c];
      s += __shfl_xor_sync(kFullMask, s, 1);
      s += __shfl_xor_sync(kFullMask, s, 2);
      s += __shfl_xor_sync(kFullMask, s, 4);
      if (b < blocks && lane == 0) sums[c * blocks + b] = s;
    }
  }
  return __syncthreads_or(negative) != 0;
}

/// sums[b] = the lane-order sum of the row w over scan block b; returns whether w has a
/// negative entry. The one-weight pass of the plain sampler, the point-mass row statistics and
/// the tree loop's totals. Ends with a barrier.
SPECDEC_DEVICE bool plain_block_sums(const float* w, int vocab, float* sums) {
  return lane_order_block_sums<1>(
      [&](int i, float(&v)[1]) {
        v[0] = w[i];
        return w[i] < 0.0f;
      },
      vocab, sums);
}

/// Pass 1's block sums as the core's inverse CDF reads them: block b's sum is sums[b].
struct SharedSums {
  const float* sums;
  SPECDEC_DEVICE float operator()(std::size_t begin, std::size_t) const {
    return sums[begin / sampling::kScanBlock];
  }
};

/// Thread 0's outcome, returned in every thread. (VerifyOutcome has default member
/// initialisers, which a __shared__ variable may not have: it travels as raw shared bytes.)
SPECDEC_DEVICE VerifyOutcome broadcast_outcome(const VerifyOutcome& from_thread0) {
  __shared__ double storage[(sizeof(VerifyOutcome) + sizeof(double) - 1) / sizeof(double)];
  if (threadIdx.x == 0) memcpy(storage, &from_thread0, sizeof(VerifyOutcome));
  __syncthreads();
  VerifyOutcome out;
  memcpy(&out, storage, sizeof(VerifyOutcome));
  __syncthreads();  // the storage may be rewritten by the next call
  return out;
}

// ------------------------------------------------------------------ row samplers
// All threads of the block call them; the outcome is returned in every thread. `sums` is shared
// memory for 3 * scan_blocks(vocab) floats. They begin and end with a barrier.

/// The core's sample_row: the bonus token from the distribution p.
SPECDEC_DEVICE VerifyOutcome sample_plain_row(const float* p, int vocab, float u, int row,
                                              float* sums) {
  __syncthreads();
  const bool negative = plain_block_sums(p, vocab, sums);
  VerifyOutcome out;
  if (threadIdx.x == 0) {
    const auto V = static_cast<std::size_t>(vocab);
    const SharedSums p_sums{sums};
    const sampling::detail::RowStats stats{sampling::detail::sum_of_blocks(p_sums, V), negative};
    out = sampling::detail::finish_plain(p, V, u, static_cast<std::size_t>(row), stats, p_sums);
  }
  return broadcast_outcome(out);
}

/// The core's sample_residual_row: norm(max(0, p - q)), or p when the residual has no mass.
SPECDEC_DEVICE VerifyOutcome sample_residual_row(const float* p, const float* q, int vocab, float u,
                                                 int row, float* sums) {
  __shared__ int negative_q;
  __syncthreads();
  if (threadIdx.x == 0) negative_q = 0;
  __syncthreads();
  const int blocks = scan_blocks(vocab);
  const bool negative_p = lane_order_block_sums<3>(
      [&](int i, float(&v)[3]) {
        v[0] = sampling::detail::positive_part(p[i] - q[i]);
        v[1] = p[i];
        v[2] = q[i];
        if (q[i] < 0.0f) negative_q = 1;  // benign race: every writer stores 1
        return p[i] < 0.0f;
      },
      vocab, sums);
  VerifyOutcome out;
  if (threadIdx.x == 0) {
    const auto V = static_cast<std::size_t>(vocab);
    const SharedSums r_sums{sums};
    const SharedSums p_sums{sums + blocks};
    const SharedSums q_sums{sums + 2 * blocks};
    const double total = sampling::detail::sum_of_blocks(r_sums, V);
    const sampling::detail::RowStats p_stats{sampling::detail::sum_of_blocks(p_sums, V),
                                             negative_p};
    const sampling::detail::RowStats q_stats{sampling::detail::sum_of_blocks(q_sums, V),
                                             negative_q != 0};
    out = sampling::detail::finish_residual(p, q, V, u, static_cast<std::size_t>(row), total,
                                            p_stats, q_stats, r_sums, p_sums);
  }
  return broadcast_outcome(out);
}

/// The core's sample_exclude_one_row: p without entry x, or p when that has no mass.
SPECDEC_DEVICE VerifyOutcome sample_exclude_one_row(const float* p, int vocab, int x, float u,
                                                    int row, float* sums) {
  __syncthreads();
  const int blocks = scan_blocks(vocab);
  const bool negative = lane_order_block_sums<2>(
      [&](int i, float(&v)[2]) {
        v[0] = i == x ? 0.0f : p[i];
        v[1] = p[i];
        return p[i] < 0.0f;
      },
      vocab, sums);
  VerifyOutcome out;
  if (threadIdx.x == 0) {
    const auto V = static_cast<std::size_t>(vocab);
    const SharedSums x_sums{sums};
    const SharedSums p_sums{sums + blocks};
    const sampling::detail::RowStats stats{sampling::detail::sum_of_blocks(p_sums, V), negative};
    out = sampling::detail::finish_exclude_one(
        p, V, static_cast<std::size_t>(x), u, static_cast<std::size_t>(row),
        sampling::detail::sum_of_blocks(x_sums, V), stats, x_sums, p_sums);
  }
  return broadcast_outcome(out);
}

/// The core's row samplers (SerialRowSampler) done by a whole block: the verify loop
/// (sampling::verify_loop) runs in every thread and calls these uniformly.
struct BlockRowSampler {
  int vocab;
  float* sums;  ///< shared memory for 3 * scan_blocks(vocab) floats
  SPECDEC_DEVICE VerifyOutcome plain(const float* p, float u, std::size_t row) const {
    return sample_plain_row(p, vocab, u, static_cast<int>(row), sums);
  }
  SPECDEC_DEVICE VerifyOutcome residual(const float* p, const float* q, float u,
                                        std::size_t row) const {
    return sample_residual_row(p, q, vocab, u, static_cast<int>(row), sums);
  }
  SPECDEC_DEVICE VerifyOutcome exclude_one(const float* p, std::size_t x, float u,
                                           std::size_t row) const {
    return sample_exclude_one_row(p, vocab, static_cast<int>(x), u, static_cast<int>(row), sums);
  }

  // The tree loop's row passes (SerialRowSampler's, sampling/verify.hpp), split between the
  // block's threads in the lane order, so each gives the serial pass's bits. Each begins with a
  // barrier (the previous pass's readers of `sums` and of w are done) and returns the same values
  // in every thread.

  SPECDEC_DEVICE void row_stats(const float* p, const float* q, sampling::detail::RowStats& p_stats,
                                sampling::detail::RowStats& q_stats) const {
    const auto V = static_cast<std::size_t>(vocab);
    if (q == nullptr) {  // point masses: p alone (q_stats is not read)
      __syncthreads();
      const bool negative_p = plain_block_sums(p, vocab, sums);
      p_stats = {sampling::detail::sum_of_blocks(SharedSums{sums}, V), negative_p};
      q_stats = {};
      return;
    }
    __shared__ int negative_q;
    __syncthreads();
    if (threadIdx.x == 0) negative_q = 0;
    __syncthreads();
    const int blocks = scan_blocks(vocab);
    const bool negative_p = lane_order_block_sums<2>(
        [&](int i, float(&v)[2]) {
          v[0] = p[i];
          v[1] = q[i];
          if (q[i] < 0.0f) negative_q = 1;  // benign race: every writer stores 1
          return p[i] < 0.0f;
        },
        vocab, sums);
    p_stats = {sampling::detail::sum_of_blocks(SharedSums{sums}, V), negative_p};
    q_stats = {sampling::detail::sum_of_blocks(SharedSums{sums + blocks}, V), negative_q != 0};
  }
  template <class F>
  SPECDEC_DEVICE void fill(float* w, const F& f) const {
    __syncthreads();
    for (int j = static_cast<int>(threadIdx.x); j < vocab; j += static_cast<int>(blockDim.x))
      w[j] = f(static_cast<std::size_t>(j));
    __syncthreads();  // every thread's entries are visible to the block
  }
  SPECDEC_DEVICE void set(float* w, std::size_t j, float value) const {
    __syncthreads();
    if (threadIdx.x == 0) w[j] = value;
    __syncthreads();
  }
  SPECDEC_DEVICE double total(const float* w) const {
    block_sums(w);
    return sampling::detail::sum_of_blocks(SharedSums{sums}, static_cast<std::size_t>(vocab));
  }
  SPECDEC_DEVICE token_t sample_weights(const float* w, double total, double u) const {
    __shared__ token_t chosen;
    block_sums(w);
    if (threadIdx.x == 0) {
      chosen = sampling::detail::inverse_cdf<float>(sampling::detail::PlainWeights<float>{w},
                                                    static_cast<std::size_t>(vocab), total, u,
                                                    SharedSums{sums});
    }
    __syncthreads();
    return chosen;
  }

 private:
  /// sums[b] = w's lane-order sum over scan block b (after a barrier; ends with one).
  SPECDEC_DEVICE void block_sums(const float* w) const {
    __syncthreads();
    (void)plain_block_sums(w, vocab, sums);
  }
};

// ------------------------------------------------------------------ row passes

/// Calls f(i, row[i]) for every i in [0, n), each thread of the block a share of the row (which
/// share is unspecified: f must combine with an order-free operation such as a minimum or the
/// argmax). A 16-byte aligned row is read as float4, kRowUnroll of them in flight per thread:
/// one block reads a 152K-entry vocabulary row, and with one 4-byte load per iteration the pass
/// waited on the memory latency at every step (measured on an H100: about 110 us a pass at
/// 256 threads, docs/cuda.md section 10).
inline constexpr int kRowUnroll = 4;
template <class F>
SPECDEC_DEVICE void for_each_in_row(const float* row, int n, F&& f) {
  const int tid = static_cast<int>(threadIdx.x);
  const int threads = static_cast<int>(blockDim.x);
  int scalar_from = 0;
  if ((reinterpret_cast<std::uintptr_t>(row) & 15u) == 0) {
    const int quads = n / 4;
    const auto* row4 = reinterpret_cast<const float4*>(row);
    int j = tid;
    for (; j + (kRowUnroll - 1) * threads < quads; j += kRowUnroll * threads) {
      float4 v[kRowUnroll];
      SPECDEC_UNROLL
      for (int u = 0; u < kRowUnroll; ++u) v[u] = row4[j + u * threads];
      SPECDEC_UNROLL
      for (int u = 0; u < kRowUnroll; ++u) {
        const int i = 4 * (j + u * threads);
        f(i, v[u].x);
        f(i + 1, v[u].y);
        f(i + 2, v[u].z);
        f(i + 3, v[u].w);
      }
    }
    for (; j < quads; j += threads) {
      const float4 v = row4[j];
      f(4 * j, v.x);
      f(4 * j + 1, v.y);
      f(4 * j + 2, v.z);
      f(4 * j + 3, v.w);
    }
    scalar_from = 4 * quads;
  }
  for (int i = scalar_from + tid; i < n; i += threads) f(i, row[i]);
}

/// The index of the first non-finite entry of row[0 .. n), or 0x7fffffff; in every thread.
/// Begins with a barrier (via block_all_reduce).
SPECDEC_DEVICE int first_non_finite(const float* row, int n) {
  int bad = 0x7fffffff;
  for_each_in_row(row, n, [&](int i, float v) {
    if (!sampling::detail::finite(v) && i < bad) bad = i;
  });
  return block_all_reduce(bad, MinOp{});
}

// ------------------------------------------------------------------ argmax and selection

/// Index of the largest of row[0 .. n) (the lowest index on ties) and whether every entry is
/// finite, in every thread. Begins with a barrier (via block_all_reduce).
struct RowArgmax {
  int index;
  bool finite;
};
SPECDEC_DEVICE RowArgmax row_argmax(const float* row, int n) {
  ArgMax best{-INFINITY, 0x7fffffff};
  bool finite = true;
  for_each_in_row(row, n, [&](int i, float v) {
    finite = finite && sampling::detail::finite(v);
    best = ArgMaxOp{}(best, ArgMax{v, i});
  });
  best = block_argmax(best);
  const bool all_finite = __syncthreads_and(finite) != 0;
  // All -inf or NaN rows leave the sentinel index: report 0, as the host's argmax_row would.
  return RowArgmax{best.index == 0x7fffffff ? 0 : best.index, all_finite};
}

/// The core's greedy scan of a row (sampling::SerialGreedyScan) done by a block: the first bad
/// entry (NaN / infinite; negative too unless the rows are raw logits), else the argmax (lowest
/// index on ties), in every thread.
struct BlockGreedyScan {
  int vocab;
  bool logits;
  SPECDEC_DEVICE sampling::GreedyScan operator()(const float* row) const {
    int bad = 0x7fffffff;
    for_each_in_row(row, vocab, [&](int j, float v) {
      if ((!sampling::detail::finite(v) || (!logits && !(v >= 0.0f))) && j < bad) bad = j;
    });
    bad = block_all_reduce(bad, MinOp{});
    sampling::GreedyScan scan{0, static_cast<std::size_t>(vocab), 0.0};
    if (bad != 0x7fffffff) {
      scan.bad = static_cast<std::size_t>(bad);
      scan.bad_value = static_cast<double>(row[bad]);
      return scan;
    }
    scan.argmax = static_cast<std::size_t>(row_argmax(row, vocab).index);
    return scan;
  }
};

/// Total order of floats as unsigned integers (larger float -> larger key).
SPECDEC_DEVICE unsigned order_key(float v) {
  const unsigned bits = __float_as_uint(v);
  return (bits & 0x80000000u) != 0 ? ~bits : bits | 0x80000000u;
}
SPECDEC_DEVICE float from_order_key(unsigned key) {
  return __uint_as_float((key & 0x80000000u) != 0 ? key & 0x7fffffffu : ~key);
}

/// The k-th largest (1-based) of row[0 .. n), exactly (what std::nth_element finds), by a radix
/// select over order_key: 4 passes of 8-bit digit histograms (integer counts: deterministic).
SPECDEC_DEVICE float kth_largest(const float* row, int n, int k) {
  __shared__ int histogram[256];
  __shared__ unsigned prefix_shared;
  __shared__ int remaining_shared;
  unsigned prefix = 0;  // the digits decided so far, in their positions
  unsigned mask = 0;    // which bits of the key are decided
  int remaining = k;    // rank still to find among the keys matching the prefix
  for (int shift = 24; shift >= 0; shift -= 8) {
    __syncthreads();
    for (int d = static_cast<int>(threadIdx.x); d < 256; d += static_cast<int>(blockDim.x))
      histogram[d] = 0;
    __syncthreads();
    for (int i = static_cast<int>(threadIdx.x); i < n; i += static_cast<int>(blockDim.x)) {
      const unsigned key = order_key(row[i]);
      if ((key & mask) == prefix) atomicAdd(&histogram[(key >> shift) & 0xffu], 1);
    }
    __syncthreads();
    if (threadIdx.x == 0) {
      int digit = 255;
      for (; digit > 0; --digit) {
        if (remaining <= histogram[digit]) break;
        remaining -= histogram[digit];
      }
      prefix_shared = prefix | (static_cast<unsigned>(digit) << shift);
      remaining_shared = remaining;
    }
    __syncthreads();
    prefix = prefix_shared;
    remaining = remaining_shared;
    mask |= 0xffu << shift;
  }
  return from_order_key(prefix);
}

// ------------------------------------------------------------------ logits -> distribution

/// Status of a processed row: the index of its first NaN / infinite logit, or -1.
struct ProcessStatus {
  int bad_logit;  ///< -1: none
};

/// The core's process_logits for one row: reads `logits` [V], writes the distribution to
/// `probs` [V] (a separate buffer). Every thread returns the status.
SPECDEC_DEVICE ProcessStatus process_row(const float* logits, int vocab,
                                         const sampling::SamplingParams& params, float* probs) {
  __shared__ double total_shared;
  const int tid = static_cast<int>(threadIdx.x);
  const int threads = static_cast<int>(blockDim.x);

  // The first non-finite logit, if any (the host throws on it).
  const int bad = first_non_finite(logits, vocab);
  if (bad != 0x7fffffff) return ProcessStatus{bad};

  if (params.temperature < sampling::kMinTemperature) {  // params.greedy() (host-only)
    const RowArgmax best = row_argmax(logits, vocab);
    for (int i = tid; i < vocab; i += threads) probs[i] = i == best.index ? 1.0f : 0.0f;
    __syncthreads();
    return ProcessStatus{-1};
  }

  // With params.temperature_last (llama.cpp's chain) steps 1-3 run at temperature 1 and decide
  // only which tokens are kept; step 4' weights those at the temperature.
  const bool last = params.temperature_last;
  const float filter_temperature = last ? 1.0f : params.temperature;

  // 1. temperature (probs holds s for now) and the max.
  float local_max = -INFINITY;
  for (int i = tid; i < vocab; i += threads) {
    const float s = sampling::tempered_logit<float>(logits[i], filter_temperature);
    probs[i] = s;
    local_max = fmaxf(local_max, s);
  }
  const float s_max = block_max(local_max);

  // 2. top-k: the k-th largest tempered logit is the threshold (ties at it are kept).
  float kth = -INFINITY;
  if (params.top_k > 0 && params.top_k < vocab) kth = kth_largest(probs, vocab, params.top_k);

  // Softmax weights of the kept tokens (the max has weight exactly 1), and their total.
  double local = 0;
  for (int i = tid; i < vocab; i += threads) {
    const float s = probs[i];
    const float w = s >= kth ? expf(s - s_max) : 0.0f;
    probs[i] = w;
    local += static_cast<double>(w);
  }
  double total = block_all_reduce(local, SumOp{});

  // 3. top-p: keep the highest-weight tokens (lower index first on ties) while the mass before
  // them is < top_p * total. The boundary weight w* is found by bisection over its bits: the
  // largest w* with mass(w >= w*) >= need; then the tokens equal to w* are kept in index order
  // while the mass before them stays < need.
  if (params.top_p < 1.0f) {
    const double need = static_cast<double>(params.top_p) * total;
    unsigned lo = 0;            // mass(w >= lo) >= need holds for lo = 0 (all mass)
    unsigned hi = 0x3f800001u;  // just above the largest weight (1): the condition fails
    while (hi - lo > 1) {
      const unsigned mid = lo + (hi - lo) / 2;
      const float t = __uint_as_float(mid);
      double m = 0;
      for (int i = tid; i < vocab; i += threads) {
        if (probs[i] >= t) m += static_cast<double>(probs[i]);
      }
      if (block_all_reduce(m, SumOp{}) >= need) {
        lo = mid;
      } else {
        hi = mid;
      }
    }
    const float boundary = __uint_as_float(lo);
    double above = 0;
    for (int i = tid; i < vocab; i += threads) {
      if (probs[i] > boundary) above += static_cast<double>(probs[i]);
    }
    above = block_all_reduce(above, SumOp{});
    // Tie j (0-based, in index order) is kept iff above + j * boundary < need.
    // Walk the row in tiles of blockDim.x consecutive entries, numbering the ties with a scan.
    int ties_before = 0;
    for (int begin = 0; begin < vocab; begin += threads) {
      const int i = begin + tid;
      const bool tie = i < vocab && probs[i] == boundary && boundary > 0.0f;
      const auto scan = block_scan(tie ? 1 : 0, SumOp{}, 0);
      if (i < vocab) {
        const float w = probs[i];
        bool keep = w > boundary;
        if (tie)
          keep = above + static_cast<double>(ties_before + scan.exclusive) *
                             static_cast<double>(boundary) <
                 need;
        if (!keep) probs[i] = 0.0f;
      }
      ties_before += scan.total;
    }
  }

  if (last) {
    // 3'. min-p as a logit floor (llama.cpp), and 4'. the kept tokens' weights at the
    // temperature. Without top-p a token is kept by its logit (its weight at temperature 1 may
    // underflow where the tempered one does not).
    const float min_logit = params.min_p > 0.0f ? s_max + logf(params.min_p) : -INFINITY;
    const float t_max = sampling::tempered_logit<float>(s_max, params.temperature);
    for (int i = tid; i < vocab; i += threads) {
      const float l = logits[i];
      const bool kept = (params.top_p < 1.0f ? probs[i] > 0.0f : l >= kth) && l >= min_logit;
      probs[i] = kept ? expf(sampling::tempered_logit<float>(l, params.temperature) - t_max) : 0.0f;
    }
    __syncthreads();
  } else if (params.min_p > 0.0f) {
    // 4. min-p relative to the largest weight (1).
    for (int i = tid; i < vocab; i += threads) {
      if (probs[i] < params.min_p) probs[i] = 0.0f;
    }
  }

  // 5. renormalise.
  local = 0;
  for (int i = tid; i < vocab; i += threads) local += static_cast<double>(probs[i]);
  total = block_all_reduce(local, SumOp{});
  if (threadIdx.x == 0) total_shared = total;
  __syncthreads();
  const double scale = 1.0 / total_shared;
  for (int i = tid; i < vocab; i += threads) {
    probs[i] = static_cast<float>(static_cast<double>(probs[i]) * scale);
  }
  __syncthreads();
  return ProcessStatus{-1};
}

// ------------------------------------------------------------------ launch (host)

/// Dynamic shared memory of a block that samples rows (BlockRowSampler, the row passes):
/// 3 * scan_blocks(vocab) floats.
inline std::size_t row_sampler_shared_bytes(int vocab) {
  return 3 * static_cast<std::size_t>(scan_blocks(vocab)) * sizeof(float);
}

/// Throws, naming `what`, for a vocabulary or a block size the sampling kernels cannot take.
inline void check_sampling_launch(const char* what, int vocab, int threads) {
  if (vocab <= 0) throw Error(std::string(what) + ": vocabulary size is 0");
  if (threads < 32 || threads % 32 != 0 || threads > 1024)
    throw Error(std::string(what) + ": bad block size");
}

}  // namespace specdec::cuda::sampling_device
