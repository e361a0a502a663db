#pragma once
// Logits -> the processed probability distribution that is sampled (and verified) from.
//
// The same processing is applied to the target's and the draft's logits; speculative sampling
// is then exact with respect to the target's PROCESSED distribution, which is exactly the law of
// plain sampling with the same settings (docs/math.md).
//
// Order of operations (the Hugging Face transformers order: TemperatureLogitsWarper,
// TopKLogitsWarper, TopPLogitsWarper, MinPLogitsWarper; vLLM does the same):
//   1. temperature: s_i = logit_i / T;
//   2. top-k: keep the tokens whose s_i is >= the k-th largest s (ties at the boundary are kept,
//      as in transformers), top_k = 0 or top_k >= V keeps all;
//   3. top-p: softmax over the kept tokens, sort by probability (descending, lower index first on
//      ties) and keep a token while the mass of the tokens before it is < top_p: the smallest
//      prefix whose mass reaches top_p. top_p = 1 keeps all;
//   4. min-p: keep the tokens whose probability (renormalised over what is kept) is >= min_p times
//      the largest probability. min_p = 0 keeps all;
//   5. the kept tokens' probabilities are renormalised to sum to 1; the others are exactly 0.
// llama.cpp's default sampler chain applies temperature LAST (after top-k/top-p/min-p); that
// gives different top-p/min-p sets for T != 1. SamplingParams::temperature_last selects it:
//   1'. top-k as above, on the logits;
//   2'. top-p on the softmax of the logits (temperature 1) of what top-k kept, the tokens ranked
//       by logit (lower index first on ties), as llama.cpp's llama_sampler_top_p;
//   3'. min-p: keep the tokens whose logit is >= max logit + log(min_p) (llama_sampler_min_p);
//   4'. the kept tokens' probabilities are softmax(logit / T) over them.
// (llama.cpp cuts top-k at exactly k, its tie order unspecified; ties are kept here as in 2.)
// The default is transformers' order: the fixtures of tests/sampling are generated with it
// (tools/gen_sampling_fixtures.py); tools/make_llama_sampling_fixtures.cpp makes llama.cpp's.
//
// temperature < kMinTemperature (0 and below included) means greedy: a one-hot distribution at
// the argmax of the logits (the lowest index wins ties), the limit of the tempered distribution
// as T falls to 0. The filters never remove the argmax, so greedy ignores them.

#include <algorithm>
#include <atomic>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <functional>
#include <limits>
#include <span>
#include <string>
#include <type_traits>
#include <vector>

#include "specdec/cephes_exp.hpp"
#include "specdec/common.hpp"
#include "specdec/host_cpu.hpp"

#if (defined(__GNUC__) || defined(__clang__)) && !defined(__CUDACC__) && defined(__x86_64__)
#include <immintrin.h>
#endif

namespace specdec::sampling {

/// Temperatures below this are greedy (the limit the tempered distribution approaches). Float
/// arithmetic needs the cut: logit / T overflows to infinity near the smallest floats (T = 1e-39
/// turned every weight into NaN), and long before that the distribution is one-hot for all but
/// near-ties. vLLM draws the line at the same place (_SAMPLING_EPS = 1e-5).
inline constexpr float kMinTemperature = 1e-5f;

/// How logits become a distribution. The defaults are plain softmax sampling.
struct SamplingParams {
  float temperature = 1.0f;  ///< < kMinTemperature (0 included): greedy (argmax)
  int top_k = 0;             ///< 0: off
  float top_p = 1.0f;        ///< in (0, 1]; 1: off
  float min_p = 0.0f;        ///< in [0, 1]; 0: off
  /// false: temperature first, then the filters on the tempered distribution (Hugging Face
  /// transformers, vLLM). true: the filters on the logits as they are, then the temperature over
  /// what they kept (llama.cpp's default chain top-k, top-p, min-p, temperature).
  bool temperature_last = false;

