#pragma once
// The CPU backend's compute kernels: the weight x activations product for every weight dtype and
// instruction set, and the CPU feature detection that picks them. The Transformer is their main
// user; tests and benchmarks call them directly.
//
// The product is y[t][r] = dot(W[r, :], x[t, :]) for weight rows r and tokens t. One call covers
// all n tokens of a forward pass and a range of weight rows (threads split the rows), and reads
// each weight from memory once: tokens are processed in chunks of up to 16 while the rows of the
// range are still in cache.
//
// Reduction order. Every path computes each dot product in an order that depends only on the
// row and the token's own activations, never on n, on the row range or on the thread, so that a
// logits row is bitwise independent of how many tokens shared its forward call:
//  - F32, F16 and BF16 weights with f32 activations ("fma" paths): 16 partial sums, lane l takes
//    the products k = l, l + 16, l + 32, ... in increasing k as fused multiply-adds (starting from
//    +0), then a fixed tree: s8[l] = a[l] + a[l+8], s4[l] = s8[l] + s8[l+4],
//    s2[l] = s4[l] + s4[l+2], result = s2[0] + s2[1]. The portable, AVX2 and AVX-512 kernels all
//    follow this order, so they give bitwise identical results.
//  - Q8_0 weights: activations are quantised per block of 32 like llama.cpp does (d = amax/127
//    rounded to f16, q = round(x / d)); the integer block dot products are exact, and
//    acc = fma(float(isum_b), d_w[b] * d_x[b], acc) runs over the blocks b in order. Portable,
//    AVX2 and AVX512-VNNI (Isa avx512 or amx when the CPU has VNNI; else AVX2) kernels all give
//    bitwise identical results; the VNNI kernel computes isum_b as dpbusd(w + 128, x) -
//    128 * sum(x_b), which exact integer products allow (the table below: u = w + 128, z = 128).
//  - Every other quantised type (Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL with activations quantised per
//    32 as for Q8_0; Q2_K, Q3_K, Q4_K, Q5_K, Q6_K, IQ4_XS with activations quantised per 256 like
//    llama.cpp's Q8_K: d = amax/127 kept in f32, q = round(x / d), plus the int16 sums of every
//    16 and 32 quants). Each weight block is read as unsigned 8-bit weights u, integer sub-block
//    scales sc_j and mins mn_j, a zero point z and binary16 factors d and m:
//        type     block  sub  u                  z    sc_j             mn_j      m
//        Q8_0       32   32   int8 + 128        128   1                -         -
//        Q4_0       32   32   nibble              8   1                -         -
//        Q4_1       32   32   nibble              0   1                1         +m
//        Q5_0       32   32   5 bits             16   1                -         -
//        Q5_1       32   32   5 bits              0   1                1         +m
//        IQ4_NL     32   32   value + 128       128   1                -         -
//        Q2_K      256   16   2 bits              0   4 bits           4 bits    -dmin
//        Q3_K      256   16   3 bits              4   6 bits - 32      -         -
//        Q4_K      256   32   nibble              0   6 bits           6 bits    -dmin
//        Q5_K      256   32   5 bits              0   6 bits           6 bits    -dmin
//        Q6_K      256   16   6 bits             32   int8             -         -
//        IQ4_XS    256   32   value + 128       128   6 bits - 32      -         -
//    so that weight k = d * sc_j * (u_k - z) + m * mn_j, exactly the model layer's dequantised
//    value up to its float rounding. Per block and token the kernels form the exact integers
//        isum = sum_j sc_j * (sum_{k in j} u_k * x_k - z * xsum_j),  msum = sum_j mn_j * xsum_j
//    (x_k the activation quants, xsum_j their sum over sub-block j; |isum| < 2^29) and run
//        acc = fma(float(isum), d * dx, acc);  acc = fma(float(msum), m * dx, acc)  (with mins)
//    over the blocks in order, dx the activation block's scale. Integers are exact in any order,
//    so the portable kernel (which adds them one by one), the AVX2 kernel of the file's layout
//    (vpmaddubsw/vpmaddwd, 8 rows at a time), the AVX512-VNNI kernel (vpdpbusd with 16 rows in
//    the lanes), the AVX-VNNI kernel (the same with 8) and the AVX-512 and AVX2 kernels of the
//    repacked layout for CPUs without VNNI (the same with vpmaddubsw + vpmaddwd, 16 and 8 rows)
//    give bitwise the same results, for any n, row range or thread.
//  - BF16 weights on AMX: activations are rounded to bf16 (like llama.cpp and PyTorch bf16
//    inference), products are exact, and the tile unit accumulates each (row, token) element on
//    its own in the hardware's fixed order (measured: not exactly a chain of fused multiply-adds,
//    so no portable twin reproduces it; the tests check it against a double-precision product).
//    Tokens are always padded to 16, so the element's computation never depends on n.
//  - BF16 weights on AVX-512 without AMX, when the CPU has AVX512_BF16: activations are rounded
//    to bf16 the same way; vdpbf16ps accumulates 16 f32 lanes, lane l taking the pairs
//    (k, k+1) = (2l + 32i, 2l + 1 + 32i) in increasing i (the hardware's own sequence: exact
//    products, each addition rounded, denormals flushed), then the canonical tree above. The
//    sequence depends only on the row and the token, but no portable twin reproduces the
//    instruction, so the tests check it against a double-precision product and for batch
//    invariance.
//    Otherwise (no AMX, no AVX512_BF16) BF16 weights take the fma path with f32 activations.

