#pragma once
// Exact speculative sampling: verify k drafted tokens against the target in one step.
//
// Inputs (row-major, Real = float or double):
//   p      (k+1) x V  the target's processed distributions p_0 ... p_k; p_i is the distribution of
//                     the token after the prefix and the first i drafted tokens;
//   q      k x V      the draft's processed distributions q_0 ... q_(k-1) the tokens were
//                     drawn from;
//   draft  k          the drafted tokens x_0 ... x_(k-1), x_i ~ q_i.
// Output: accepted = n (0 <= n <= k): x_0 ... x_(n-1) are kept, and next = one more token:
//   n < k: a sample of the residual norm(max(0, p_n - q_n)) (from p_n when that has no mass);
//   n = k: the bonus token, a sample of p_k.
// The emitted tokens x_0 ... x_(n-1), next are distributed exactly as sampling from p token by
// token (proof: docs/math.md).
//
// Acceptance of x_i: u_i * q_i(x_i) < p_i(x_i), i.e. with probability min(1, p/q) for the
// uniform u_i in [0, 1); no division, so q(x) = 0 never divides by zero (then x is accepted iff
// p(x) > 0). Sampling uses the inverse CDF, without materialising the residual.
//
// RNG COUNTER CONVENTION (fixed; the CUDA kernels reproduce it exactly). A verify call on stream
// (seed, stream) starting at counter c uses
//   u_i = philox_uniform(seed, stream, c + i)  for the acceptance test of x_i, i = 0 ... k-1,
//   u_k = philox_uniform(seed, stream, c + k)  for the final sample (residual or bonus),
// and moves the stream's counter to c + k + 1, whatever the outcome. Uniforms for tests after
// the first rejection are simply not drawn. The greedy variant draws none and does not move it.
//
// Inverse-CDF sampling of a row of weights w (p itself, max(0, p - q), or p without x) with u:
// pass 1 sums w in blocks of kScanBlock = 256 entries (each block in Real, in the fixed 8-lane
// order of detail::block_sum; the block sums added in order into a double total Z); pass 2
// recomputes the same block sums in the same order until the running sum exceeds u * Z, then
// walks that block entry by entry and returns the first index at which the running sum exceeds
// u * Z. Because pass 2 repeats pass 1's arithmetic exactly, the crossing block always exists;
// if rounding inside the block makes the entry walk miss, the last nonzero entry of that block
// is returned. A token with zero weight is therefore never returned. A CUDA kernel that follows
// the same lane order and block size reproduces the sums bit for bit (the adds are IEEE
// round-to-nearest everywhere and there is no multiply to contract into an FMA, except u * Z);
// one that reduces in another order differs only when u * Z falls within rounding distance of
// a CDF boundary. The uniforms have 24 bits (philox.hpp), so a token's probability is realised
// to within 2^-24 of its exact value, the resolution of any sampler driven by float uniforms.
//
// Checks (the rows that are read, nothing more, so that an early rejection stays cheap): every
// drafted token is inside the vocabulary; each p_i(x_i), q_i(x_i) read is finite and >= 0; each
// row read in full (the bonus row, or p_n and q_n at a rejection) has finite entries >= 0 that
// sum to 1 within kRowSumTolerance. Violations throw specdec::Error naming the row and problem.

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <limits>
#include <span>
#include <string>

#include "specdec/common.hpp"
#include "specdec/sampling/philox.hpp"
#include "specdec/sampling/process.hpp"