  [[nodiscard]] constexpr bool greedy() const { return temperature < kMinTemperature; }
};

/// Throws specdec::Error naming the first bad field.
inline void validate(const SamplingParams& params) {
  if (std::isnan(params.temperature) || std::isinf(params.temperature)) {
    throw Error("SamplingParams: temperature must be a finite number (0 for greedy), got " +
                std::to_string(params.temperature));
  }
  if (params.top_k < 0) {
    throw Error("SamplingParams: top_k must be >= 0 (0 = off), got " +
                std::to_string(params.top_k));
  }
  if (!(params.top_p > 0.0f && params.top_p <= 1.0f)) {
    throw Error("SamplingParams: top_p must be in (0, 1] (1 = off), got " +
                std::to_string(params.top_p));
  }
  if (!(params.min_p >= 0.0f && params.min_p <= 1.0f)) {
    throw Error("SamplingParams: min_p must be in [0, 1] (0 = off), got " +
                std::to_string(params.min_p));
  }
}

// ------------------------------------------------------------------ per-element math (host+device)

/// The tempered logit s = logit / T, computed in Real (T > 0).
template <class Real>
SPECDEC_HD inline Real tempered_logit(float logit, float temperature) {
  return static_cast<Real>(logit) / static_cast<Real>(temperature);
}

/// Index of the largest of row[0 .. n-1]; the lowest index wins ties. n > 0.
template <class T>
SPECDEC_HD inline std::size_t argmax_row(const T* row, std::size_t n) {
  std::size_t best = 0;
  for (std::size_t i = 1; i < n; ++i) {
    if (row[i] > row[best]) best = i;
  }
  return best;
}

/// argmax over a span (lowest index wins ties). Throws on an empty span.
template <class T>
std::size_t argmax(std::span<const T> values) {
  if (values.empty()) throw Error("argmax: empty input");
  return argmax_row(values.data(), values.size());
}

// ------------------------------------------------------------------ host processing
//
// A processed row is described by a ProcessedRow: the row's max tempered logit, the filters'
// thresholds and the total weight of the kept tokens. From it, any entry of the distribution is
// one division and one exp away (prob(i)), and the whole row is one pass (materialise). So a
// caller that needs only p(x) (an accepted drafted token) reads the logits twice (max, total)
// and writes nothing, and one that needs the row gets, bit for bit, the same p(x).
//
// Cost on a row of V logits (no sort of the vocabulary):
//   scan       finite check + argmax (first max wins), vectorised;        1 read of V floats
//   top-k      the k-th largest logit by a running-threshold selection:   1 read, k-sized sorts
//   top-p      the weights (stored), their total, then the nucleus:       1 read + 1 write, then
//              the tokens that can be in it are bucketed by weight and only the buckets that
//              reach top_p are sorted (the exact walk of a full sort, on a prefix of its order);
//   total      the kept weights' sum (fused with the weights when no top-p/min-p); 1 read
//   materialise probs = weight / total (full rows only);                   1 read + 1 write.
// Float rows use GNU vectors and a polynomial exp (weight_pass.inc) whose scalar form is the
// vector code on a broadcast value, so a lazily computed entry equals the materialised one
// exactly. The weight pass runs 4, 8 or 16 lanes wide (16-byte vectors, AVX2, AVX-512, chosen at
// run time) with the same bits on each, and skips groups of logits whose weights all underflow
// to 0 (a restricted draft head's masked ids). Double rows (the exhaustive tests) use std::exp,
// scalar.

namespace detail {

// SPECDEC_SAMPLING_SIMD: host builds with GNU vector extensions (GCC, Clang) run the row passes
// with 16-byte vectors (SSE2 / NEON baseline, no -march needed); nvcc and other compilers run
// the scalar loops. Define it to 0 to force the scalar loops. (verify.hpp's sums use it too.)
#if !defined(SPECDEC_SAMPLING_SIMD)
#if (defined(__GNUC__) || defined(__clang__)) && !defined(__CUDACC__)
#define SPECDEC_SAMPLING_SIMD 1
#else
#define SPECDEC_SAMPLING_SIMD 0
#endif
#endif

/// Lanes of the double-precision row totals: entry i is added to lane i % 4, in index order,
/// and the lanes are combined as (l0 + l1) + (l2 + l3). One association for every path.
inline constexpr std::size_t kTotalLanes = 4;

inline double combine_total_lanes(const double* lane) {
  return (lane[0] + lane[1]) + (lane[2] + lane[3]);
}

#if SPECDEC_SAMPLING_SIMD
typedef float f32x4 __attribute__((vector_size(16)));
typedef std::int32_t i32x4 __attribute__((vector_size(16)));
typedef double f64x2 __attribute__((vector_size(16)));

inline f32x4 load4(const float* p) {
  f32x4 v;
  std::memcpy(&v, p, sizeof v);  // unaligned load
  return v;
}
inline void store4(float* p, f32x4 v) { std::memcpy(p, &v, sizeof v); }
inline bool any_lane(i32x4 m) { return (m[0] | m[1] | m[2] | m[3]) != 0; }
inline f32x4 select(i32x4 m, f32x4 a, f32x4 b) {
  return reinterpret_cast<f32x4>((reinterpret_cast<i32x4>(a) & m) |
                                 (reinterpret_cast<i32x4>(b) & ~m));
}

// ---------------------------------------------------------------- the weight pass, per ISA
//
// The one pass that costs (an exp per entry) runs on the widest vectors the CPU has: 16-byte
// vectors always (SSE2 / NEON), and on x86-64, chosen at run time, 32-byte (AVX2) or 64-byte
// (AVX-512) ones. weight_pass.inc holds the code once; it is compiled once per width below, the
// wider ones under a target pragma (no -m flag needed, nothing else of the library changes).
// Every width gives the same bits (weight_pass.inc): decisions do not depend on the machine.

/// Below this, exp(x) is 0 in float (under the smallest subnormal, e^-103.3).
inline constexpr float kExpUnderflow = -104.0f;

/// What decides the weight of a token (ProcessedRow's plan, in float): w = exp(s - s_max) with
/// s = logit / temperature, kept iff s >= s_floor (top-k), (w, index) ranks at or before
/// (w_boundary, last_tie) (top-p) and w >= w_min (min-p); 0 otherwise. With logit_filters
/// (temperature last), kept iff logit >= l_floor (top-k and min-p) and (logit, index) ranks at
/// or before (l_boundary, last_tie) (top-p).
struct WeightRule {
  float temperature = 1;
  float s_max = 0;
  float s_floor = -std::numeric_limits<float>::infinity();
  bool nucleus_on = false;
  float w_boundary = 0;
  std::int32_t last_tie = 0;
  bool min_p_on = false;
  float w_min = 0;
  bool logit_filters = false;
  float l_floor = -std::numeric_limits<float>::infinity();
  float l_boundary = 0;
};

// The compiler must not contract a * b + c into an FMA in the weight pass (GCC contracts in C++
// whenever the target has FMA, AVX-512 included; clang within an expression): each region below
// turns contraction off, so the pass has the same bits on every ISA and under any -march.
#ifdef __clang__
#pragma float_control(push)
#pragma clang fp contract(off)
#else
#pragma GCC push_options
#pragma GCC optimize("fp-contract=off")
#endif
/// 16-byte vectors: the baseline of every x86-64 and AArch64 CPU; also the scalar weight().
namespace baseline {
inline constexpr std::size_t kWidth = 4;
typedef f32x4 F;
typedef i32x4 I;
inline bool all_lanes(I m) { return (m[0] & m[1] & m[2] & m[3]) != 0; }
struct Lanes {
  f64x2 acc01 = {0, 0};  // lanes 0, 1
  f64x2 acc23 = {0, 0};  // lanes 2, 3
  void add(F w) {
    acc01 += f64x2{static_cast<double>(w[0]), static_cast<double>(w[1])};
    acc23 += f64x2{static_cast<double>(w[2]), static_cast<double>(w[3])};
  }
  void get(double* lane) const {
    lane[0] += acc01[0];
    lane[1] += acc01[1];
    lane[2] += acc23[0];
    lane[3] += acc23[1];
  }
};
#include "specdec/sampling/weight_pass.inc"
}  // namespace baseline
#ifndef __clang__
#pragma GCC pop_options
#endif

#if defined(__x86_64__)
#define SPECDEC_SAMPLING_WIDE 1
#ifdef __clang__
#pragma clang attribute push(__attribute__((target("avx2"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2")
#pragma GCC optimize("fp-contract=off")
#endif
/// 32-byte vectors (AVX2; contraction off as above, should the build enable FMA).
namespace avx2 {
inline constexpr std::size_t kWidth = 8;
typedef float F __attribute__((vector_size(32)));
typedef std::int32_t I __attribute__((vector_size(32)));
inline bool all_lanes(I m) { return _mm256_movemask_ps(reinterpret_cast<__m256>(m)) == 0xff; }
struct Lanes {
  __m256d acc;                           // lanes 0 .. 3
  Lanes() : acc(_mm256_setzero_pd()) {}  // declared here, so under the target pragma
  void add(F w) {  // (intrinsics: GCC converts the halves of w poorly from generic vectors)
    const __m256 v = reinterpret_cast<__m256>(w);
    acc = _mm256_add_pd(acc, _mm256_cvtps_pd(_mm256_castps256_ps128(v)));
    acc = _mm256_add_pd(acc, _mm256_cvtps_pd(_mm256_extractf128_ps(v, 1)));
  }
  void get(double* lane) const {
    double out[kTotalLanes];
    _mm256_storeu_pd(out, acc);
    for (std::size_t l = 0; l < kTotalLanes; ++l) lane[l] += out[l];
  }
};
#include "specdec/sampling/weight_pass.inc"
}  // namespace avx2
#ifdef __clang__
#pragma clang attribute pop
#pragma clang attribute push(__attribute__((target("avx512f,avx512dq"))), apply_to = function)
#else
#pragma GCC pop_options
#pragma GCC push_options
#pragma GCC target("avx512f,avx512dq")
#pragma GCC optimize("fp-contract=off")
#endif
/// 64-byte vectors (AVX-512 F + DQ; it has FMA instructions, contraction is off as above).
namespace avx512 {
inline constexpr std::size_t kWidth = 16;
typedef float F __attribute__((vector_size(64)));
typedef std::int32_t I __attribute__((vector_size(64)));
inline bool all_lanes(I m) { return _mm512_movepi32_mask(reinterpret_cast<__m512i>(m)) == 0xffff; }
struct Lanes {
  typedef double D4 __attribute__((vector_size(32)));
  typedef double D8 __attribute__((vector_size(64)));
  D4 acc;                           // lanes 0 .. 3
  Lanes() : acc(D4{0, 0, 0, 0}) {}  // declared here, so under the target pragma
  void add(F w) {                   // two 8-wide conversions, then the halves in index order
    const D8 lo =
        __builtin_convertvector(__builtin_shufflevector(w, w, 0, 1, 2, 3, 4, 5, 6, 7), D8);
    const D8 hi =
        __builtin_convertvector(__builtin_shufflevector(w, w, 8, 9, 10, 11, 12, 13, 14, 15), D8);
    acc += __builtin_shufflevector(lo, lo, 0, 1, 2, 3);
    acc += __builtin_shufflevector(lo, lo, 4, 5, 6, 7);
    acc += __builtin_shufflevector(hi, hi, 0, 1, 2, 3);
    acc += __builtin_shufflevector(hi, hi, 4, 5, 6, 7);
  }
  void get(double* lane) const {
    for (std::size_t l = 0; l < kTotalLanes; ++l) lane[l] += acc[l];
  }
};
#include "specdec/sampling/weight_pass.inc"
}  // namespace avx512
#ifdef __clang__
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif
#else
#define SPECDEC_SAMPLING_WIDE 0
#endif  // __x86_64__
#ifdef __clang__
#pragma float_control(pop)
#endif

/// Which code runs the weight pass: `scalar` = weight() entry by entry (the reference of the
/// tests), `baseline` = 16-byte vectors, `avx2`, `avx512`. `automatic` = the widest this CPU
/// runs; tests and benchmarks force the others with set_pass_isa().
enum class PassIsa : std::uint8_t { automatic, scalar, baseline, avx2, avx512 };

/// Whether this build and this CPU can run `isa`.
inline bool pass_isa_supported(PassIsa isa) {
  switch (isa) {
    case PassIsa::automatic:
    case PassIsa::scalar:
    case PassIsa::baseline:
      return true;
#if SPECDEC_SAMPLING_WIDE
    case PassIsa::avx2:
      return host_cpu().avx2;
    case PassIsa::avx512:  // F and DQ are what the pass uses; host_cpu() reports them with BW, VL
      return host_cpu().avx512;
#endif
    default:
      return false;
  }
}

/// The forced ISA (PassIsa::automatic: none).
inline std::atomic<PassIsa>& forced_pass_isa() {
  static std::atomic<PassIsa> forced{PassIsa::automatic};
  return forced;
}

/// Forces the weight pass onto `isa` (automatic: back to the widest); for tests and benchmarks.
/// Throws when this CPU cannot run it.
inline void set_pass_isa(PassIsa isa) {
  if (!pass_isa_supported(isa)) throw Error("set_pass_isa: this CPU cannot run that ISA");
  forced_pass_isa().store(isa, std::memory_order_relaxed);
}

/// The ISA the weight pass runs on now.
inline PassIsa pass_isa() {
  const PassIsa forced = forced_pass_isa().load(std::memory_order_relaxed);
  if (forced != PassIsa::automatic) return forced;
  static const PassIsa widest = pass_isa_supported(PassIsa::avx512) ? PassIsa::avx512
                                : pass_isa_supported(PassIsa::avx2) ? PassIsa::avx2
                                                                    : PassIsa::baseline;
  return widest;
}

/// The row passes (weight_pass.inc) on the ISA of pass_isa(); `scalar` does no entry. Each
/// returns how many leading entries it did; the caller does the rest entry by entry.
#if SPECDEC_SAMPLING_WIDE
#define SPECDEC_SAMPLING_DISPATCH(call) \
  switch (pass_isa()) {                 \
    case PassIsa::scalar:               \
      return 0;                         \
    case PassIsa::avx512:               \
      return avx512::call;              \
    case PassIsa::avx2:                 \
      return avx2::call;                \
    default:                            \
      return baseline::call;            \
  }
#else
#define SPECDEC_SAMPLING_DISPATCH(call)        \
  if (pass_isa() == PassIsa::scalar) return 0; \
  return baseline::call;
#endif
inline std::size_t max_and_bad(const float* row, std::size_t n, float& best, bool& bad) {
  SPECDEC_SAMPLING_DISPATCH(max_and_bad(row, n, best, bad))
}
inline std::size_t first_vector_with(const float* row, std::size_t n, float value) {
  SPECDEC_SAMPLING_DISPATCH(first_vector_with(row, n, value))
}
inline std::size_t weight_pass(const WeightRule& rule, const float* logits, std::size_t n,
                               float* weights_out, double* lane) {
  SPECDEC_SAMPLING_DISPATCH(weight_pass(rule, logits, n, weights_out, lane))
}
#undef SPECDEC_SAMPLING_DISPATCH
#endif  // SPECDEC_SAMPLING_SIMD

/// First non-finite entry (`bad`, == n when none) and first maximum (`argmax`) of a row of
/// logits.
struct LogitScan {
  std::size_t argmax = 0;
  std::size_t bad = 0;
};

inline LogitScan scan_logits(const float* row, std::size_t n) {
  // Pass 1: the maximum value and whether every entry is finite. Pass 2: the first index
  // holding the maximum (stops there). Both vectorised (max_and_bad, first_vector_with).
  float best = row[0];
  bool bad = false;
  std::size_t i = 0;
#if SPECDEC_SAMPLING_SIMD
  i = max_and_bad(row, n, best, bad);
#endif
  for (; i < n; ++i) {
    bad |= row[i] - row[i] != 0.0f;
    if (row[i] > best) best = row[i];
  }
  if (bad) {
    std::size_t first_bad = 0;
    while (first_bad + 1 < n && row[first_bad] - row[first_bad] == 0.0f) ++first_bad;
    return {0, first_bad};
  }
  std::size_t first = 0;
#if SPECDEC_SAMPLING_SIMD
  first = first_vector_with(row, n, best);
#endif
  while (first + 1 < n && !(row[first] == best)) ++first;
  return {first, n};
}

/// The k-th largest (1-based, 1 <= k <= n) of row[0 .. n), exactly what std::nth_element finds
/// on a copy, with one read of the row. Entries >= a running threshold are kept in `buffer`;
/// whenever it fills up it is cut to its k largest, and the threshold rises to the k-th of
/// them. The threshold never exceeds the row's k-th largest, so every entry >= that one is
/// still in the buffer at the end.
inline float kth_largest(const float* row, std::size_t n, std::size_t k,
                         std::vector<float>& buffer) {
  std::size_t capacity = std::max<std::size_t>(4096, 4 * k);
  buffer.clear();
  buffer.reserve(capacity + 4);
  float threshold = -std::numeric_limits<float>::infinity();
  const auto kth_of_buffer = [&] {
    std::nth_element(buffer.begin(), buffer.begin() + static_cast<std::ptrdiff_t>(k - 1),
                     buffer.end(), std::greater<float>());
    return buffer[k - 1];
  };
  const auto shrink = [&] {
    threshold = kth_of_buffer();
    std::erase_if(buffer, [&](float v) { return v < threshold; });
    if (buffer.size() > capacity / 2) capacity *= 2;  // many ties at the threshold
  };
  std::size_t i = 0;
#if SPECDEC_SAMPLING_SIMD
  const std::size_t body = n - n % 4;
  for (; i < body; i += 4) {
    const f32x4 v = load4(row + i);
    const i32x4 keep = v >= threshold;
    if (!any_lane(keep)) continue;
    for (int l = 0; l < 4; ++l) {
      if (keep[l] != 0) buffer.push_back(v[l]);
    }
    if (buffer.size() >= capacity) shrink();
  }
#endif
  for (; i < n; ++i) {
    if (row[i] >= threshold) buffer.push_back(row[i]);
    if (buffer.size() >= capacity) shrink();
  }
  return kth_of_buffer();
}

}  // namespace detail

/// A row of logits processed under SamplingParams, without the distribution written out (see
/// above). plan() does the work; prob(i) and materialise() read the logits again.
template <class Real>
class ProcessedRow {
 public:
  /// Plans the processing of `logits` (V > 0 entries, all finite: check with
  /// detail::scan_logits first) under the non-greedy `params`. `work` (V entries) receives the
  /// kept weights, which materialise() scales.
  static ProcessedRow plan(std::span<const float> logits, const SamplingParams& params,
                           std::size_t argmax, std::span<Real> work) {
    if (params.temperature_last) return plan_temperature_last(logits, params, argmax, work);
    ProcessedRow row;
    const std::size_t vocab = logits.size();
    row.logits_ = logits.data();
    row.vocab_ = vocab;
    row.temperature_ = params.temperature;
    // 1. temperature: division by T > 0 is monotone, so the max of s is s at the logits' argmax.
    row.s_max_ = tempered_logit<Real>(logits[argmax], params.temperature);

    // 2. top-k: the k-th largest s is s of the k-th largest logit (monotone again).
    const auto top_k = static_cast<std::size_t>(params.top_k);
    if (top_k > 0 && top_k < vocab) {
      std::vector<float> buffer;
      row.s_floor_ = tempered_logit<Real>(detail::kth_largest(logits.data(), vocab, top_k, buffer),
                                          params.temperature);
    }

    // 3. top-p on the weights of what top-k kept.
    if (params.top_p < 1.0f) {
      const double total = row.pass(work.data());
      row.choose_nucleus(work, total, static_cast<double>(params.top_p));
    }

    // 4. min-p relative to the largest weight (1: the argmax is always kept).
    if (params.min_p > 0.0f) {
      row.min_p_on_ = true;
      row.w_min_ = static_cast<Real>(params.min_p);
    }

    // 5. the kept weights' total (>= 1: the argmax has weight 1), the weights kept in work.
    row.total_ = row.pass(work.data());
    row.weights_ = work.data();
    row.scale_ = 1.0 / row.total_;
    return row;
  }