#include <cstddef>
#include <cstdint>
#include <memory>
#include <new>
#include <optional>
#include <span>
#include <string_view>
#include <vector>

#include "specdec/cpu/kernel_args.hpp"
#include "specdec/model/float16.hpp"
#include "specdec/model/weights.hpp"

namespace specdec::cpu {

// ------------------------------------------------------------------------------------------------
// CPU features and kernel selection

/// Instruction-set level of the kernels, from the least to the most capable.
enum class Isa : std::uint8_t {
  portable,  ///< plain C++
  avx2,      ///< AVX2 + FMA + F16C
  avx512,    ///< AVX-512 F/BW/VL/DQ; integer and BF16 kernels use VNNI / BF16 when the CPU has them
  amx,       ///< avx512 plus AMX-BF16 tiles for BF16 weights (the integer types stay on VNNI)
};
const char* isa_name(Isa isa) noexcept;

struct CpuFeatures {
  bool avx2 = false;      ///< AVX2, FMA, F16C and the OS saves ymm state
  bool avx_vnni = false;  ///< AVX-VNNI (VEX vpdpbusd)
  bool avx512 = false;    ///< AVX-512 F, BW, VL, DQ and the OS saves zmm state
  bool avx512_vnni = false;
  bool avx512_bf16 = false;
  bool amx = false;  ///< AMX-TILE, -BF16, -INT8 and the kernel granted this process tile data
};

/// Detected once (cpuid, xgetbv, and for AMX the arch_prctl permission request), less the
/// features named in the environment variable SPECDEC_CPU_HIDE (a comma-separated list of
/// avx2, avx_vnni, avx512, avx512_vnni, avx512_bf16, amx: the kernels then run as on a CPU without
/// them, e.g. SPECDEC_CPU_HIDE=avx_vnni,avx512_vnni for the AVX2 kernels of CPUs without VNNI);
/// throws specdec::Error naming the variable for an unknown name.
const CpuFeatures& cpu_features();
/// For tests and benchmarks: makes cpu_features() return `features` (throws when it names a
/// feature the detection did not find); std::nullopt restores the detected ones. Not thread-safe
/// with kernels in flight; weights repacked before stay valid (the rows16 layout is the same for
/// every kernel that reads it).
void set_cpu_features_override(std::optional<CpuFeatures> features);
/// The most capable Isa this machine runs.
Isa best_isa();
/// Whether this machine can run kernels of `isa`.
bool isa_supported(Isa isa);
/// The Isa new Transformers use (each keeps the one it was built with): the override set by
/// set_isa_override(), else the environment variable SPECDEC_CPU_ISA (portable, avx2, avx512,
/// amx) when set, else best_isa(). Throws specdec::Error naming the variable when it asks for an
/// unknown or unsupported level.
Isa default_isa();
/// For tests and benchmarks: makes default_isa() return `isa` (throws when unsupported);
/// std::nullopt restores the default. Not thread-safe with Transformer construction.
void set_isa_override(std::optional<Isa> isa);
/// Parses "portable", "avx2", "avx512", "amx"; throws specdec::Error otherwise.
Isa parse_isa(std::string_view name);

/// Number of physical cores this process may run on (its affinity mask, SMT siblings counted once).
std::size_t physical_cores();

// ------------------------------------------------------------------------------------------------
// Weight x activations

/// How a matrix's rows lie in memory.
enum class WeightLayout : std::uint8_t {
  /// As in the file: row r at data + r * row_bytes.
  rows,
  /// Interleaved for the SIMD integer kernels (repack_weights()): groups of 16 rows, group g's
  /// 16 x row_bytes bytes at data + 16 * g * row_bytes, the rows' blocks interleaved field by
  /// field (src/cpu/kernels_impl.hpp, "rows16") so that the kernel reads them as one stream of
  /// ready registers. matmul() on every Isa but portable reads it (AVX512-VNNI, or AVX-512
  /// without VNNI, with 16 rows in a zmm; AVX-VNNI, or AVX2 without VNNI, reading each 64-byte
  /// register as two halves of 8 rows), and dequantize_row().
  rows16,
};

/// A weight matrix [rows, cols], in place in a memory map or in a repacked copy.
struct MatrixRef {
  DType dtype = DType::f32;
  const std::byte* data = nullptr;
  std::size_t rows = 0;
  std::size_t cols = 0;
  std::size_t row_bytes = 0;  ///< bytes of one row's blocks (from one row to the next in `rows`)
  WeightLayout layout = WeightLayout::rows;