namespace specdec::sampling {

/// The outcome of verifying one chain of drafted tokens.
struct VerifyResult {
  std::size_t accepted;  ///< n: how many drafted tokens are kept (0 ... k)
  token_t next;          ///< the residual sample (n < k) or the bonus token (n == k)
};

/// Entries per block of the inverse-CDF scans (see the top of this file).
inline constexpr std::size_t kScanBlock = 256;
/// |sum of a row read in full - 1| must not exceed this.
inline constexpr double kRowSumTolerance = 1e-3;

// ------------------------------------------------------------------ status (device-friendly)

/// What went wrong, reported by the host+device functions (which cannot throw).
enum class VerifyError : std::uint8_t {
  none,
  draft_out_of_range,  ///< where = position i: draft[i] is not in [0, V)
  p_value_bad,         ///< where = row i: p_i(x_i) is NaN, infinite or negative
  q_value_bad,         ///< where = row i: q_i(x_i) is NaN, infinite or negative
  p_row_bad,           ///< where = row: a p row read in full has a NaN/infinite/negative entry
  q_row_bad,           ///< where = row: same for q
  p_row_sum,           ///< where = row: a p row read in full does not sum to 1 (value = sum)
  q_row_sum,           ///< where = row: same for q
};

/// VerifyResult plus the status of the host+device functions.
struct VerifyOutcome {
  std::size_t accepted = 0;
  token_t next = -1;
  VerifyError error = VerifyError::none;
  std::size_t where = 0;  ///< position or row the error refers to
  double value = 0;       ///< the offending value (a token id, a probability or a row sum)
  std::size_t entry = 0;  ///< p_row_bad / q_row_bad from a greedy scan: the first bad entry
};

namespace detail {

SPECDEC_HD inline VerifyOutcome fail(VerifyError error, std::size_t where, double value) {
  VerifyOutcome out;
  out.error = error;
  out.where = where;
  out.value = value;
  return out;
}

/// x is finite (not NaN, not +-inf), without <cmath> so that it is the same on host and device.
template <class Real>
SPECDEC_HD inline bool finite(Real x) {
  return x - x == Real(0);
}

// ---------------------------------------------------------------- the lane order of all sums
//
// Every sum of weights over a range [begin, end) is computed in ONE fixed association: 8 lanes,
// lane j adds the entries begin + j, begin + j + 8, begin + j + 16, ... in that order, and the
// lanes are combined as ((l0 + l1) + (l2 + l3)) + ((l4 + l5) + (l6 + l7)). A fixed association
// lets the compiler vectorise without -ffast-math and makes every implementation of it (the
// scalar loop below, the SIMD loop below, a CUDA kernel that follows it) agree bit for bit.

inline constexpr std::size_t kLanes = 8;

template <class Real>
SPECDEC_HD inline Real combine_lanes(const Real* lane) {
  return ((lane[0] + lane[1]) + (lane[2] + lane[3])) + ((lane[4] + lane[5]) + (lane[6] + lane[7]));
}

/// max(0, d), written as a select so that it is the same on every path (NaN gives 0; a NaN
/// input is caught by the row sums instead).
template <class Real>
SPECDEC_HD inline Real positive_part(Real d) {
  return d > Real(0) ? d : Real(0);
}

// SPECDEC_SAMPLING_SIMD (process.hpp): host builds with GNU vector extensions run the lane order
// with 16-byte vectors; nvcc and other compilers run the scalar loops.

#if SPECDEC_SAMPLING_SIMD
/// 16-byte GNU vectors of Real and the matching comparison masks; kCount of them hold 8 lanes.
template <class Real>
struct Simd;
template <>
struct Simd<float> {
  typedef float vec __attribute__((vector_size(16)));
  typedef std::int32_t mask __attribute__((vector_size(16)));
  static constexpr std::size_t kWidth = 4;
};
template <>
struct Simd<double> {
  typedef double vec __attribute__((vector_size(16)));
  typedef std::int64_t mask __attribute__((vector_size(16)));
  static constexpr std::size_t kWidth = 2;
};

template <class Real>
inline typename Simd<Real>::vec load_vec(const Real* p) {
  typename Simd<Real>::vec v;
  std::memcpy(&v, p, sizeof v);  // unaligned load
  return v;
}

template <class Real>
inline typename Simd<Real>::vec positive_part_vec(typename Simd<Real>::vec d) {
  using S = Simd<Real>;
  const typename S::vec zero = {};
  return reinterpret_cast<typename S::vec>(reinterpret_cast<typename S::mask>(d) & (d > zero));
}

/// The 8 lanes held in 8 / kWidth vectors, combined in the lane order.
template <class Real>
inline Real combine_vecs(const typename Simd<Real>::vec* acc) {
  constexpr std::size_t width = Simd<Real>::kWidth;
  Real lane[kLanes];
  for (std::size_t c = 0; c < kLanes / width; ++c) {
    for (std::size_t l = 0; l < width; ++l) lane[c * width + l] = acc[c][l];
  }
  return combine_lanes(lane);
}
#endif

// ---------------------------------------------------------------- row weights
//
// The row an inverse CDF samples from is given as weights: w(i) is entry i, and block(begin,
// end) is the sum of w over [begin, end) in the lane order.

/// w_i = p_i: plain sampling (the bonus token, or a zero-mass residual).
template <class Real>
struct PlainWeights {
  const Real* p;
  SPECDEC_HD Real operator()(std::size_t i) const { return p[i]; }
#if SPECDEC_SAMPLING_SIMD
  typename Simd<Real>::vec vec(std::size_t i) const { return load_vec(p + i); }
#endif
};

/// w_i = max(0, p_i - q_i): the residual of a rejection.
template <class Real>
struct ResidualWeights {
  const Real* p;
  const Real* q;
  SPECDEC_HD Real operator()(std::size_t i) const { return positive_part(p[i] - q[i]); }
#if SPECDEC_SAMPLING_SIMD
  typename Simd<Real>::vec vec(std::size_t i) const {
    return positive_part_vec<Real>(load_vec(p + i) - load_vec(q + i));
  }
#endif
};

/// w_i = p_i for i != x, 0 at x: the residual of a rejected point-mass (one-hot) proposal.
template <class Real>
struct ExcludeOneWeights {
  const Real* p;
  std::size_t x;
  SPECDEC_HD Real operator()(std::size_t i) const { return i == x ? Real(0) : p[i]; }
#if SPECDEC_SAMPLING_SIMD
  typename Simd<Real>::vec vec(std::size_t i) const {
    typename Simd<Real>::vec v = load_vec(p + i);
    if (x - i < Simd<Real>::kWidth) v[x - i] = Real(0);  // x in [i, i + width)
    return v;
  }
#endif
};

/// Sum of w over [begin, end) in the lane order, with scalar loops.
template <class Real, class Weights>
SPECDEC_HD inline Real block_sum_scalar(const Weights& w, std::size_t begin, std::size_t end) {
  Real lane[kLanes] = {Real(0), Real(0), Real(0), Real(0), Real(0), Real(0), Real(0), Real(0)};
  for (std::size_t i = begin; i < end; ++i) lane[(i - begin) % kLanes] += w(i);
  return combine_lanes(lane);
}

#if SPECDEC_SAMPLING_SIMD
/// The same sum with vectors; (end - begin) must be a multiple of 8.
template <class Real, class Weights>
inline Real block_sum_simd(const Weights& w, std::size_t begin, std::size_t end) {
  constexpr std::size_t width = Simd<Real>::kWidth;
  typename Simd<Real>::vec acc[kLanes / width] = {};
  for (std::size_t i = begin; i < end; i += kLanes) {
    for (std::size_t c = 0; c < kLanes / width; ++c) acc[c] += w.vec(i + c * width);
  }
  return combine_vecs<Real>(acc);
}
#endif

/// Sum of w over [begin, end) in the lane order (vectorised on the host when possible).
template <class Real, class Weights>
SPECDEC_HD inline Real block_sum(const Weights& w, std::size_t begin, std::size_t end) {
#if SPECDEC_SAMPLING_SIMD
  if ((end - begin) % kLanes == 0) return block_sum_simd<Real>(w, begin, end);
#endif
  return block_sum_scalar<Real>(w, begin, end);
}

SPECDEC_HD inline std::size_t block_end(std::size_t begin, std::size_t vocab) {
  return begin + kScanBlock < vocab ? begin + kScanBlock : vocab;
}

// ---------------------------------------------------------------- pass 1: totals and checks

/// A row read in full, for validation: its sum (NaN or infinite if an entry is) and whether an
/// entry is negative.
struct RowStats {
  double sum = 0;
  bool negative = false;
};

/// Pass 1 over p alone: the total weight sum_blocks block_sum(PlainWeights), with p's stats.
template <class Real>
SPECDEC_HD inline double plain_total(const Real* p, std::size_t vocab, RowStats& stats) {
  double total = 0;
  bool negative = false;
  for (std::size_t begin = 0; begin < vocab; begin += kScanBlock) {
    const std::size_t end = block_end(begin, vocab);
#if SPECDEC_SAMPLING_SIMD
    if ((end - begin) % kLanes == 0) {
      // The lanes exactly as block_sum_simd(PlainWeights) adds them, fused with the sign check.
      using S = Simd<Real>;
      constexpr std::size_t width = S::kWidth;
      const typename S::vec zero = {};
      typename S::vec acc[kLanes / width] = {};
      typename S::mask neg = {};
      for (std::size_t i = begin; i < end; i += kLanes) {
        for (std::size_t c = 0; c < kLanes / width; ++c) {
          const typename S::vec v = load_vec(p + i + c * width);
          acc[c] += v;
          neg |= v < zero;
        }
      }
      total += static_cast<double>(combine_vecs<Real>(acc));
      for (std::size_t l = 0; l < width; ++l) negative |= neg[l] != 0;
      continue;
    }
#endif
    total += static_cast<double>(block_sum<Real>(PlainWeights<Real>{p}, begin, end));
    for (std::size_t i = begin; i < end; ++i) negative |= p[i] < Real(0);
  }
  stats = {total, negative};
  return total;
}

/// Pass 1 over p and q: the residual's total weight, sum_blocks block_sum(ResidualWeights), and
/// both rows' stats, in one sweep over memory.
template <class Real>
SPECDEC_HD inline double residual_total(const Real* p, const Real* q, std::size_t vocab,
                                        RowStats& p_stats, RowStats& q_stats) {
  double total = 0;
  double p_sum = 0;
  double q_sum = 0;
  bool negative_p = false;
  bool negative_q = false;
  for (std::size_t begin = 0; begin < vocab; begin += kScanBlock) {
    const std::size_t end = block_end(begin, vocab);
#if SPECDEC_SAMPLING_SIMD
    if ((end - begin) % kLanes == 0) {
      // The residual's lanes exactly as block_sum_simd(ResidualWeights) adds them, fused with
      // the lanes of p and q and their sign checks.
      using S = Simd<Real>;
      constexpr std::size_t width = S::kWidth;
      const typename S::vec zero = {};
      typename S::vec r_acc[kLanes / width] = {};
      typename S::vec p_acc[kLanes / width] = {};
      typename S::vec q_acc[kLanes / width] = {};
      typename S::mask neg_p = {};
      typename S::mask neg_q = {};
      for (std::size_t i = begin; i < end; i += kLanes) {
        for (std::size_t c = 0; c < kLanes / width; ++c) {
          const typename S::vec pv = load_vec(p + i + c * width);
          const typename S::vec qv = load_vec(q + i + c * width);
          r_acc[c] += positive_part_vec<Real>(pv - qv);
          p_acc[c] += pv;
          q_acc[c] += qv;
          neg_p |= pv < zero;
          neg_q |= qv < zero;
        }
      }
      total += static_cast<double>(combine_vecs<Real>(r_acc));
      p_sum += static_cast<double>(combine_vecs<Real>(p_acc));
      q_sum += static_cast<double>(combine_vecs<Real>(q_acc));
      for (std::size_t l = 0; l < width; ++l) {
        negative_p |= neg_p[l] != 0;
        negative_q |= neg_q[l] != 0;
      }
      continue;
    }
#endif
    total += static_cast<double>(block_sum<Real>(ResidualWeights<Real>{p, q}, begin, end));
    p_sum += static_cast<double>(block_sum<Real>(PlainWeights<Real>{p}, begin, end));
    q_sum += static_cast<double>(block_sum<Real>(PlainWeights<Real>{q}, begin, end));
    for (std::size_t i = begin; i < end; ++i) {
      negative_p |= p[i] < Real(0);
      negative_q |= q[i] < Real(0);
    }
  }
  p_stats = {p_sum, negative_p};
  q_stats = {q_sum, negative_q};
  return total;
}

/// Pass 1 for a one-hot residual: the total weight of p without entry x.
template <class Real>
SPECDEC_HD inline double exclude_one_total(const Real* p, std::size_t vocab, std::size_t x) {
  double total = 0;
  for (std::size_t begin = 0; begin < vocab; begin += kScanBlock) {
    total += static_cast<double>(
        block_sum<Real>(ExcludeOneWeights<Real>{p, x}, begin, block_end(begin, vocab)));
  }
  return total;
}

// ---------------------------------------------------------------- pass 2: the inverse CDF
//
// Pass 2 needs pass 1's block sums again. The host recomputes them (RecomputedSums: cheaper than
// storing them, and the same arithmetic); a CUDA block computes them in parallel into shared
// memory and hands them in (cuda/common/sampling.cuh). Everything from the block sums on is the
// one serial function below, run by the host and by one thread of the GPU block alike.

/// Pass 1's sum of the weights w over a block [begin, end), recomputed in the lane order.
template <class Real, class Weights>
struct RecomputedSums {
  const Weights& w;
  SPECDEC_HD Real operator()(std::size_t begin, std::size_t end) const {
    return block_sum<Real>(w, begin, end);
  }
};

/// The total of a row from its block sums: added in block order into a double (pass 1's total).
template <class BlockSums>
SPECDEC_HD inline double sum_of_blocks(const BlockSums& block_sums, std::size_t vocab) {
  double total = 0;
  for (std::size_t begin = 0; begin < vocab; begin += kScanBlock) {
    total += static_cast<double>(block_sums(begin, block_end(begin, vocab)));
  }
  return total;
}

/// The inverse CDF of the weights w at u in [0, 1), where `total` is pass 1's total of the same
/// weights (> 0) and block_sums(begin, end) gives pass 1's sum over each scan block: block sums
/// in order until the running sum exceeds u * total, then that block entry by entry.
template <class Real, class Weights, class BlockSums>
SPECDEC_HD inline token_t inverse_cdf(const Weights& w, std::size_t vocab, double total, double u,
                                      const BlockSums& block_sums) {
  const double target = u * total;
  double cum = 0;
  for (std::size_t begin = 0; begin < vocab; begin += kScanBlock) {
    const std::size_t end = block_end(begin, vocab);
    const double block = static_cast<double>(block_sums(begin, end));
    if (!(target < cum + block)) {
      cum += block;
      continue;
    }
    // The crossing block: walk it entry by entry.
    std::size_t last_nonzero = begin;
    for (std::size_t i = begin; i < end; ++i) {
      const Real wi = w(i);
      if (wi > Real(0)) {
        cum += static_cast<double>(wi);
        last_nonzero = i;
        if (target < cum) return static_cast<token_t>(i);
      }
    }
    return static_cast<token_t>(last_nonzero);  // rounding inside the block: the last nonzero
  }
  // Unreachable when total is pass 1's total of the same weights; stay in range regardless.
  for (std::size_t i = vocab; i-- > 0;) {
    if (w(i) > Real(0)) return static_cast<token_t>(i);
  }
  return 0;
}

/// The same with the block sums recomputed (the host).
template <class Real, class Weights>
SPECDEC_HD inline token_t inverse_cdf(const Weights& w, std::size_t vocab, double total, double u) {
  return inverse_cdf<Real>(w, vocab, total, u, RecomputedSums<Real, Weights>{w});
}

/// Checks a row read in full; returns false (and fills `out`) when it is not a distribution.
SPECDEC_HD inline bool check_row(const RowStats& stats, bool is_p, std::size_t row,
                                 VerifyOutcome& out) {
  if (!finite(stats.sum) || stats.negative) {
    out = fail(is_p ? VerifyError::p_row_bad : VerifyError::q_row_bad, row, stats.sum);
    return false;
  }
  const double off = stats.sum - 1.0;
  if (off > kRowSumTolerance || off < -kRowSumTolerance) {
    out = fail(is_p ? VerifyError::p_row_sum : VerifyError::q_row_sum, row, stats.sum);
    return false;
  }
  return true;
}

// ---------------------------------------------------------------- after pass 1
//
// What the row samplers decide once pass 1 has produced a row's totals and stats: the checks,
// then the inverse CDF of the right weights. One copy, used by the serial samplers below and by
// the CUDA block samplers (cuda/common/sampling.cuh), which compute pass 1 in parallel.
// p_sums / r_sums / x_sums give pass 1's block sums of p, of the residual and of p without x.

/// The bonus token (a sample of p), once pass 1 gave p's stats (p_stats.sum is its total).
template <class Real, class U, class PSums>
SPECDEC_HD inline VerifyOutcome finish_plain(const Real* p, std::size_t vocab, U u, std::size_t row,
                                             const RowStats& p_stats, const PSums& p_sums) {
  VerifyOutcome out;
  if (!check_row(p_stats, true, row, out)) return out;
  out.next =
      inverse_cdf<Real>(PlainWeights<Real>{p}, vocab, p_stats.sum, static_cast<double>(u), p_sums);
  return out;
}

/// The residual norm(max(0, p - q)), or p when it has no mass (residual_total = its total).
template <class Real, class U, class RSums, class PSums>
SPECDEC_HD inline VerifyOutcome finish_residual(const Real* p, const Real* q, std::size_t vocab,
                                                U u, std::size_t row, double residual_total,
                                                const RowStats& p_stats, const RowStats& q_stats,
                                                const RSums& r_sums, const PSums& p_sums) {
  VerifyOutcome out;
  if (!check_row(p_stats, true, row, out) || !check_row(q_stats, false, row, out)) return out;
  if (residual_total > 0) {
    out.next = inverse_cdf<Real>(ResidualWeights<Real>{p, q}, vocab, residual_total,
                                 static_cast<double>(u), r_sums);
  } else {
    out.next = inverse_cdf<Real>(PlainWeights<Real>{p}, vocab, p_stats.sum, static_cast<double>(u),
                                 p_sums);
  }
  return out;
}

/// p without entry x, or p when that has no mass (excluded_total = the total without x).
template <class Real, class U, class XSums, class PSums>
SPECDEC_HD inline VerifyOutcome finish_exclude_one(const Real* p, std::size_t vocab, std::size_t x,
                                                   U u, std::size_t row, double excluded_total,
                                                   const RowStats& p_stats, const XSums& x_sums,
                                                   const PSums& p_sums) {
  VerifyOutcome out;
  if (!check_row(p_stats, true, row, out)) return out;
  if (excluded_total > 0) {
    out.next = inverse_cdf<Real>(ExcludeOneWeights<Real>{p, x}, vocab, excluded_total,
                                 static_cast<double>(u), x_sums);
  } else {
    out.next = inverse_cdf<Real>(PlainWeights<Real>{p}, vocab, p_stats.sum, static_cast<double>(u),
                                 p_sums);
  }
  return out;
}

}  // namespace detail

// ------------------------------------------------------------------ host+device building blocks

/// The acceptance test of a drafted token x: u * q(x) < p(x) (probability min(1, p(x)/q(x))).
template <class Real, class U>
SPECDEC_HD inline bool accept_draft(U u, Real p_x, Real q_x) {
  return static_cast<Real>(u) * q_x < p_x;
}

/// Samples from the row p (V entries, validated as a distribution) with u: the bonus token.
/// `row` is the row index reported on error.
template <class Real, class U>
SPECDEC_HD inline VerifyOutcome sample_row(const Real* p, std::size_t vocab, U u, std::size_t row) {
  detail::RowStats stats;
  (void)detail::plain_total(p, vocab, stats);
  const detail::PlainWeights<Real> w{p};
  return detail::finish_plain(p, vocab, u, row, stats,
                              detail::RecomputedSums<Real, decltype(w)>{w});
}

/// Samples the residual norm(max(0, p - q)) with u; a residual without mass samples from p.
/// p and q are validated as distributions; `row` is reported on error.
template <class Real, class U>
SPECDEC_HD inline VerifyOutcome sample_residual_row(const Real* p, const Real* q, std::size_t vocab,
                                                    U u, std::size_t row) {
  detail::RowStats p_stats;
  detail::RowStats q_stats;
  const double total = detail::residual_total(p, q, vocab, p_stats, q_stats);
  const detail::ResidualWeights<Real> r{p, q};
  const detail::PlainWeights<Real> w{p};
  return detail::finish_residual(p, q, vocab, u, row, total, p_stats, q_stats,
                                 detail::RecomputedSums<Real, decltype(r)>{r},
                                 detail::RecomputedSums<Real, decltype(w)>{w});
}

/// Samples p without the entry x, renormalised (the residual of a rejected one-hot proposal);
/// when that has no mass, samples from p. p is validated as a distribution.
template <class Real, class U>
SPECDEC_HD inline VerifyOutcome sample_exclude_one_row(const Real* p, std::size_t vocab,
                                                       std::size_t x, U u, std::size_t row) {
  detail::RowStats stats;
  (void)detail::plain_total(p, vocab, stats);
  const double total = detail::exclude_one_total(p, vocab, x);
  const detail::ExcludeOneWeights<Real> e{p, x};
  const detail::PlainWeights<Real> w{p};
  return detail::finish_exclude_one(p, vocab, x, u, row, total, stats,
                                    detail::RecomputedSums<Real, decltype(e)>{e},
                                    detail::RecomputedSums<Real, decltype(w)>{w});
}

/// The row samplers of the serial verify loops (the host): each reads its row(s) in full.
/// The CUDA kernels run the same loops with block-wide samplers (cuda/common/sampling.cuh).
template <class Real>
struct SerialRowSampler {
  std::size_t vocab;
  template <class U>
  SPECDEC_HD VerifyOutcome plain(const Real* p, U u, std::size_t row) const {
    return sample_row(p, vocab, u, row);
  }
  template <class U>
  SPECDEC_HD VerifyOutcome residual(const Real* p, const Real* q, U u, std::size_t row) const {
    return sample_residual_row(p, q, vocab, u, row);
  }
  template <class U>
  SPECDEC_HD VerifyOutcome exclude_one(const Real* p, std::size_t x, U u, std::size_t row) const {
    return sample_exclude_one_row(p, vocab, x, u, row);
  }