  /// plan() in llama.cpp's order: the filters decide on the logits (at temperature 1), then the
  /// kept tokens are weighted at the temperature.
  static ProcessedRow plan_temperature_last(std::span<const float> logits,
                                            const SamplingParams& params, std::size_t argmax,
                                            std::span<Real> work) {
    const std::size_t vocab = logits.size();
    const float l_max = logits[argmax];
    // 1'. top-k: the k-th largest logit.
    float floor = -std::numeric_limits<float>::infinity();
    const auto top_k = static_cast<std::size_t>(params.top_k);
    if (top_k > 0 && top_k < vocab) {
      std::vector<float> buffer;
      floor = detail::kth_largest(logits.data(), vocab, top_k, buffer);
    }
    // 2'. top-p on the temperature-1 distribution of what top-k kept: the nucleus of that row,
    // whose last token becomes the boundary in logit rank.
    ProcessedRow row;
    row.logits_ = logits.data();
    row.vocab_ = vocab;
    if (params.top_p < 1.0f) {
      ProcessedRow one = row;
      one.temperature_ = 1.0f;
      one.s_max_ = static_cast<Real>(l_max);
      one.s_floor_ = static_cast<Real>(floor);
      const double total = one.pass(work.data());
      one.choose_nucleus(work, total, static_cast<double>(params.top_p));
      row.nucleus_on_ = true;
      row.l_boundary_ = logits[one.last_tie_];
      row.last_tie_ = one.last_tie_;
    }
    // 3'. min-p as llama.cpp computes it: a logit floor.
    if (params.min_p > 0.0f) floor = std::max(floor, l_max + std::log(params.min_p));
    row.logit_filters_ = true;
    row.l_floor_ = floor;
    // 4'. the kept tokens' weights at the temperature, and their total (>= 1: the argmax).
    row.temperature_ = params.temperature;
    row.s_max_ = tempered_logit<Real>(l_max, params.temperature);
    row.total_ = row.pass(work.data());
    row.weights_ = work.data();
    row.scale_ = 1.0 / row.total_;
    return row;
  }