  /// The view of a 2-D tensor of any DType; throws specdec::Error naming it when it is not a
  /// matrix, its rows do not hold whole blocks or its data is too short.
  static MatrixRef of(const Tensor& t);
};

/// Anonymous memory for repacked weights: 2 MiB aligned and advised into transparent huge pages
/// (MADV_HUGEPAGE), since a decode step streams all of it and 4 KiB pages would cost a TLB miss
/// every 4 KiB. Move-only; unmapped on destruction.
class WeightBuffer {
 public:
  WeightBuffer() = default;
  explicit WeightBuffer(std::size_t bytes);  ///< throws specdec::Error when mmap fails
  WeightBuffer(WeightBuffer&& other) noexcept;
  WeightBuffer& operator=(WeightBuffer&& other) noexcept;
  WeightBuffer(const WeightBuffer&) = delete;
  WeightBuffer& operator=(const WeightBuffer&) = delete;
  ~WeightBuffer();
  [[nodiscard]] std::byte* data() const noexcept { return data_; }
  [[nodiscard]] std::size_t size() const noexcept { return size_; }

 private:
  std::byte* data_ = nullptr;
  std::size_t size_ = 0;
};

/// Whether `isa`'s kernels read `dtype` faster from a repacked copy: the integer types (Q8_0,
/// Q4_0, Q4_1, Q5_0, Q5_1, IQ4_NL, the K-quants, IQ4_XS) on every Isa but portable. (The
/// portable kernels and the float types read the file's layout.)
bool repack_helps(Isa isa, DType dtype);

/// Bytes of w's copy in the layout the kernels of `isa` read fastest: the matrix's size rounded
/// up to 16 rows; 0 when they read the file's layout (repack_helps() is false, or w is already
/// repacked).
std::size_t repacked_bytes(Isa isa, const MatrixRef& w);
/// Writes that copy to `out` (repacked_bytes(isa, w) bytes, 64-byte aligned) and returns its
/// view; matmul() on it gives bitwise the same products, for any row range. The rows past
/// w.rows (to a multiple of 16) are zero.
MatrixRef repack_weights(Isa isa, const MatrixRef& w, std::byte* out);

/// Whether matmul() has kernels for weights of this type (every DType has them; the Transformer
/// still checks, so that a type added to the model layer first fails at load, by name).
bool has_matmul_kernel(DType t) noexcept;

/// What the kernels for `isa` read as activations for `dtype` weights: f32, bf16 (AMX tiles, or
/// rows for AVX512_BF16), or 8-bit quants per block of 32 (Q8_0 and the other 32-blocks) or of
/// 256 (the K-quants and IQ4_XS).
enum class InputFormat : std::uint8_t { f32, bf16_tiles, q8_0_rows, bf16_rows, q8_k_rows };
inline constexpr std::size_t input_format_count = 5;
InputFormat input_format(Isa isa, DType weight_dtype, std::size_t cols);

/// Activations x [n, cols] converted once per forward step into what the kernels of one
/// (Isa, weight dtype) read; shared by every matrix with that input (q, k and v; gate and up).
class PackedInput {
 public:
  /// x: n rows of `cols` floats, row t at x + t * ldx.
  void pack(Isa isa, DType weight_dtype, const float* x, std::size_t n, std::size_t cols,
            std::size_t ldx);
  /// pack() in two steps, so that threads can pack disjoint column ranges: prepare() sizes the
  /// buffers, then pack_columns() converts columns [col_begin, col_end) of every token. Ranges
  /// start and end at multiples of column_granule() (or at cols).
  void prepare(Isa isa, DType weight_dtype, std::size_t n, std::size_t cols);
  void pack_columns(const float* x, std::size_t ldx, std::size_t col_begin, std::size_t col_end);
  [[nodiscard]] std::size_t column_granule() const noexcept;

  [[nodiscard]] std::size_t n() const noexcept { return n_; }
  [[nodiscard]] std::size_t cols() const noexcept { return cols_; }
  [[nodiscard]] Isa isa() const noexcept { return isa_; }
  [[nodiscard]] InputFormat format() const noexcept { return format_; }

