// CPU features (from specdec/host_cpu.hpp), activation packing, dispatch to the per-Isa
// kernels, and the portable kernels that define the reduction orders (the SIMD kernels reproduce
// them bit for bit).
#include "specdec/cpu/kernels.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <new>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <utility>
#include <vector>

#include "kernels_impl.hpp"
#include "specdec/host_cpu.hpp"
#include "specdec/model/float16.hpp"
#include "specdec/model/quants.hpp"

#if defined(__linux__)
#include <sched.h>
#endif

namespace specdec::cpu {

using detail::q8_block_bytes;
using detail::q8_block_elems;

// ================================================================================================
// CPU features

namespace {

/// The features SPECDEC_CPU_HIDE may name, one row per CpuFeatures field.
struct FeatureName {
  const char* name;
  bool CpuFeatures::*field;
};
constexpr FeatureName feature_names[] = {
    {"avx2", &CpuFeatures::avx2},
    {"avx_vnni", &CpuFeatures::avx_vnni},
    {"avx512", &CpuFeatures::avx512},
    {"avx512_vnni", &CpuFeatures::avx512_vnni},
    {"avx512_bf16", &CpuFeatures::avx512_bf16},
    {"amx", &CpuFeatures::amx},
};

/// f without the features named in SPECDEC_CPU_HIDE (a comma-separated list of feature_names).
CpuFeatures hide_features_from_env(CpuFeatures f) {
  const char* env = std::getenv("SPECDEC_CPU_HIDE");
  if (env == nullptr) return f;
  std::string_view list = env;
  while (!list.empty()) {
    const std::size_t comma = list.find(',');
    const std::string_view name = list.substr(0, comma);
    list = comma == std::string_view::npos ? std::string_view{} : list.substr(comma + 1);
    if (name.empty()) continue;
    const FeatureName* row = nullptr;
    for (const FeatureName& n : feature_names)
      if (name == n.name) row = &n;
    if (row == nullptr) {
      std::vector<std::string_view> known;
      for (const FeatureName& n : feature_names) known.emplace_back(n.name);
      throw Error(fmt::format(
          "SPECDEC_CPU_HIDE: unknown feature '{}': expected a comma-separated list of {}", name,
          fmt::join(known, ", ")));
    }
    f.*(row->field) = false;
  }
  return f;
}

/// The host's features (specdec/host_cpu.hpp, shared with the sampling core), AMX only once
/// Linux granted this process tile data, less those SPECDEC_CPU_HIDE names.
CpuFeatures detect_features() {
  const HostCpu& h = host_cpu();
  CpuFeatures f;
  f.avx2 = h.avx2;
  f.avx_vnni = h.avx_vnni;
  f.avx512 = h.avx512;
  f.avx512_vnni = h.avx512_vnni;
  f.avx512_bf16 = h.avx512_bf16;
  f.amx = h.amx_tiles && detail::amx_request_permission();
  return hide_features_from_env(f);
}

const CpuFeatures& detected_features() {
  static const CpuFeatures features = detect_features();
  return features;
}

std::optional<CpuFeatures>& features_override() {
  static std::optional<CpuFeatures> value;
  return value;
}

}  // namespace

const char* isa_name(Isa isa) noexcept {
  switch (isa) {
    case Isa::portable:
      return "portable";
    case Isa::avx2:
      return "avx2";
    case Isa::avx512:
      return "avx512";
    case Isa::amx:
      return "amx";
  }
  return "?";
}

const CpuFeatures& cpu_features() {
  if (features_override()) return *features_override();
  return detected_features();
}

void set_cpu_features_override(std::optional<CpuFeatures> features) {
  if (features)
    for (const FeatureName& n : feature_names)
      if ((*features).*(n.field) && !(detected_features().*(n.field)))
        throw Error(fmt::format("set_cpu_features_override: {} is not available here", n.name));
  features_override() = features;
}

bool isa_supported(Isa isa) {
  const CpuFeatures& f = cpu_features();
  switch (isa) {
    case Isa::portable:
      return true;
    case Isa::avx2:
      return f.avx2;
    case Isa::avx512:
      return f.avx512;
    case Isa::amx:
      return f.amx;
  }
  return false;
}

Isa best_isa() {
  for (Isa isa : {Isa::amx, Isa::avx512, Isa::avx2})
    if (isa_supported(isa)) return isa;
  return Isa::portable;
}

namespace {
std::optional<Isa>& isa_override() {
  static std::optional<Isa> value;
  return value;
}
}  // namespace

Isa parse_isa(std::string_view name) {
  for (Isa isa : {Isa::portable, Isa::avx2, Isa::avx512, Isa::amx})
    if (name == isa_name(isa)) return isa;
  throw Error(
      fmt::format("unknown instruction set '{}': expected portable, avx2, avx512 or amx", name));
}

void set_isa_override(std::optional<Isa> isa) {
  if (isa && !isa_supported(*isa))
    throw Error(fmt::format("instruction set {} is not supported here (best: {})", isa_name(*isa),
                            isa_name(best_isa())));
  isa_override() = isa;
}

Isa default_isa() {
  if (isa_override()) return *isa_override();
  const char* env = std::getenv("SPECDEC_CPU_ISA");
  if (env == nullptr || *env == '\0') return best_isa();
  Isa isa{};
  try {
    isa = parse_isa(env);
  } catch (const Error& e) {
    throw Error(fmt::format("SPECDEC_CPU_ISA: {}", e.what()));
  }
  if (!isa_supported(isa))
    throw Error(fmt::format("SPECDEC_CPU_ISA={}: this CPU (or OS) does not support it; best is {}",
                            env, isa_name(best_isa())));
  return isa;
}

std::size_t physical_cores() {
  static const std::size_t cores = [] {
    std::size_t fallback = std::max(1u, std::thread::hardware_concurrency());
#if defined(__linux__)
    cpu_set_t set;
    CPU_ZERO(&set);
    if (sched_getaffinity(0, sizeof set, &set) != 0) return fallback;
    fallback = static_cast<std::size_t>(CPU_COUNT(&set));
    // A core is identified by (package, core id); SMT siblings share it.
    std::set<std::pair<int, int>> seen;
    for (int cpu = 0; cpu < CPU_SETSIZE; ++cpu) {
      if (!CPU_ISSET(cpu, &set)) continue;
      const std::string base = fmt::format("/sys/devices/system/cpu/cpu{}/topology/", cpu);
      int package = -1, core = -1;
      std::ifstream(base + "physical_package_id") >> package;
      std::ifstream(base + "core_id") >> core;
      if (package < 0 || core < 0) return fallback;
      seen.emplace(package, core);
    }
    return seen.empty() ? fallback : seen.size();
#else
    return fallback;
#endif
  }();
  return cores;
}

// ================================================================================================
// exp

float exp_f32(float x) noexcept {
  using namespace detail;
  float xc = x < exp_min_x ? exp_min_x : x;
  xc = xc > exp_max_x ? exp_max_x : xc;
  const float t = std::fma(xc, exp_log2e, exp_round_magic);
  const float nf = t - exp_round_magic;
  float r = std::fma(nf, -exp_ln2_hi, xc);
  r = std::fma(nf, -exp_ln2_lo, r);
  float p = exp_p0;
  p = std::fma(p, r, exp_p1);
  p = std::fma(p, r, exp_p2);
  p = std::fma(p, r, exp_p3);
  p = std::fma(p, r, exp_p4);
  p = std::fma(p, r, exp_p5);
  const float r2 = r * r;
  const float y = std::fma(p, r2, r) + 1.0f;
  const std::uint32_t n =
      std::bit_cast<std::uint32_t>(t) - std::bit_cast<std::uint32_t>(exp_round_magic);
  float result = std::bit_cast<float>(std::bit_cast<std::uint32_t>(y) + (n << 23));
  if (x < exp_min_x) result = 0.0f;
  if (x != x) result = x;
  return result;
}

// ================================================================================================
// Matrices and packed activations

MatrixRef MatrixRef::of(const Tensor& t) {
  if (t.shape.size() != 2)
    throw Error(
        fmt::format("tensor {}: expected a matrix, has {} dimensions", t.name, t.shape.size()));
  MatrixRef m;
  m.dtype = t.dtype;
  m.data = t.data;
  m.rows = t.shape[0];
  m.cols = t.shape[1];
  m.row_bytes = dtype_row_bytes(t.dtype, m.cols, fmt::format("tensor {}", t.name));
  if (t.data == nullptr || t.nbytes < m.rows * m.row_bytes)
    throw Error(fmt::format("tensor {}: {} bytes of data for [{}, {}] {}", t.name, t.nbytes, m.rows,
                            m.cols, dtype_name(t.dtype)));
  return m;
}

bool has_matmul_kernel(DType t) noexcept {
  switch (t) {
    case DType::f32:
    case DType::f16:
    case DType::bf16:
    case DType::q8_0:
    case DType::q4_0:
    case DType::q4_1:
    case DType::q5_0:
    case DType::q5_1:
    case DType::iq4_nl:
    case DType::q2_k:
    case DType::q3_k:
    case DType::q4_k:
    case DType::q5_k:
    case DType::q6_k:
    case DType::iq4_xs:
      return true;
  }
  return false;
}

InputFormat input_format(Isa isa, DType weight_dtype, std::size_t cols) {
  switch (weight_dtype) {
    case DType::bf16:
      if (isa == Isa::amx && cols % 32 == 0) return InputFormat::bf16_tiles;
      if (isa == Isa::avx512 && cpu_features().avx512_bf16) return InputFormat::bf16_rows;
      return InputFormat::f32;
    case DType::f32:
    case DType::f16:
      return InputFormat::f32;
    default:  // the quantised types: activations in blocks as long as the weights' blocks
      return detail::super_blocks(weight_dtype) ? InputFormat::q8_k_rows : InputFormat::q8_0_rows;
  }
}

namespace {

/// One Q8_0 block of activations (the writer's quantiser, specdec/model/quants.hpp); the scale
/// the kernels use is the binary16 one the block would store.
void quantize_q8_0_block(const float* x, std::int8_t* q, float* d_out) {
  *d_out = fp16_to_fp32(quant::quantize_block_q8_0(x, q));
}

/// One block of 256 activations for the K-quant kernels, like llama.cpp's Q8_K: one f32 scale
/// d = max|x| / 127 (not rounded to f16; NaNs left out of the maximum), q = roundf(x * (1 / d))
/// (halves away from zero, NaN -> 0), so |q| <= 127; then the sums of each 16 and each 32 quants.
void quantize_q8_k_block(const float* x, std::int8_t* q, float* d_out, std::int16_t* sums) {
  float amax = 0.0f;
  for (std::size_t j = 0; j < 256; ++j) {
    const float a = std::fabs(x[j]);
    amax = a > amax ? a : amax;
  }
  const float d = amax / 127.0f;
  const float id = d != 0.0f ? 1.0f / d : 0.0f;
  for (std::size_t j = 0; j < 256; ++j) {
    // roundf(): exact in double for |v| <= 127.5.
    const float v = x[j] * id;
    q[j] = v != v ? std::int8_t{0}
                  : static_cast<std::int8_t>(static_cast<double>(v) + (v >= 0.0f ? 0.5 : -0.5));
  }
  *d_out = d;
  for (std::size_t i = 0; i < 16; ++i) {
    int sum = 0;
    for (std::size_t j = 16 * i; j < 16 * i + 16; ++j) sum += q[j];
    sums[i] = static_cast<std::int16_t>(sum);
  }
  for (std::size_t i = 0; i < 8; ++i)
    sums[16 + i] = static_cast<std::int16_t>(sums[2 * i] + sums[2 * i + 1]);
}

}  // namespace

void PackedInput::pack(Isa isa, DType weight_dtype, const float* x, std::size_t n, std::size_t cols,
                       std::size_t ldx) {
  prepare(isa, weight_dtype, n, cols);
  pack_columns(x, ldx, 0, cols);
}

std::size_t PackedInput::column_granule() const noexcept {
  switch (format_) {
    case InputFormat::f32:
      return 16;
    case InputFormat::q8_k_rows:
      return 256;
    default:
      return 32;
  }
}

void PackedInput::prepare(Isa isa, DType weight_dtype, std::size_t n, std::size_t cols) {
  // Also makes sure the AMX permission was requested before any tile instruction runs.
  if (!isa_supported(isa))
    throw Error(fmt::format("PackedInput::prepare: {} is not supported here", isa_name(isa)));
  isa_ = isa;
  format_ = input_format(isa, weight_dtype, cols);
  n_ = n;
  cols_ = cols;
  const std::size_t chunks = (n + 15) / 16, blocks = cols / q8_block_elems;
  // The tile formats pad the last chunk to 16 tokens. The padding lanes are never zeroed: each
  // tile result element depends on its own token only, and padded tokens' results are dropped.
  switch (format_) {
    case InputFormat::f32:
      f32_.resize(n * cols);
      break;
    case InputFormat::bf16_rows:
      bf16_.resize(n * cols);
      break;
    case InputFormat::bf16_tiles:
      bf16_.resize(chunks * cols * 16);
      break;
    case InputFormat::q8_0_rows:
      q8_.resize(n * cols);
      scales_.resize(n * blocks);
      offsets_.resize(n * blocks);
      break;
    case InputFormat::q8_k_rows:
      q8_.resize(n * cols);
      scales_.resize(n * (cols / 256));
      sums_.resize(n * (cols / 256) * detail::q8_k_sums);
      break;
  }
}

void PackedInput::pack_columns(const float* x, std::size_t ldx, std::size_t col_begin,
                               std::size_t col_end) {
  const std::size_t n = n_, cols = cols_;
  switch (format_) {
    case InputFormat::f32:
      for (std::size_t t = 0; t < n; ++t)
        std::memcpy(f32_.data() + t * cols + col_begin, x + t * ldx + col_begin,
                    (col_end - col_begin) * sizeof(float));
      return;
    case InputFormat::bf16_tiles: {
      // As uint32 pairs: [chunk][pair / 16][pair % 16][token % 16], pair = k / 2.
      const std::size_t pairs = cols / 2, p0 = col_begin / 2, p1 = col_end / 2;
      auto* dst = reinterpret_cast<std::uint32_t*>(bf16_.data());
      detail::pack_bf16_tiles_avx512(x, n, ldx, pairs, p0, p1,
                                     dst);  // only for Isa::amx, which has AVX-512
      return;
    }
    case InputFormat::bf16_rows:  // only for Isa::avx512
      detail::pack_bf16_rows_avx512(x, n, ldx, cols, col_begin, col_end, bf16_.data());
      return;
    case InputFormat::q8_0_rows: {
      const std::size_t blocks = cols / q8_block_elems;
      if (isa_ == Isa::avx512 || isa_ == Isa::amx)
        return detail::pack_q8_0_rows_avx512(x, n, ldx, cols, col_begin / 32, col_end / 32,
                                             q8_.data(), scales_.data(), offsets_.data());
      for (std::size_t t = 0; t < n; ++t)
        for (std::size_t b = col_begin / 32; b < col_end / 32; ++b) {
          std::int8_t* q = q8_.data() + t * cols + b * 32;
          quantize_q8_0_block(x + t * ldx + b * 32, q, scales_.data() + t * blocks + b);
          std::int32_t sum = 0;
          for (std::size_t j = 0; j < q8_block_elems; ++j) sum += q[j];
          offsets_[t * blocks + b] = -128 * sum;
        }
      return;
    }
    case InputFormat::q8_k_rows: {
      const std::size_t blocks = cols / 256;
      if (isa_ == Isa::avx512 || isa_ == Isa::amx)
        return detail::pack_q8_k_rows_avx512(x, n, ldx, cols, col_begin / 256, col_end / 256,
                                             q8_.data(), scales_.data(), sums_.data());
      for (std::size_t t = 0; t < n; ++t)
        for (std::size_t b = col_begin / 256; b < col_end / 256; ++b)
          quantize_q8_k_block(x + t * ldx + b * 256, q8_.data() + t * cols + b * 256,
                              scales_.data() + t * blocks + b,
                              sums_.data() + (t * blocks + b) * detail::q8_k_sums);
      return;
    }
  }
}

// ================================================================================================
// Portable kernels: the reference orders

namespace detail {

namespace {

float load_weight(FmaWeights type, const std::byte* row, std::size_t k) {
  switch (type) {
    case FmaWeights::f32: {
      float v;
      std::memcpy(&v, row + 4 * k, 4);
      return v;
    }
    case FmaWeights::f16: {
      std::uint16_t h;
      std::memcpy(&h, row + 2 * k, 2);
      return fp16_to_fp32(h);
    }
    case FmaWeights::bf16: {
      std::uint16_t h;
      std::memcpy(&h, row + 2 * k, 2);
      return bf16_to_fp32(h);
    }
  }
  return 0.0f;
}

/// The canonical tree over 16 partial sums.
float reduce16(const float* a) {
  float s8[8], s4[4], s2[2];
  for (int l = 0; l < 8; ++l) s8[l] = a[l] + a[l + 8];
  for (int l = 0; l < 4; ++l) s4[l] = s8[l] + s8[l + 4];
  for (int l = 0; l < 2; ++l) s2[l] = s4[l] + s4[l + 2];
  return s2[0] + s2[1];
}

/// dot(a, b) in the canonical order, b given as f32.
float dot16(const float* a, const float* b, std::size_t count) {
  float acc[16] = {};
  for (std::size_t k0 = 0; k0 < count; k0 += 16)
    for (std::size_t l = 0; l < 16; ++l) {
      const std::size_t k = k0 + l;
      acc[l] = std::fma(k < count ? a[k] : 0.0f, k < count ? b[k] : 0.0f, acc[l]);
    }
  return reduce16(acc);
}

}  // namespace

void fma_matmul_portable(const FmaArgs& a) {
  float w16[16];
  for (std::size_t r = 0; r < a.rows; ++r) {
    const std::byte* row = a.w + r * a.row_bytes;
    for (std::size_t t = 0; t < a.n; ++t) {
      const float* x = a.x + t * a.cols;
      float acc[16] = {};
      for (std::size_t k0 = 0; k0 < a.cols; k0 += 16) {
        for (std::size_t l = 0; l < 16; ++l)
          w16[l] = k0 + l < a.cols ? load_weight(a.type, row, k0 + l) : 0.0f;
        for (std::size_t l = 0; l < 16; ++l)
          acc[l] = std::fma(w16[l], k0 + l < a.cols ? x[k0 + l] : 0.0f, acc[l]);
      }
      a.y[t * a.ldy + r] = reduce16(acc);
    }
  }
}

void attend_portable(const AttentionArgs& a) {
  float* row = a.out;  // reused as the f32 copy of a K row before it holds the output
  for (std::size_t j = 0; j < a.count; ++j) {
    const float* k = nullptr;
    if (a.kv_f16) {
      const auto* k16 = static_cast<const std::uint16_t*>(a.k) + kv_row(a, j) * a.row_stride;
      for (std::size_t d = 0; d < a.head_dim; ++d) row[d] = fp16_to_fp32(k16[d]);
      k = row;
    } else {
      k = static_cast<const float*>(a.k) + kv_row(a, j) * a.row_stride;
    }
    a.scores[j] = dot16(a.q, k, a.head_dim) * a.scale;
  }
  float max = a.scores[0];
  for (std::size_t j = 1; j < a.count; ++j) max = std::max(max, a.scores[j]);
  float acc[16] = {};
  for (std::size_t j0 = 0; j0 < a.count; j0 += 16)
    for (std::size_t l = 0; l < 16 && j0 + l < a.count; ++l) {
      const float e = exp_f32(a.scores[j0 + l] - max);
      a.scores[j0 + l] = e;
      acc[l] += e;
    }
  const float sum = reduce16(acc);
  for (std::size_t d = 0; d < a.head_dim; ++d) a.out[d] = 0.0f;
  for (std::size_t j = 0; j < a.count; ++j) {
    const float e = a.scores[j];
    if (a.kv_f16) {
      const auto* v16 = static_cast<const std::uint16_t*>(a.v) + kv_row(a, j) * a.row_stride;
      for (std::size_t d = 0; d < a.head_dim; ++d)
        a.out[d] = std::fma(e, fp16_to_fp32(v16[d]), a.out[d]);
    } else {
      const float* v = static_cast<const float*>(a.v) + kv_row(a, j) * a.row_stride;
      for (std::size_t d = 0; d < a.head_dim; ++d) a.out[d] = std::fma(e, v[d], a.out[d]);
    }
  }
  for (std::size_t d = 0; d < a.head_dim; ++d) a.out[d] = a.out[d] / sum;
}

void swiglu_portable(const float* gate, const float* up, float* out, std::size_t count) {
  for (std::size_t i = 0; i < count; ++i) out[i] = gate[i] / (1.0f + exp_f32(-gate[i])) * up[i];
}

float sum_squares_portable(const float* x, std::size_t count) { return dot16(x, x, count); }

void f32_to_f16_row_portable(const float* in, std::uint16_t* out, std::size_t count) {
  for (std::size_t i = 0; i < count; ++i) out[i] = fp32_to_fp16(in[i]);
}

}  // namespace detail

// ================================================================================================
// Dispatch

namespace {

/// t, after checking that the integer kernels compute with it.
DType checked_quant_type(DType t) {
  if (!detail::is_quant_type(t))
    throw Error(fmt::format("matmul: dtype {} has no integer kernel", dtype_name(t)));
  return t;
}

/// Whether the integer kernels of `isa` are the AVX512-VNNI ones.
bool avx512_vnni_kernels(Isa isa) {
  return (isa == Isa::avx512 || isa == Isa::amx) && cpu_features().avx512_vnni;
}
/// The kernel that reads the rows16 layout on `isa`: the AVX512-VNNI one; else the AVX-VNNI one
/// where the CPU has it; else, without VNNI, the AVX-512 one (Isa avx512 / amx) or the AVX2 one;
/// none on portable.
enum class Rows16Kernel : std::uint8_t { none, avx512_vnni, avx_vnni, avx512, avx2 };
Rows16Kernel rows16_kernel(Isa isa) {
  if (isa == Isa::portable) return Rows16Kernel::none;
  if (avx512_vnni_kernels(isa)) return Rows16Kernel::avx512_vnni;
  if (cpu_features().avx_vnni) return Rows16Kernel::avx_vnni;
  return isa == Isa::avx2 ? Rows16Kernel::avx2 : Rows16Kernel::avx512;
}

/// The integer kernels of `isa` over the file's layout: AVX512-VNNI where the CPU has it, else
/// AVX2 for any AVX2 level.
void quant_matmul(Isa isa, const detail::QuantArgs& args) {
  if (avx512_vnni_kernels(isa)) return detail::quant_matmul_avx512vnni(args);
  if (isa != Isa::portable) return detail::quant_matmul_avx2(args);
  detail::quant_matmul_portable(args);
}

detail::FmaWeights fma_type(DType t) {
  switch (t) {
    case DType::f32:
      return detail::FmaWeights::f32;
    case DType::f16:
      return detail::FmaWeights::f16;
    case DType::bf16:
      return detail::FmaWeights::bf16;
    default:
      throw Error(fmt::format("matmul: dtype {} has no fma kernel", dtype_name(t)));
  }
}

/// The AMX BF16 kernel takes whole groups of 16 rows; a range that ends inside a group gets its
/// last rows copied into a zero-padded group (per thread, reused).
thread_local std::vector<std::byte> tail_rows;

/// Where byte `at` of field f of block b of the row in lane `lane` lies in a rows16 group,
/// from the group's start (kernels_impl.hpp, "rows16"); `at` is a multiple of 4 (or 0 or 1 in a
/// 2-byte field).
std::size_t rows16_position(const detail::BlockField& f, std::size_t block_bytes, std::size_t b,
                            std::size_t lane, std::size_t at) {
  const std::size_t field = 16 * (b * block_bytes + f.offset);
  if (f.bytes == 2) return field + 2 * lane + at;
  return field + 64 * (at / 4) + 4 * lane + at % 4;
}

/// Copies the bytes of the row in lane `lane` of a rows16 group between the file's layout (a
/// row of row_bytes) and the group: ToRows16 from the row to the group, else back. One dword (or
/// 2-byte field) at a time, at the places the table of kernels_impl.hpp gives.
template <bool ToRows16>
void rows16_copy_row(DType dtype, std::size_t row_bytes, std::size_t lane, const std::byte* from,
                     std::byte* to) {
  const detail::BlockFields fields = detail::quant_traits(checked_quant_type(dtype)).rows16;
  const std::size_t block_bytes = dtype_block_bytes(dtype);
  for (std::size_t b = 0; b < row_bytes / block_bytes; ++b)
    for (int i = 0; i < fields.count; ++i) {
      const detail::BlockField& f = fields.fields[i];
      const std::size_t step = f.bytes == 2 ? 2 : 4;
      for (std::size_t at = 0; at < f.bytes; at += step) {
        const std::size_t in_row = b * block_bytes + f.offset + at;
        const std::size_t in_group = rows16_position(f, block_bytes, b, lane, at);
        if constexpr (ToRows16)
          std::memcpy(to + in_group, from + in_row, step);
        else
          std::memcpy(to + in_row, from + in_group, step);
      }
    }
}

}  // namespace

bool repack_helps(Isa isa, DType dtype) {
  return !is_float_dtype(dtype) && has_matmul_kernel(dtype) &&
         rows16_kernel(isa) != Rows16Kernel::none;
}

std::size_t repacked_bytes(Isa isa, const MatrixRef& w) {
  if (w.layout != WeightLayout::rows || !repack_helps(isa, w.dtype)) return 0;
  return (w.rows + 15) / 16 * 16 * w.row_bytes;
}

MatrixRef repack_weights(Isa isa, const MatrixRef& w, std::byte* out) {
  if (repacked_bytes(isa, w) == 0)
    throw Error(fmt::format("repack_weights: [{}, {}] {} has no repacked layout on {}", w.rows,
                            w.cols, dtype_name(w.dtype), isa_name(isa)));
  const std::size_t groups = (w.rows + 15) / 16, group_bytes = 16 * w.row_bytes;
  for (std::size_t g = 0; g < groups; ++g) {
    std::byte* group = out + g * group_bytes;
    const std::size_t rows = std::min<std::size_t>(16, w.rows - 16 * g);
    if (rows < 16) std::memset(group, 0, group_bytes);  // the padding rows: zero weights
    for (std::size_t lane = 0; lane < rows; ++lane)
      rows16_copy_row<true>(w.dtype, w.row_bytes, lane, w.data + (16 * g + lane) * w.row_bytes,
                            group);
  }
  MatrixRef packed = w;
  packed.data = out;
  packed.layout = WeightLayout::rows16;
  return packed;
}

void dequantize_row(const MatrixRef& w, std::size_t r, float* out) {
  if (w.layout == WeightLayout::rows)
    return dequantize(w.dtype, w.data + r * w.row_bytes, out, w.cols);
  thread_local std::vector<std::byte> row;
  row.resize(w.row_bytes);
  rows16_copy_row<false>(w.dtype, w.row_bytes, r % 16, w.data + r / 16 * 16 * w.row_bytes,
                         row.data());
  dequantize(w.dtype, row.data(), out, w.cols);
}

void matmul(Isa isa, const MatrixRef& w, const PackedInput& x, std::size_t row_begin,
            std::size_t row_end, float* y, std::size_t ldy) {
  if (x.cols() != w.cols || x.isa() != isa || x.format() != input_format(isa, w.dtype, w.cols))
    throw Error(fmt::format(
        "matmul: activations packed for [{}] {} do not fit weights [{}, {}] {} on {}", x.cols(),
        isa_name(x.isa()), w.rows, w.cols, dtype_name(w.dtype), isa_name(isa)));
  if (row_begin >= row_end) return;
  const std::size_t rows = row_end - row_begin;
  float* y0 = y + row_begin;
  if (w.layout == WeightLayout::rows16) {
    if (!repack_helps(isa, w.dtype))
      throw Error(fmt::format("matmul: [{}, {}] {} repacked for the SIMD kernels, called on {}",
                              w.rows, w.cols, dtype_name(w.dtype), isa_name(isa)));
    detail::QuantArgs args{checked_quant_type(w.dtype),
                           w.data + row_begin / 16 * 16 * w.row_bytes,
                           w.row_bytes,
                           rows,
                           w.cols,
                           x.q8(),
                           x.q8_scales(),
                           x.q8_offsets(),
                           x.q8_sums(),
                           x.n(),
                           y0,
                           ldy};
    args.rows16 = true;
    args.first_lane = row_begin % 16;
    switch (rows16_kernel(isa)) {
      case Rows16Kernel::avx512_vnni:
        return detail::quant_matmul_avx512vnni(args);
      case Rows16Kernel::avx_vnni:
        return detail::quant_matmul_avxvnni(args);
      case Rows16Kernel::avx512:
        return detail::quant_matmul_avx512_rows16(args);
      default:  // repack_helps() refused Rows16Kernel::none above
        return detail::quant_matmul_avx2_rows16(args);
    }
  }
  const std::byte* w0 = w.data + row_begin * w.row_bytes;
  switch (x.format()) {
    case InputFormat::f32: {
      const detail::FmaArgs args{fma_type(w.dtype), w0,    w.row_bytes, rows, w.cols,
                                 x.f32(),           x.n(), y0,          ldy};
      if (isa == Isa::avx512 || isa == Isa::amx) return detail::fma_matmul_avx512(args);
      if (isa == Isa::avx2) return detail::fma_matmul_avx2(args);
      return detail::fma_matmul_portable(args);
    }
    case InputFormat::q8_k_rows:
      return quant_matmul(isa, {checked_quant_type(w.dtype), w0, w.row_bytes, rows, w.cols, x.q8(),
                                x.q8_scales(), nullptr, x.q8_sums(), x.n(), y0, ldy});
    case InputFormat::q8_0_rows:
      return quant_matmul(isa, {checked_quant_type(w.dtype), w0, w.row_bytes, rows, w.cols, x.q8(),
                                x.q8_scales(), x.q8_offsets(), nullptr, x.n(), y0, ldy});
    case InputFormat::bf16_rows:
      return detail::bf16_matmul_avx512bf16(
          {w0, w.row_bytes, rows, w.cols, x.bf16(), x.n(), y0, ldy});
    case InputFormat::bf16_tiles: {
      const std::size_t full = rows / 16 * 16;
      if (full > 0)
        detail::bf16_matmul_amx({w0, w.row_bytes, full, w.cols, x.bf16(), x.n(), y0, ldy});
      if (full == rows) return;
      // Tail: copy the remaining rows into a zero-padded group of 16 rows. The kernel writes
      // y[t * ld + r] for all 16 padded rows: give it a scratch with ld = 16, then copy the real
      // rows out. Token chunks are handled by the kernel.
      const std::size_t tail = rows - full;
      tail_rows.assign(16 * w.row_bytes, std::byte{0});
      std::memcpy(tail_rows.data(), w0 + full * w.row_bytes, tail * w.row_bytes);
      std::vector<float> scratch(x.n() * 16);
      detail::bf16_matmul_amx(
          {tail_rows.data(), w.row_bytes, 16, w.cols, x.bf16(), x.n(), scratch.data(), 16});
      for (std::size_t t = 0; t < x.n(); ++t)
        for (std::size_t r = 0; r < tail; ++r) y0[t * ldy + full + r] = scratch[t * 16 + r];
      return;
    }
  }
}

void swiglu(Isa isa, const float* gate, const float* up, float* out, std::size_t count) {
  if (isa == Isa::avx512 || isa == Isa::amx) return detail::swiglu_avx512(gate, up, out, count);
  if (isa == Isa::avx2) return detail::swiglu_avx2(gate, up, out, count);
  detail::swiglu_portable(gate, up, out, count);
}

float sum_squares(Isa isa, const float* x, std::size_t count) {
  if (isa == Isa::avx512 || isa == Isa::amx) return detail::sum_squares_avx512(x, count);
  if (isa == Isa::avx2) return detail::sum_squares_avx2(x, count);
  return detail::sum_squares_portable(x, count);
}

void f32_to_f16_row(Isa isa, const float* in, std::uint16_t* out, std::size_t count) {
  if (isa != Isa::portable) return detail::f32_to_f16_row_avx2(in, out, count);
  detail::f32_to_f16_row_portable(in, out, count);
}

void attend(Isa isa, const AttentionArgs& args) {
  // The vector kernels take up to kMaxAttentionHeads heads a call, the portable one one.
  const std::size_t step = isa == Isa::portable ? 1 : detail::kMaxAttentionHeads;
  for (std::size_t h0 = 0; h0 < args.heads; h0 += step) {
    AttentionArgs part = args;
    part.heads = std::min(step, args.heads - h0);
    part.q += h0 * args.head_dim;
    part.out += h0 * args.head_dim;
    part.scores += h0 * args.count;
    if (isa == Isa::avx512 || isa == Isa::amx)
      detail::attend_avx512(part);
    else if (isa == Isa::avx2)
      detail::attend_avx2(part);
    else
      detail::attend_portable(part);
  }
}

}  // namespace specdec::cpu