  /// The processed probability of token i: bit for bit the entry materialise() writes.
  [[nodiscard]] Real prob(std::size_t i) const {
    return static_cast<Real>(static_cast<double>(weight(i)) * scale_);
  }

  /// probs (V entries, may be `work` itself) = the whole processed distribution, from the
  /// weights that plan() left in `work` (so: before `work` is reused).
  void materialise(std::span<Real> probs) const {
    for (std::size_t i = 0; i < vocab_; ++i)
      probs[i] = static_cast<Real>(static_cast<double>(weights_[i]) * scale_);
  }

  /// The kept tokens' total weight (the normaliser).
  [[nodiscard]] double total() const { return total_; }

 private:
  /// The weight of token i after the filters planned so far: exp(s_i - s_max) or 0.
  [[nodiscard]] Real weight(std::size_t i) const {
#if SPECDEC_SAMPLING_SIMD
    if constexpr (std::is_same_v<Real, float>) {
      // The vector code on a broadcast logit: the same bits as any lane of pass() (every ISA).
      const float l = logits_[i];
      const detail::f32x4 v = {l, l, l, l};
      const auto idx = static_cast<std::int32_t>(i);
      const detail::i32x4 index = {idx, idx, idx, idx};
      return detail::baseline::weights(rule(), v, index)[0];
    }
#endif
    const Real s = tempered_logit<Real>(logits_[i], temperature_);
    if (logit_filters_) {
      const float l = logits_[i];
      if (!(l >= l_floor_)) return Real(0);
      if (nucleus_on_ && !(l > l_boundary_ || (l == l_boundary_ && i <= last_tie_))) return Real(0);
      return std::exp(s - s_max_);
    }
    if (!(s >= s_floor_)) return Real(0);
    const Real w = std::exp(s - s_max_);
    if (nucleus_on_ && !(w > w_boundary_ || (w == w_boundary_ && i <= last_tie_))) return Real(0);
    if (min_p_on_ && w < w_min_) return Real(0);
    return w;
  }

#if SPECDEC_SAMPLING_SIMD
  /// The plan so far as the vector code reads it (float rows).
  [[nodiscard]] detail::WeightRule rule() const requires std::is_same_v<Real, float> {
    return {temperature_, s_max_,      s_floor_,
            nucleus_on_,  w_boundary_, static_cast<std::int32_t>(last_tie_),
            min_p_on_,    w_min_,      logit_filters_,
            l_floor_,     l_boundary_};
  }
#endif