  // Layouts (read by the kernels; 64-byte aligned):
  //  f32:         f32 [n][cols]
  //  bf16_tiles:  per chunk of m <= 16 tokens and per 32 columns, an AMX tile of 16 rows (k pairs)
  //               x m dwords (2 bf16): uint16 [chunks (16 * cols each)][cols/32][16][m][2]
  //  bf16_rows:   uint16 [n][cols]
  //  q8_0_rows:   int8 [n][cols], scales f32 [n][cols/32], offsets int32 [n][cols/32]
  //               (-128 * the block's quant sum, for the VNNI kernel's unsigned weights)
  //  q8_k_rows:   int8 [n][cols], scales f32 [n][cols/256], sums int16 [n][cols/256][24]
  //               (per block of 256: the 16 sums of 16 quants, then the 8 sums of 32)
  // Tile rows hold only the chunk's real tokens: a decode step's tile is a few cache lines.
  [[nodiscard]] const float* f32() const noexcept { return f32_.data(); }
  [[nodiscard]] const std::uint16_t* bf16() const noexcept { return bf16_.data(); }
  [[nodiscard]] const std::int8_t* q8() const noexcept { return q8_.data(); }
  [[nodiscard]] const float* q8_scales() const noexcept { return scales_.data(); }
  [[nodiscard]] const std::int32_t* q8_offsets() const noexcept { return offsets_.data(); }
  [[nodiscard]] const std::int16_t* q8_sums() const noexcept { return sums_.data(); }

 private:
  template <class T>
  struct AlignedAlloc {
    using value_type = T;
    AlignedAlloc() = default;
    template <class U>
    AlignedAlloc(const AlignedAlloc<U>&) noexcept {}  // NOLINT(google-explicit-constructor)
    // Whole 64-byte lines, 64-byte aligned, so that full-width loads at the end stay inside.
    T* allocate(std::size_t count) {
      return static_cast<T*>(
          ::operator new ((count * sizeof(T) + 63) / 64 * 64, std::align_val_t{64}));
    }
    void deallocate(T* p, std::size_t) noexcept { ::operator delete (p, std::align_val_t{64}); }
    template <class U>
    bool operator==(const AlignedAlloc<U>&) const noexcept {
      return true;
    }
  };
  template <class T>
  using AlignedVector = std::vector<T, AlignedAlloc<T>>;

  Isa isa_ = Isa::portable;
  InputFormat format_ = InputFormat::f32;
  std::size_t n_ = 0, cols_ = 0;
  AlignedVector<float> f32_;
  AlignedVector<std::uint16_t> bf16_;
  AlignedVector<std::int8_t> q8_;
  AlignedVector<float> scales_;
  AlignedVector<std::int32_t> offsets_;
  AlignedVector<std::int16_t> sums_;
};

/// y[t * ldy + r] = dot(W[r, :], x[t, :]) for r in [row_begin, row_end) and t < x.n().
/// x must have been packed for (isa, w.dtype) with x.cols() == w.cols.
void matmul(Isa isa, const MatrixRef& w, const PackedInput& x, std::size_t row_begin,
            std::size_t row_end, float* y, std::size_t ldy);

/// Row r of a matrix as floats (dequantised), for embedding look-ups and tests; either layout.
void dequantize_row(const MatrixRef& w, std::size_t r, float* out);

/// out[i] = silu(gate[i]) * up[i] = gate[i] / (1 + exp_f32(-gate[i])) * up[i], bitwise the same on
/// every Isa.
void swiglu(Isa isa, const float* gate, const float* up, float* out, std::size_t count);
/// Sum of x[i]^2 in the canonical 16-lane order (RMSNorm), bitwise the same on every Isa.
float sum_squares(Isa isa, const float* x, std::size_t count);
/// Rounds a row to f16 (KV cache), nearest even.
void f32_to_f16_row(Isa isa, const float* in, std::uint16_t* out, std::size_t count);
/// Attention of each of args.heads query heads over cached positions, bitwise the same on every
/// Isa and whatever the number of heads in the call:
/// s_j = dot(q, k_j) (canonical order) * scale; e_j = exp_f32(s_j - max s); sum = e summed in 16
/// lanes (lane l takes j = l, l + 16, ...) and the fixed tree; out[d] = (e_0 v_0[d] + e_1 v_1[d] +
/// ...) in increasing j as fused multiply-adds, then / sum.
void attend(Isa isa, const AttentionArgs& args);
/// exp(x) for float x, within 2 ulp (Cephes polynomial), bitwise identical on every Isa (same
/// operations, fused multiply-adds, same order). x > 88 gives exp(88); x < -87 gives 0.
float exp_f32(float x) noexcept;

}  // namespace specdec::cpu