  // The tree loop's passes over a whole row (tree_verify.hpp: checking a node's rows, the
  // residual w in its scratch row, Z, the final sample); a CUDA block splits each pass between
  // its threads and gives the same bits.

  /// The stats of p (and of q unless it is null), for check_row.
  SPECDEC_HD void row_stats(const Real* p, const Real* q, detail::RowStats& p_stats,
                            detail::RowStats& q_stats) const {
    if (q != nullptr)
      (void)detail::residual_total(p, q, vocab, p_stats, q_stats);
    else
      (void)detail::plain_total(p, vocab, p_stats);
  }
  /// w[j] = f(j) for every j; f may read w[j] (and no other entry of w).
  template <class F>
  SPECDEC_HD void fill(Real* w, const F& f) const {
    for (std::size_t j = 0; j < vocab; ++j) w[j] = f(j);
  }
  /// w[j] = value.
  SPECDEC_HD void set(Real* w, std::size_t j, Real value) const { w[j] = value; }
  /// The total of w in the lane order (plain_total).
  SPECDEC_HD double total(const Real* w) const {
    detail::RowStats stats;
    return detail::plain_total(w, vocab, stats);
  }
  /// The inverse-CDF sample of w, whose total is `total`.
  SPECDEC_HD token_t sample_weights(const Real* w, double total, double u) const {
    return detail::inverse_cdf<Real>(detail::PlainWeights<Real>{w}, vocab, total, u);
  }
};

/// Checks that every drafted token is in [0, V).
SPECDEC_HD inline bool check_draft(const token_t* draft, std::size_t k, std::size_t vocab,
                                   VerifyOutcome& out) {
  for (std::size_t i = 0; i < k; ++i) {
    if (draft[i] < 0 || static_cast<std::size_t>(draft[i]) >= vocab) {
      out = detail::fail(VerifyError::draft_out_of_range, i, static_cast<double>(draft[i]));
      return false;
    }
  }
  return true;
}

/// The chain verification loop of one sequence over raw pointers (p: (k+1) x V, draft: k; q:
/// k x V, or null for point-mass proposals, where q_i(x_i) = 1 and the residual is p_i without
/// x_i). uniform(j) returns the uniform for offset j of this call (j = 0 ... k, the convention at
/// the top of this file); it is called only for the offsets that are used. `rows` samples the
/// row that ends the round (SerialRowSampler here; a CUDA block's sampler in the kernels, which
/// run this same loop in every thread: all decisions depend only on values every thread reads).
template <class Real, class Uniform, class Rows>
SPECDEC_HD inline VerifyOutcome verify_loop(const Real* p, const Real* q, const token_t* draft,
                                            std::size_t k, std::size_t vocab,
                                            const Uniform& uniform, const Rows& rows) {
  VerifyOutcome out;
  if (!check_draft(draft, k, vocab, out)) return out;
  for (std::size_t i = 0; i < k; ++i) {
    const auto x = static_cast<std::size_t>(draft[i]);
    const Real p_x = p[i * vocab + x];
    if (!detail::finite(p_x) || !(p_x >= Real(0))) {
      return detail::fail(VerifyError::p_value_bad, i, static_cast<double>(p_x));
    }
    Real q_x = Real(1);
    if (q != nullptr) {
      q_x = q[i * vocab + x];
      if (!detail::finite(q_x) || !(q_x >= Real(0))) {
        return detail::fail(VerifyError::q_value_bad, i, static_cast<double>(q_x));
      }
    }
    if (accept_draft(uniform(i), p_x, q_x)) continue;
    out = q != nullptr ? rows.residual(p + i * vocab, q + i * vocab, uniform(k), i)
                       : rows.exclude_one(p + i * vocab, x, uniform(k), i);
    out.accepted = i;
    return out;
  }
  out = rows.plain(p + k * vocab, uniform(k), k);
  out.accepted = k;
  return out;
}

/// verify_chain for one sequence over raw pointers (p: (k+1) x V, q: k x V, draft: k).
template <class Real, class Uniform>
SPECDEC_HD inline VerifyOutcome verify_chain_row(const Real* p, const Real* q, const token_t* draft,
                                                 std::size_t k, std::size_t vocab,
                                                 const Uniform& uniform) {
  return verify_loop(p, q, draft, k, vocab, uniform, SerialRowSampler<Real>{vocab});
}

/// One row of a greedy verification: its argmax (lowest index on ties) and the first entry that
/// fails the check (bad == V when none; then bad_value is unused).
struct GreedyScan {
  std::size_t argmax = 0;
  std::size_t bad = 0;
  double bad_value = 0;
};

/// The serial scan of a row: entries must be finite, and non-negative unless the rows are raw
/// logits (greedy processing is an argmax, so the target's logits can be verified directly).
template <class Real>
struct SerialGreedyScan {
  std::size_t vocab;
  bool logits = false;
  SPECDEC_HD GreedyScan operator()(const Real* row) const {
    GreedyScan scan{0, vocab, 0.0};
    for (std::size_t j = 0; j < vocab; ++j) {
      if (!detail::finite(row[j]) || (!logits && !(row[j] >= Real(0)))) {
        scan.bad = j;
        scan.bad_value = static_cast<double>(row[j]);
        return scan;
      }
      if (row[j] > row[scan.argmax]) scan.argmax = j;
    }
    return scan;
  }
};

/// The greedy loop: accept while draft[i] == argmax row_i; next = the argmax at the first
/// mismatch, else of row k (the bonus). Uses no uniforms. `scan` reads one row (serially here,
/// block-wide in the CUDA kernel); a row with a bad entry fails with p_row_bad (entry = its index).
template <class Real, class Scan>
SPECDEC_HD inline VerifyOutcome verify_greedy_loop(const Real* rows, const token_t* draft,
                                                   std::size_t k, std::size_t vocab,
                                                   const Scan& scan) {
  VerifyOutcome out;
  if (!check_draft(draft, k, vocab, out)) return out;
  for (std::size_t i = 0; i <= k; ++i) {
    const GreedyScan row = scan(rows + i * vocab);
    if (row.bad < vocab) {
      out = detail::fail(VerifyError::p_row_bad, i, row.bad_value);
      out.entry = row.bad;
      return out;
    }
    const auto best = static_cast<token_t>(row.argmax);
    if (i == k || draft[i] != best) {
      out.accepted = i;
      out.next = best;
      return out;
    }
  }
  return out;  // unreachable: the loop returns at i == k
}

/// The greedy variant over distributions: accept while draft[i] == argmax p_i; next = argmax at
/// the first mismatch, else argmax p_k (the bonus). Uses no uniforms. Rows read are checked for
/// NaN/inf/negatives.
template <class Real>
SPECDEC_HD inline VerifyOutcome verify_chain_greedy_row(const Real* p, const token_t* draft,
                                                        std::size_t k, std::size_t vocab) {
  return verify_greedy_loop(p, draft, k, vocab, SerialGreedyScan<Real>{vocab, false});
}

/// The one-hot variant: the proposal distribution is a point mass at each drafted token
/// (n-gram / prompt-lookup drafters). Accept x_i iff u_i < p_i(x_i); the residual is p_i without
/// x_i, renormalised. Same uniforms and counter convention as verify_chain_row.
template <class Real, class Uniform>
SPECDEC_HD inline VerifyOutcome verify_chain_onehot_row(const Real* p, const token_t* draft,
                                                        std::size_t k, std::size_t vocab,
                                                        const Uniform& uniform) {
  return verify_loop(p, static_cast<const Real*>(nullptr), draft, k, vocab, uniform,
                     SerialRowSampler<Real>{vocab});
}

/// The uniforms of one verify call: offset j -> philox_uniform(seed, stream, base + j).
struct PhiloxUniforms {
  std::uint64_t seed;
  std::uint64_t stream;
  std::uint64_t base;
  SPECDEC_HD float operator()(std::size_t offset) const {
    return philox_uniform(seed, stream, base + offset);
  }
};

// ------------------------------------------------------------------ host API (throws)

/// Throws specdec::Error describing `outcome`'s error, if any; `what` names the caller.
inline void throw_if_error(const VerifyOutcome& outcome, const char* what) {
  if (outcome.error == VerifyError::none) return;  // the hot path builds no strings
  const std::string where = std::to_string(outcome.where);
  const std::string value = std::to_string(outcome.value);
  switch (outcome.error) {
    case VerifyError::none:
      return;
    case VerifyError::draft_out_of_range:
      throw Error(std::string(what) + ": draft[" + where +
                  "] = " + std::to_string(static_cast<long long>(outcome.value)) +
                  " is not a token id of the vocabulary");
    case VerifyError::p_value_bad:
      throw Error(std::string(what) + ": p row " + where + " at the drafted token is " + value +
                  " (not a probability: NaN, infinite or negative)");
    case VerifyError::q_value_bad:
      throw Error(std::string(what) + ": q row " + where + " at the drafted token is " + value +
                  " (not a probability: NaN, infinite or negative)");
    case VerifyError::p_row_bad:
      throw Error(std::string(what) + ": p row " + where +
                  " has a NaN, infinite or negative entry");
    case VerifyError::q_row_bad:
      throw Error(std::string(what) + ": q row " + where +
                  " has a NaN, infinite or negative entry");
    case VerifyError::p_row_sum:
      throw Error(std::string(what) + ": p row " + where + " sums to " + value +
                  ", not 1 (is it a processed distribution, not logits?)");
    case VerifyError::q_row_sum:
      throw Error(std::string(what) + ": q row " + where + " sums to " + value +
                  ", not 1 (is it a processed distribution, not logits?)");
  }
  throw Error(std::string(what) + ": unknown error");
}

namespace detail {

/// Checks that `buffer` holds exactly `rows` rows of `vocab` entries.
inline void check_rows(std::size_t size, std::size_t rows, std::size_t vocab, const char* what,
                       const char* name) {
  if (size % vocab != 0 || size / vocab != rows) {
    throw Error(std::string(what) + ": " + name + " has " + std::to_string(size) +
                " entries, expected " + std::to_string(rows) + " rows of V = " +
                std::to_string(vocab) + (size / vocab < rows ? " (k larger than the buffer)" : ""));
  }
}

inline void check_vocab(std::size_t vocab, const char* what) {
  if (vocab == 0) throw Error(std::string(what) + ": vocabulary size V is 0");
  if (vocab > static_cast<std::size_t>(std::numeric_limits<token_t>::max())) {
    throw Error(std::string(what) + ": vocabulary size " + std::to_string(vocab) +
                " does not fit token_t");
  }
}

}  // namespace detail

/// Verifies the drafted tokens `draft` (k of them) against the target rows p ((k+1) x V) and
/// draft rows q (k x V). Uses the uniforms rng.counter() + 0 ... k and advances rng by k + 1.
template <class Real>
VerifyResult verify_chain(std::span<const Real> p, std::span<const Real> q,
                          std::span<const token_t> draft, std::size_t vocab, PhiloxStream& rng) {
  constexpr const char* what = "verify_chain";
  const std::size_t k = draft.size();
  detail::check_vocab(vocab, what);
  detail::check_rows(p.size(), k + 1, vocab, what, "p (target distributions)");
  detail::check_rows(q.size(), k, vocab, what, "q (draft distributions)");
  const PhiloxUniforms uniforms{rng.seed(), rng.stream(), rng.counter()};
  const VerifyOutcome out = verify_chain_row(p.data(), q.data(), draft.data(), k, vocab, uniforms);
  throw_if_error(out, what);
  rng.skip(k + 1);
  return {out.accepted, out.next};
}

/// Greedy verification (temperature 0): no randomness, see verify_chain_greedy_row.
template <class Real>
VerifyResult verify_chain_greedy(std::span<const Real> p, std::span<const token_t> draft,
                                 std::size_t vocab) {
  constexpr const char* what = "verify_chain_greedy";
  const std::size_t k = draft.size();
  detail::check_vocab(vocab, what);
  detail::check_rows(p.size(), k + 1, vocab, what, "p (target distributions)");
  const VerifyOutcome out = verify_chain_greedy_row(p.data(), draft.data(), k, vocab);
  throw_if_error(out, what);
  return {out.accepted, out.next};
}

/// Verification of deterministic proposals (q = point mass at each drafted token).
/// Same counter convention as verify_chain: uses rng.counter() + 0 ... k, advances by k + 1.
template <class Real>
VerifyResult verify_chain_onehot(std::span<const Real> p, std::span<const token_t> draft,
                                 std::size_t vocab, PhiloxStream& rng) {
  constexpr const char* what = "verify_chain_onehot";
  const std::size_t k = draft.size();
  detail::check_vocab(vocab, what);
  detail::check_rows(p.size(), k + 1, vocab, what, "p (target distributions)");
  const PhiloxUniforms uniforms{rng.seed(), rng.stream(), rng.counter()};
  const VerifyOutcome out = verify_chain_onehot_row(p.data(), draft.data(), k, vocab, uniforms);
  throw_if_error(out, what);
  rng.skip(k + 1);
  return {out.accepted, out.next};
}

/// Inverse-CDF sample of the weights `probs` (>= 0, finite, positive total; need not sum to 1)
/// with u in [0, 1). Never returns a token of zero weight.
template <class Real>
token_t sample_from(std::span<const Real> probs, float u) {
  constexpr const char* what = "sample_from";
  detail::check_vocab(probs.size(), what);
  if (!(u >= 0.0f && u < 1.0f)) {
    throw Error(std::string(what) + ": u = " + std::to_string(u) + " is not in [0, 1)");
  }
  detail::RowStats stats;
  const double total = detail::plain_total(probs.data(), probs.size(), stats);
  if (!detail::finite(stats.sum) || stats.negative) {
    throw Error(std::string(what) + ": probs has a NaN, infinite or negative entry");
  }
  if (!(total > 0)) throw Error(std::string(what) + ": probs has no mass (all zero)");
  return detail::inverse_cdf<Real>(detail::PlainWeights<Real>{probs.data()}, probs.size(), total,
                                   static_cast<double>(u));
}

}  // namespace specdec::sampling