  /// One pass over the row: the total of the weights (the fixed lane order of
  /// detail::kTotalLanes); with `weights_out`, the weights are stored there.
  double pass(Real* weights_out) const {
    double lane[detail::kTotalLanes] = {0, 0, 0, 0};
    std::size_t i = 0;
#if SPECDEC_SAMPLING_SIMD
    if constexpr (std::is_same_v<Real, float>) {
      i = detail::weight_pass(rule(), logits_, vocab_, weights_out, lane);
    }
#endif
    for (; i < vocab_; ++i) {
      const Real w = weight(i);
      lane[i % detail::kTotalLanes] += static_cast<double>(w);
      if (weights_out != nullptr) weights_out[i] = w;
    }
    return detail::combine_total_lanes(lane);
  }

  /// Top-p: the smallest prefix of the tokens sorted by weight (descending, lower index first
  /// on ties) whose mass reaches top_p * total, found without sorting the row. w = the weights.
  void choose_nucleus(std::span<const Real> w, double total, double top_p) {
    // A token with weight < (1 - top_p) / V * total can never be in the nucleus: everything
    // ranked at or below it has mass < (1 - top_p) * total. Only the others are candidates.
    const double cut = (1.0 - top_p) / static_cast<double>(vocab_) * total;
    const double need = top_p * total;
    std::vector<std::uint32_t> candidates;
    std::size_t i = 0;
#if SPECDEC_SAMPLING_SIMD
    if constexpr (std::is_same_v<Real, float>) {
      // cut as a float threshold that admits every w with double(w) >= cut (and perhaps a few
      // more, filtered exactly below).
      const auto cut_f = std::nextafter(static_cast<float>(cut), 0.0f);
      const std::size_t body = vocab_ - vocab_ % 4;
      for (; i < body; i += 4) {
        const detail::f32x4 v = detail::load4(w.data() + i);
        if (!detail::any_lane(v >= cut_f)) continue;
        for (std::size_t l = 0; l < 4; ++l) {
          if (static_cast<double>(v[l]) >= cut && v[l] > 0.0f)
            candidates.push_back(static_cast<std::uint32_t>(i + l));
        }
      }
    }
#endif
    for (; i < vocab_; ++i) {
      if (static_cast<double>(w[i]) >= cut && w[i] > Real(0))
        candidates.push_back(static_cast<std::uint32_t>(i));
    }

    // Bucket the candidates' mass by the top bits of their weight (as a float: exponent and 4
    // mantissa bits, monotone in w), and take the highest buckets whose mass reaches `need`
    // with a margin far above the rounding of these sums. Those candidates are a prefix of the
    // sorted order: only they are sorted.
    constexpr std::size_t kBuckets = 0x800;  // float bits >> 19 of a weight in (0, 1]
    const auto bucket = [](Real x) {
      return std::min<std::size_t>(std::bit_cast<std::uint32_t>(static_cast<float>(x)) >> 19,
                                   kBuckets - 1);
    };
    std::vector<double> mass(kBuckets, 0.0);
    for (const std::uint32_t c : candidates) mass[bucket(w[c])] += static_cast<double>(w[c]);
    std::size_t lowest = 0;  // the lowest bucket sorted
    double above = 0;
    for (std::size_t b = kBuckets; b-- > 0;) {
      above += mass[b];
      if (above >= need * (1.0 + 1e-9)) {
        lowest = b;
        break;
      }
    }
    const auto by_rank = [&](std::uint32_t a, std::uint32_t b) {
      return w[a] != w[b] ? w[a] > w[b] : a < b;
    };
    // The walk of the full sort: keep a token while the mass ranked before it is < need.
    const auto walk = [&](std::span<std::uint32_t> prefix) {
      std::sort(prefix.begin(), prefix.end(), by_rank);
      double before = 0;
      for (const std::uint32_t c : prefix) {
        if (!(before < need)) return true;  // the nucleus ended inside the prefix
        before += static_cast<double>(w[c]);
        w_boundary_ = w[c];
        last_tie_ = c;
      }
      return false;
    };
    const auto split = std::partition(candidates.begin(), candidates.end(),
                                      [&](std::uint32_t c) { return bucket(w[c]) >= lowest; });
    const std::span<std::uint32_t> prefix(candidates.begin(), split);
    if (!walk(prefix) && prefix.size() < candidates.size()) {
      (void)walk(candidates);  // never expected (the margin); the full sort is always right
    }
    nucleus_on_ = true;
  }

  const float* logits_ = nullptr;
  const Real* weights_ = nullptr;  // [V]: the kept weights (plan's `work`)
  std::size_t vocab_ = 0;
  float temperature_ = 1.0f;
  Real s_max_ = 0;
  Real s_floor_ = -std::numeric_limits<Real>::infinity();  // top-k: kept iff s >= s_floor
  bool nucleus_on_ = false;  // top-p: kept iff (w, index) ranks at or before (w_boundary, last_tie)
  Real w_boundary_ = 0;
  std::size_t last_tie_ = 0;
  bool min_p_on_ = false;  // min-p: kept iff w >= w_min
  Real w_min_ = 0;
  // temperature_last: kept iff logit >= l_floor and (logit, index) ranks at or before
  // (l_boundary, last_tie) when nucleus_on.
  bool logit_filters_ = false;
  float l_floor_ = -std::numeric_limits<float>::infinity();
  float l_boundary_ = 0;
  double total_ = 1;
  double scale_ = 1;
};

namespace detail {

/// Throws the error of process_logits for logits[bad].
[[noreturn]] inline void throw_bad_logit_entry(std::span<const float> logits, std::size_t bad) {
  throw Error("process_logits: logits[" + std::to_string(bad) + "] is " +
              (std::isnan(logits[bad]) ? "NaN" : (logits[bad] > 0 ? "+inf" : "-inf")));
}

/// The checks of process_logits and the scan every processing starts with.
inline LogitScan checked_scan(std::span<const float> logits, const SamplingParams& params) {
  validate(params);
  if (logits.empty()) throw Error("process_logits: empty logits (vocabulary size 0)");
  const LogitScan scan = scan_logits(logits.data(), logits.size());
  if (scan.bad < logits.size()) throw_bad_logit_entry(logits, scan.bad);
  return scan;
}

}  // namespace detail

/// The ProcessedRow of `logits` (non-greedy params), after the checks of process_logits.
/// `work`: V entries of scratch (used by top-p).
template <class Real>
ProcessedRow<Real> plan_processing(std::span<const float> logits, const SamplingParams& params,
                                   std::span<Real> work) {
  const detail::LogitScan scan = detail::checked_scan(logits, params);
  if (params.greedy()) throw Error("plan_processing: greedy rows are an argmax, not a plan");
  if (work.size() != logits.size()) throw Error("plan_processing: work must have V entries");
  return ProcessedRow<Real>::plan(logits, params, scan.argmax, work);
}

/// probs = processed distribution of `logits` under `params` (see the top of this file).
/// logits and probs have the vocabulary size V > 0. Throws specdec::Error on NaN or infinite
/// logits, on a size mismatch and on bad params.
template <class Real>
void process_logits(std::span<const float> logits, const SamplingParams& params,
                    std::span<Real> probs) {
  const detail::LogitScan scan = detail::checked_scan(logits, params);
  if (probs.size() != logits.size()) {
    throw Error("process_logits: logits has " + std::to_string(logits.size()) +
                " entries but probs has " + std::to_string(probs.size()));
  }
  if (params.greedy()) {
    std::fill(probs.begin(), probs.end(), Real(0));
    probs[scan.argmax] = Real(1);
    return;
  }
  // probs doubles as the plan's scratch: materialise() overwrites it.
  ProcessedRow<Real>::plan(logits, params, scan.argmax, probs).materialise(probs);
}

/// Convenience: the processed distribution as a new vector.
template <class Real = float>
std::vector<Real> process_logits(std::span<const float> logits, const SamplingParams& params) {
  std::vector<Real> probs(logits.size());
  process_logits<Real>(logits, params, std::span<Real>(probs));
  return probs;
}

}  // namespace specdec::sampling
