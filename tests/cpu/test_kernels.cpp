// CPU kernels: conversions, the exp, and every instruction-set path of the matrix product and of
// attention against the portable reference order (bit for bit) and against double-precision
// Eigen references (within the error the reduction order allows).
#include <Eigen/Dense>
#include <algorithm>
#include <bit>
#include <cmath>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <iterator>
#include <limits>
#include <optional>
#include <random>
#include <span>
#include <string>
#include <utility>
#include <vector>

#include "random_model.hpp"
#include "specdec/cpu/kernels.hpp"
#include "specdec/model/quant_block_layouts.hpp"
#include "specdec/model/quants.hpp"
#include "specdec/model/random_blocks.hpp"
#include "specdec_test.hpp"

namespace {

using namespace specdec;
using cpu::Isa;

std::vector<Isa> supported_isas() {
  std::vector<Isa> out;
  for (Isa isa : {Isa::portable, Isa::avx2, Isa::avx512, Isa::amx})
    if (cpu::isa_supported(isa)) out.push_back(isa);
  return out;
}

/// The CPU features under which each kernel that reads the rows16 layout runs here: the detected
/// ones (AVX512-VNNI on Isa avx512 / amx, AVX-VNNI or AVX2 on Isa avx2), then, where the CPU has
/// them, without AVX-VNNI, and without any VNNI (the AVX-512 and AVX2 kernels of CPUs without
/// it).
std::vector<std::pair<std::string, cpu::CpuFeatures>> rows16_feature_sets() {
  const cpu::CpuFeatures detected = cpu::cpu_features();
  std::vector<std::pair<std::string, cpu::CpuFeatures>> out = {{"detected features", detected}};
  cpu::CpuFeatures f = detected;
  if (f.avx_vnni) {
    f.avx_vnni = false;
    out.emplace_back("without AVX-VNNI", f);
  }
  if (f.avx512_vnni) {
    f.avx512_vnni = false;
    out.emplace_back("without VNNI", f);
  }
  return out;
}

/// Calls f(name of the feature set) once under each of rows16_feature_sets(), then restores the
/// detected features (also when a REQUIRE inside f fails).
template <class Fn>
void for_each_rows16_kernel(Fn&& f) {
  struct Restore {
    Restore() = default;
    Restore(const Restore&) = delete;
    Restore& operator=(const Restore&) = delete;
    ~Restore() { cpu::set_cpu_features_override(std::nullopt); }
  } restore;
  for (const auto& [name, features] : rows16_feature_sets()) {
    cpu::set_cpu_features_override(features);
    f(name);
  }
}

std::vector<float> normal_floats(std::size_t n, unsigned seed, float scale = 1.0f) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, scale);
  std::vector<float> v(n);
  for (auto& x : v) x = normal(rng);
  return v;
}

/// A weight matrix in `dtype` with its own storage.
struct TestMatrix {
  std::vector<std::byte> bytes;
  cpu::MatrixRef ref;
  std::vector<float> dequantized;  // [rows][cols], the values the kernels see
};

TestMatrix make_matrix(DType dtype, std::size_t rows, std::size_t cols, unsigned seed) {
  TestMatrix m;
  m.bytes = test::encode(normal_floats(rows * cols, seed, 0.5f), dtype);
  m.ref = cpu::MatrixRef::of(Tensor{"w", dtype, {rows, cols}, m.bytes.data(), m.bytes.size()});
  m.dequantized.resize(rows * cols);
  for (std::size_t r = 0; r < rows; ++r)
    cpu::dequantize_row(m.ref, r, m.dequantized.data() + r * cols);
  return m;
}

std::vector<float> run_matmul(Isa isa, const TestMatrix& m, const std::vector<float>& x,
                              std::size_t n, std::size_t row_begin = 0, std::size_t row_end = 0) {
  if (row_end == 0) row_end = m.ref.rows;
  cpu::PackedInput packed;
  packed.pack(isa, m.ref.dtype, x.data(), n, m.ref.cols, m.ref.cols);
  std::vector<float> y(n * m.ref.rows, std::numeric_limits<float>::quiet_NaN());
  cpu::matmul(isa, m.ref, packed, row_begin, row_end, y.data(), m.ref.rows);
  return y;
}

bool bitwise_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

/// Whether (isa, dtype) reads the activations as bf16 (AMX tiles or AVX512_BF16 rows): paths with
/// no portable twin.
bool bf16_activations(Isa isa, DType dtype, std::size_t cols) {
  const cpu::InputFormat f = cpu::input_format(isa, dtype, cols);
  return f == cpu::InputFormat::bf16_tiles || f == cpu::InputFormat::bf16_rows;
}

/// The values the activations become for (isa, dtype): bf16-rounded on AMX and AVX512_BF16,
/// Q8_0-quantised for Q8_0 weights (dequantised back), else unchanged.
std::vector<float> effective_activations(Isa isa, DType dtype, const std::vector<float>& x,
                                         std::size_t cols) {
  std::vector<float> out = x;
  if (bf16_activations(isa, dtype, cols)) {
    for (auto& v : out) v = bf16_to_fp32(fp32_to_bf16(v));
  } else if (dtype == DType::q8_0) {
    const std::size_t n = x.size() / cols;
    std::vector<std::byte> q(cols / 32 * 34);
    for (std::size_t t = 0; t < n; ++t) {
      quant::quantize(DType::q8_0, std::span<const float>(x.data() + t * cols, cols), q);
      const cpu::MatrixRef row{DType::q8_0, q.data(), 1, cols, q.size()};
      cpu::dequantize_row(row, 0, out.data() + t * cols);
    }
  }
  return out;
}

}  // namespace

TEST_CASE("f16 and bf16 conversions round to nearest even like the hardware", "[cpu][kernels]") {
  // Every f16 value converts to f32 exactly and back unchanged (NaNs stay NaN).
  for (std::uint32_t h = 0; h < 65536; ++h) {
    const float f = fp16_to_fp32(static_cast<std::uint16_t>(h));
    if (std::isnan(f)) {
      CHECK(std::isnan(fp16_to_fp32(fp32_to_fp16(f))));
      continue;
    }
    REQUIRE(fp32_to_fp16(f) == h);
  }
  // Known roundings: 1 + 2^-11 is halfway between 1 and 1 + 2^-10 (ties to even: 1);
  // 65520 rounds to infinity; 2^-25 (half the smallest subnormal) ties to 0, 3 * 2^-26 up.
  CHECK(fp32_to_fp16(1.0f + std::ldexp(1.0f, -11)) == 0x3c00);
  CHECK(fp32_to_fp16(1.0f + 3 * std::ldexp(1.0f, -11)) == 0x3c02);
  CHECK(fp32_to_fp16(65520.0f) == 0x7c00);
  CHECK(fp32_to_fp16(65519.0f) == 0x7bff);
  CHECK(fp32_to_fp16(std::ldexp(1.0f, -25)) == 0x0000);
  CHECK(fp32_to_fp16(3 * std::ldexp(1.0f, -26)) == 0x0001);
  CHECK(fp32_to_fp16(-2.0f) == 0xc000);
  CHECK(fp32_to_bf16(1.0f + std::ldexp(1.0f, -8)) == 0x3f80);      // tie to even
  CHECK(fp32_to_bf16(1.0f + 3 * std::ldexp(1.0f, -8)) == 0x3f82);  // tie to even (up)
  CHECK(bf16_to_fp32(0xc040) == -3.0f);

  // The F16C path (KV cache) agrees with the portable one on random and special values.
  std::vector<float> values = normal_floats(4096, 7, 1000.0f);
  for (float v :
       {0.0f, -0.0f, 65504.0f, 65520.0f, 1e-8f, -6.1e-5f, std::numeric_limits<float>::infinity()})
    values.push_back(v);
  for (Isa isa : supported_isas()) {
    std::vector<std::uint16_t> a(values.size()), b(values.size());
    cpu::f32_to_f16_row(isa, values.data(), a.data(), values.size());
    cpu::f32_to_f16_row(Isa::portable, values.data(), b.data(), values.size());
    CHECK(a == b);
  }
}

TEST_CASE("exp_f32 is within 2 ulp and every Isa's SwiGLU agrees bitwise", "[cpu][kernels]") {
  std::vector<float> xs;
  for (float x = -87.0f; x <= 88.0f; x += 0.0137f) xs.push_back(x);
  for (float x : xs) {
    const double exact = std::exp(static_cast<double>(x));
    const float got = cpu::exp_f32(x);
    const double ulp = std::ldexp(1.0, std::ilogb(static_cast<float>(exact)) - 23);
    REQUIRE(std::fabs(got - exact) <= 2 * ulp);
  }
  CHECK(cpu::exp_f32(-100.0f) == 0.0f);
  CHECK(cpu::exp_f32(0.0f) == 1.0f);
  CHECK(std::isfinite(cpu::exp_f32(1000.0f)));
  CHECK(std::isnan(cpu::exp_f32(std::numeric_limits<float>::quiet_NaN())));

  const std::vector<float> gate = normal_floats(1001, 3, 4.0f), up = normal_floats(1001, 4);
  std::vector<float> reference(gate.size());
  cpu::swiglu(Isa::portable, gate.data(), up.data(), reference.data(), gate.size());
  for (std::size_t i = 0; i < gate.size(); ++i) {
    const double silu = gate[i] / (1.0 + std::exp(-static_cast<double>(gate[i])));
    REQUIRE(std::fabs(reference[i] - silu * up[i]) <= 1e-6 * (1 + std::fabs(silu * up[i])));
  }
  for (Isa isa : supported_isas()) {
    std::vector<float> out(gate.size());
    cpu::swiglu(isa, gate.data(), up.data(), out.data(), gate.size());
    INFO(cpu::isa_name(isa));
    CHECK(bitwise_equal(out, reference));
    CHECK(cpu::sum_squares(isa, gate.data(), gate.size()) ==
          cpu::sum_squares(Isa::portable, gate.data(), gate.size()));
  }
}

TEST_CASE("matmul: every Isa and dtype, tails, token counts", "[cpu][kernels]") {
  // Shapes: rows not a multiple of 16 or 32, columns with a tail after the last 16 (fma paths).
  struct Shape {
    std::size_t rows, cols;
  };
  for (DType dtype : {DType::f32, DType::f16, DType::bf16, DType::q8_0}) {
    for (Shape shape : {Shape{37, 64}, Shape{70, 96}, Shape{48, 53}, Shape{32, 160}}) {
      if (dtype == DType::q8_0 && shape.cols % 32 != 0) continue;
      const TestMatrix m = make_matrix(dtype, shape.rows, shape.cols, 11);
      for (std::size_t n : {1, 2, 3, 5, 8, 16, 17, 35}) {
        const std::vector<float> x = normal_floats(n * shape.cols, static_cast<unsigned>(100 + n));
        const std::vector<float> portable = run_matmul(Isa::portable, m, x, n);
        for (Isa isa : supported_isas()) {
          INFO(dtype_name(dtype) << " [" << shape.rows << ", " << shape.cols << "] n=" << n << " "
                                 << cpu::isa_name(isa));
          const std::vector<float> y = run_matmul(isa, m, x, n);

          // Against a double-precision product of the values the kernel multiplies.
          const std::vector<float> xe = effective_activations(isa, dtype, x, shape.cols);
          using Matrix = Eigen::Matrix<double, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>;
          const Matrix W =
              Eigen::Map<
                  const Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>>(
                  m.dequantized.data(), shape.rows, shape.cols)
                  .cast<double>();
          const Matrix X =
              Eigen::Map<
                  const Eigen::Matrix<float, Eigen::Dynamic, Eigen::Dynamic, Eigen::RowMajor>>(
                  xe.data(), n, shape.cols)
                  .cast<double>();
          const Matrix Y = X * W.transpose();
          const Matrix absY = X.cwiseAbs() * W.cwiseAbs().transpose();
          for (std::size_t t = 0; t < n; ++t)
            for (std::size_t r = 0; r < shape.rows; ++r) {
              // float accumulation error bound, generous: cols * eps * sum |w x|
              const double bound = 2e-7 * static_cast<double>(shape.cols) * absY(t, r) + 1e-30;
              REQUIRE(std::fabs(y[t * shape.rows + r] - Y(t, r)) <= bound);
            }

          // Bitwise equal to the portable order, except BF16 with bf16 activations.
          if (!bf16_activations(isa, dtype, shape.cols)) CHECK(bitwise_equal(y, portable));

          // Batch invariance and row-range invariance: each token alone, rows in two ranges.
          std::vector<float> pieced(n * shape.rows);
          for (std::size_t t = 0; t < n; ++t) {
            const std::vector<float> xt(x.begin() + t * shape.cols,
                                        x.begin() + (t + 1) * shape.cols);
            const std::size_t split = 32 * ((t % 2) + 0);
            cpu::PackedInput packed;
            packed.pack(isa, dtype, xt.data(), 1, shape.cols, shape.cols);
            std::vector<float> row(shape.rows);
            cpu::matmul(isa, m.ref, packed, 0, std::min(split, shape.rows), row.data(), shape.rows);
            cpu::matmul(isa, m.ref, packed, std::min(split, shape.rows), shape.rows, row.data(),
                        shape.rows);
            std::copy(row.begin(), row.end(), pieced.begin() + t * shape.rows);
          }
          CHECK(bitwise_equal(pieced, y));
        }
      }
    }
  }
}

namespace {

/// The quantised types of the integer kernels (Q8_0 also has its own test of -128 quants below).
constexpr DType integer_types[] = {DType::q8_0, DType::q4_0,   DType::q4_1, DType::q5_0,
                                   DType::q5_1, DType::iq4_nl, DType::q2_k, DType::q3_k,
                                   DType::q4_k, DType::q5_k,   DType::q6_k, DType::iq4_xs};

/// Random blocks of `dtype` (random quants and sub-block scales, finite binary16 scales).
TestMatrix random_matrix(DType dtype, std::size_t rows, std::size_t cols, unsigned seed) {
  TestMatrix m;
  m.bytes.resize(rows * dtype_row_bytes(dtype, cols, "test"));
  random_blocks(dtype, m.bytes, seed, 0.5f);
  m.ref = cpu::MatrixRef::of(Tensor{"w", dtype, {rows, cols}, m.bytes.data(), m.bytes.size()});
  m.dequantized.resize(rows * cols);
  for (std::size_t r = 0; r < rows; ++r)
    cpu::dequantize_row(m.ref, r, m.dequantized.data() + r * cols);
  return m;
}

/// The activations a kernel multiplies: the packed quants times their block scale, in double.
std::vector<double> dequantized_input(const cpu::PackedInput& p) {
  const std::size_t block = p.format() == cpu::InputFormat::q8_k_rows ? 256 : 32;
  std::vector<double> x(p.n() * p.cols());
  for (std::size_t t = 0; t < p.n(); ++t)
    for (std::size_t k = 0; k < p.cols(); ++k)
      x[t * p.cols() + k] =
          static_cast<double>(p.q8()[t * p.cols() + k]) * p.q8_scales()[(t * p.cols() + k) / block];
  return x;
}

}  // namespace

TEST_CASE("integer kernels: every quantised type and Isa, ragged shapes, n = 1..16",
          "[cpu][kernels]") {
  struct Shape {
    std::size_t rows, cols;
    bool every_n;  // n = 1..16, else 1, 5 and 16 (the wide shapes)
  };
  for (DType dtype : integer_types) {
    const std::size_t block = dtype_block_elems(dtype);
    // One block; several; the 0.5B's widths 896 (32-blocks only) and 4864; rows that are not
    // multiples of the 8- and 16-row groups.
    std::vector<Shape> shapes = {{17, block, true}, {37, 3 * block, true}, {5, 4864, false}};
    if (block == 32) shapes.push_back({23, 896, false});
    for (const Shape& shape : shapes) {
      const TestMatrix m =
          random_matrix(dtype, shape.rows, shape.cols, static_cast<unsigned>(shape.cols));
      const std::size_t n_max = 16;
      const std::vector<float> x =
          normal_floats(n_max * shape.cols, static_cast<unsigned>(shape.rows), 2.0f);
      std::vector<std::size_t> ns = {1, 5, 16};
      if (shape.every_n)
        for (std::size_t n = 2; n <= 15; ++n)
          if (n != 5) ns.push_back(n);
      // Each token alone on the portable kernel: the reference rows.
      std::vector<float> single(n_max * shape.rows);
      for (std::size_t t = 0; t < n_max; ++t) {
        cpu::PackedInput packed;
        packed.pack(Isa::portable, dtype, x.data() + t * shape.cols, 1, shape.cols, shape.cols);
        cpu::matmul(Isa::portable, m.ref, packed, 0, shape.rows, single.data() + t * shape.rows,
                    shape.rows);
        // Against a double-precision product of the model layer's dequantised weights (bit-exact
        // with gguf.quants) and the dequantised packed activations. The kernel's float steps
        // (the scale products, float(isum), one or two fmas per block) each round once.
        const std::vector<double> xe = dequantized_input(packed);
        const std::size_t blocks = shape.cols / block;
        for (std::size_t r = 0; r < shape.rows; ++r) {
          double exact = 0, magnitude = 0;
          for (std::size_t k = 0; k < shape.cols; ++k) {
            const double p = m.dequantized[r * shape.cols + k] * xe[k];
            exact += p;
            magnitude += std::fabs(p);
          }
          INFO(dtype_name(dtype) << " [" << shape.rows << ", " << shape.cols << "] t=" << t
                                 << " r=" << r);
          REQUIRE(std::fabs(single[t * shape.rows + r] - exact) <=
                  1e-6 * static_cast<double>(blocks + 4) * magnitude + 1e-30);
        }
      }
      for (Isa isa : supported_isas()) {
        for (std::size_t n : ns) {
          INFO(dtype_name(dtype) << " [" << shape.rows << ", " << shape.cols << "] n=" << n << " "
                                 << cpu::isa_name(isa));
          const std::vector<float> xn(x.begin(),
                                      x.begin() + static_cast<std::ptrdiff_t>(n * shape.cols));
          // In row ranges that start and end inside the 8- and 16-row groups.
          cpu::PackedInput packed;
          packed.pack(isa, dtype, xn.data(), n, shape.cols, shape.cols);
          std::vector<float> y(n * shape.rows, std::numeric_limits<float>::quiet_NaN());
          for (std::size_t r0 = 0; r0 < shape.rows; r0 += 13)
            cpu::matmul(isa, m.ref, packed, r0, std::min(shape.rows, r0 + 13), y.data(),
                        shape.rows);
          // Bitwise the portable kernel's single-token rows: equal across instruction sets and
          // batch invariant at once.
          CHECK(std::memcmp(y.data(), single.data(), y.size() * sizeof(float)) == 0);
        }
      }
    }
  }
}

TEST_CASE("repacked weights (rows16): the same rows and bitwise the same products",
          "[cpu][kernels]") {
  std::vector<Isa> isas;
  for (Isa isa : supported_isas())
    if (cpu::repack_helps(isa, DType::q4_k)) isas.push_back(isa);
  if (isas.empty()) {
    WARN("SKIPPED: no AVX2 (only the portable kernels, which read the file's layout)");
    return;
  }
  for (DType dtype : integer_types) {
    const std::size_t block = dtype_block_elems(dtype);
    CHECK(cpu::repack_helps(isas.front(), dtype));
    // Groups of 16 whole and cut (17, 37, 5 rows), one block and several; then each row range
    // of 13 starts and ends inside a group.
    for (const auto& [rows, cols] : std::vector<std::pair<std::size_t, std::size_t>>{
             {17, block}, {37, 3 * block}, {5, 4864}, {48, 2 * block}}) {
      INFO(dtype_name(dtype) << " [" << rows << ", " << cols << "]");
      const TestMatrix m = random_matrix(dtype, rows, cols, static_cast<unsigned>(rows + cols));
      const std::size_t bytes = cpu::repacked_bytes(isas.front(), m.ref);
      REQUIRE(bytes == (rows + 15) / 16 * 16 * m.ref.row_bytes);
      const cpu::WeightBuffer buffer(bytes);
      const cpu::MatrixRef w = cpu::repack_weights(isas.front(), m.ref, buffer.data());
      CHECK(w.layout == cpu::WeightLayout::rows16);
      CHECK(cpu::repacked_bytes(isas.front(), w) == 0);  // already repacked
      // Every row reads back as the same values.
      std::vector<float> row(cols);
      for (std::size_t r = 0; r < rows; ++r) {
        cpu::dequantize_row(w, r, row.data());
        REQUIRE(std::memcmp(row.data(), m.dequantized.data() + r * cols, cols * sizeof(float)) ==
                0);
      }
      const std::vector<float> x = normal_floats(16 * cols, static_cast<unsigned>(cols), 2.0f);
      // The file layout's kernel of the detected features is the reference of every kernel that
      // reads the layout.
      std::vector<std::vector<float>> file(isas.size() * 17);
      for (std::size_t i = 0; i < isas.size(); ++i)
        for (std::size_t n = 1; n <= 16; ++n) {
          cpu::PackedInput in;
          in.pack(isas[i], dtype, x.data(), n, cols, cols);
          file[i * 17 + n].resize(n * rows);
          cpu::matmul(isas[i], m.ref, in, 0, rows, file[i * 17 + n].data(), rows);
        }
      for_each_rows16_kernel([&](const std::string& features_name) {
        for (std::size_t i = 0; i < isas.size(); ++i)
          for (std::size_t n = 1; n <= 16; ++n) {
            INFO("n=" << n << " " << cpu::isa_name(isas[i]) << ", " << features_name);
            cpu::PackedInput in;
            in.pack(isas[i], dtype, x.data(), n, cols, cols);
            std::vector<float> repacked(n * rows, std::nanf(""));
            for (std::size_t r0 = 0; r0 < rows; r0 += 13)
              cpu::matmul(isas[i], w, in, r0, std::min(rows, r0 + 13), repacked.data(), rows);
            REQUIRE(bitwise_equal(repacked, file[i * 17 + n]));
          }
      });
      // The portable kernels do not read the layout: refused by name.
      cpu::PackedInput in;
      in.pack(Isa::portable, dtype, x.data(), 1, cols, cols);
      std::vector<float> y(rows);
      CHECK_THROWS_WITH(cpu::matmul(Isa::portable, w, in, 0, rows, y.data(), rows),
                        Catch::Contains("repacked for the SIMD kernels, called on portable"));
    }
  }
  // The float types are read as they are: no copy.
  for (DType dtype : {DType::f16, DType::bf16, DType::f32}) {
    const TestMatrix m = make_matrix(dtype, 16, 64, 7);
    CHECK(cpu::repacked_bytes(isas.front(), m.ref) == 0);
  }
  // Every SIMD level reads rows16; portable never.
  CHECK(cpu::repack_helps(Isa::avx2, DType::q4_k) == cpu::isa_supported(Isa::avx2));
  CHECK_FALSE(cpu::repack_helps(Isa::portable, DType::q4_k));
}

TEST_CASE("q8_k_rows packing: the documented quantisation, AVX-512 bytes equal to portable",
          "[cpu][kernels]") {
  const std::size_t cols = 768, n = 4, blocks = cols / 256;
  std::vector<float> x = normal_floats(n * cols, 12, 3.0f);
  x[0] = 1.0f + std::ldexp(1.0f, -8);
  x[1] = std::numeric_limits<float>::infinity();  // its block quantises to zeros
  x[300] = std::numeric_limits<float>::quiet_NaN();
  x[301] = -0.0f;
  x[302] = 1e-40f;
  for (std::size_t k = 0; k < 256; ++k) x[cols + k] = static_cast<float>(k % 64) - 31.5f;  // ties
  for (std::size_t k = 256; k < 512; ++k) x[2 * cols + k] = 0.0f;  // an all-zero block
  for (std::size_t k = 512; k < 768; ++k) x[3 * cols + k] = k % 2 ? 1.0f : -1.0f;  // +-127
  cpu::PackedInput portable;
  portable.pack(Isa::portable, DType::q4_k, x.data(), n, cols, cols);
  REQUIRE(portable.format() == cpu::InputFormat::q8_k_rows);
  for (std::size_t t = 0; t < n; ++t)
    for (std::size_t b = 0; b < blocks; ++b) {
      INFO("t=" << t << " b=" << b);
      const float* xb = x.data() + t * cols + b * 256;
      float amax = 0;
      for (std::size_t j = 0; j < 256; ++j)
        if (std::fabs(xb[j]) > amax) amax = std::fabs(xb[j]);  // NaN compares false
      const float d = amax / 127.0f;
      REQUIRE(std::memcmp(&portable.q8_scales()[t * blocks + b], &d, 4) == 0);
      const std::int8_t* q = portable.q8() + t * cols + b * 256;
      const std::int16_t* sums = portable.q8_sums() + (t * blocks + b) * 24;
      for (std::size_t j = 0; j < 256; ++j) {
        const float v = xb[j] * (d != 0 ? 1.0f / d : 0.0f);
        REQUIRE(q[j] == (std::isnan(v) ? 0 : static_cast<int>(std::round(v))));
      }
      for (std::size_t i = 0; i < 16; ++i) {
        int sum = 0;
        for (std::size_t j = 0; j < 16; ++j) sum += q[16 * i + j];
        REQUIRE(sums[i] == sum);
      }
      for (std::size_t i = 0; i < 8; ++i) REQUIRE(sums[16 + i] == sums[2 * i] + sums[2 * i + 1]);
    }
  for (Isa isa : supported_isas()) {
    cpu::PackedInput packed;
    packed.prepare(isa, DType::q6_k, n, cols);
    // In column ranges of one block, as the Transformer's packing tasks may split it.
    for (std::size_t c = 0; c < cols; c += packed.column_granule())
      packed.pack_columns(x.data(), cols, c, std::min(cols, c + packed.column_granule()));
    INFO(cpu::isa_name(isa));
    CHECK(std::memcmp(packed.q8(), portable.q8(), n * cols) == 0);
    CHECK(std::memcmp(packed.q8_scales(), portable.q8_scales(), n * blocks * 4) == 0);
    CHECK(std::memcmp(packed.q8_sums(), portable.q8_sums(), n * blocks * 24 * 2) == 0);
  }
}

TEST_CASE("AVX-512 row packing holds exactly the portable conversions", "[cpu][kernels]") {
  if (!cpu::isa_supported(Isa::avx512)) {
    WARN("SKIPPED: no AVX-512");
    return;
  }
  const std::size_t cols = 160, n = 5, blocks = cols / 32;
  std::vector<float> x = normal_floats(n * cols, 9, 3.0f);
  // Ties, specials, and exact halves for the Q8_0 rounding (as the AMX packing test).
  x[0] = 1.0f + std::ldexp(1.0f, -8);
  x[1] = std::numeric_limits<float>::infinity();
  x[2] = std::numeric_limits<float>::quiet_NaN();
  x[3] = -0.0f;
  x[4] = 1e-40f;                                           // subnormal: rounds like any other value
  x[cols + 40] = std::numeric_limits<float>::quiet_NaN();  // in the second 16 of a Q8_0 block
  for (std::size_t k = 0; k < 32; ++k) x[2 * cols + k] = static_cast<float>(k) - 15.5f;
  for (std::size_t k = 64; k < 96; ++k) x[3 * cols + k] = 0.0f;  // an all-zero block
  for (std::size_t k = 96; k < 128; ++k) x[4 * cols + k] = k % 2 ? 1.0f : -1.0f;  // +-127
  cpu::PackedInput portable;
  portable.pack(Isa::portable, DType::q8_0, x.data(), n, cols, cols);
  for (Isa isa : {Isa::avx512, Isa::amx}) {  // both pack the q8_0_rows layout with AVX-512
    if (!cpu::isa_supported(isa)) continue;
    INFO(cpu::isa_name(isa));
    for (DType dtype : {DType::q8_0, DType::q4_0}) {
      cpu::PackedInput wide;
      wide.pack(isa, dtype, x.data(), n, cols, cols);
      REQUIRE(wide.format() == cpu::InputFormat::q8_0_rows);
      CHECK(std::memcmp(wide.q8(), portable.q8(), n * cols) == 0);
      CHECK(std::memcmp(wide.q8_scales(), portable.q8_scales(), n * blocks * sizeof(float)) == 0);
      CHECK(std::memcmp(wide.q8_offsets(), portable.q8_offsets(), n * blocks * 4) == 0);
    }
  }
  for (std::size_t i = 0; i < n * blocks; ++i) {
    std::int32_t sum = 0;
    for (std::size_t j = 0; j < 32; ++j) sum += portable.q8()[i * 32 + j];
    REQUIRE(portable.q8_offsets()[i] == -128 * sum);
  }
  if (cpu::input_format(Isa::avx512, DType::bf16, cols) == cpu::InputFormat::bf16_rows) {
    cpu::PackedInput bf16;
    bf16.pack(Isa::avx512, DType::bf16, x.data(), n, cols, cols);
    for (std::size_t i = 0; i < n * cols; ++i) REQUIRE(bf16.bf16()[i] == fp32_to_bf16(x[i]));
  }
}

TEST_CASE("Q8_0 on every kernel is bitwise the documented order, -128 quants included",
          "[cpu][kernels]") {
  // The SIMD levels here, all of which also read the repacked layout.
  std::vector<Isa> isas;
  for (Isa isa : supported_isas())
    if (isa != Isa::portable) isas.push_back(isa);
  Isa vnni_isa = Isa::portable;
  for (Isa isa : isas)
    if (cpu::repack_helps(isa, DType::q8_0)) vnni_isa = isa;
  // Weight blocks written directly (quantize_row_q8_0 never produces -128): random quants over
  // the whole int8 range, every 7th one -128 and every 11th 127, random f16 scales.
  std::mt19937 rng(21);
  std::uniform_int_distribution<int> quant(-128, 127);
  std::uniform_real_distribution<float> scale(1e-3f, 2e-2f);
  for (std::size_t cols : {32, 64, 96, 160, 1024, 4096}) {
    for (std::size_t rows : {1, 5, 16, 17, 31, 33, 64}) {
      const std::size_t blocks = cols / 32, row_bytes = blocks * 34;
      std::vector<std::byte> bytes(rows * row_bytes);
      std::size_t counter = 0;
      for (std::size_t b = 0; b < rows * blocks; ++b) {
        std::byte* block = bytes.data() + b * 34;
        const std::uint16_t d16 = fp32_to_fp16(scale(rng));
        std::memcpy(block, &d16, 2);
        for (std::size_t j = 0; j < 32; ++j, ++counter) {
          const int q = counter % 7 == 0 ? -128 : counter % 11 == 0 ? 127 : quant(rng);
          block[2 + j] = static_cast<std::byte>(static_cast<std::int8_t>(q));
        }
      }
      const cpu::MatrixRef w{DType::q8_0, bytes.data(), rows, cols, row_bytes};
      std::optional<cpu::WeightBuffer> buffer;
      std::vector<const cpu::MatrixRef*> layouts = {&w};
      cpu::MatrixRef packed_w = w;
      if (vnni_isa != Isa::portable) {
        buffer.emplace(cpu::repacked_bytes(vnni_isa, w));
        packed_w = cpu::repack_weights(vnni_isa, w, buffer->data());
        layouts.push_back(&packed_w);
      }
      for (std::size_t n : {1, 2, 7, 16, 17, 33}) {
        // Some tokens saturate whole blocks at +-127 (x = +-amax), one block is all zero.
        std::vector<float> x = normal_floats(n * cols, static_cast<unsigned>(cols + rows + n));
        for (std::size_t k = 0; k < 32; ++k) {
          x[k] = k % 2 ? 3.0f : -3.0f;
          if (n > 1) x[cols + k] = 0.0f;
        }
        INFO("[" << rows << ", " << cols << "] n=" << n);
        std::vector<float> expected(n * rows);
        cpu::PackedInput portable;
        portable.pack(Isa::portable, DType::q8_0, x.data(), n, cols, cols);
        cpu::matmul(Isa::portable, w, portable, 0, rows, expected.data(), rows);
        // The documented order written out (kernels.hpp): exact block sums of the signed quants,
        // acc = fma(float(isum_b), d_w * d_x, acc) over the blocks.
        for (std::size_t r = 0; r < rows; ++r)
          for (std::size_t t = 0; t < n; ++t) {
            float acc = 0.0f;
            for (std::size_t b = 0; b < blocks; ++b) {
              const std::byte* block = bytes.data() + r * row_bytes + b * 34;
              std::uint16_t d16;
              std::memcpy(&d16, block, 2);
              std::int32_t isum = 0;
              for (std::size_t j = 0; j < 32; ++j)
                isum +=
                    static_cast<std::int8_t>(block[2 + j]) * portable.q8()[t * cols + b * 32 + j];
              acc = std::fma(static_cast<float>(isum),
                             fp16_to_fp32(d16) * portable.q8_scales()[t * blocks + b], acc);
            }
            REQUIRE(std::memcmp(&acc, &expected[t * rows + r], sizeof acc) == 0);
          }
        // Every kernel of this CPU, at every SIMD level.
        for_each_rows16_kernel([&](const std::string& features_name) {
          for (Isa isa : isas) {
            INFO(cpu::isa_name(isa) << ", " << features_name);
            cpu::PackedInput packed;
            packed.pack(isa, DType::q8_0, x.data(), n, cols, cols);
            // Each layout, in row ranges that start and end inside groups of 16.
            for (const cpu::MatrixRef* m : layouts) {
              if (m->layout == cpu::WeightLayout::rows16 && !cpu::repack_helps(isa, DType::q8_0))
                continue;
              std::vector<float> got(n * rows, std::nanf(""));
              for (std::size_t r0 = 0; r0 < rows; r0 += 13)
                cpu::matmul(isa, *m, packed, r0, std::min(rows, r0 + 13), got.data(), rows);
              CHECK(bitwise_equal(got, expected));
            }
          }
        });
      }
    }
  }
}

TEST_CASE("integer kernels at their int16 limits: extreme weights against +-127 activations",
          "[cpu][kernels]") {
  // Every quant byte of every block set to one value (0xFF: the largest unsigned weight of every
  // type, -1 for Q8_0; 0x80: -128 for Q8_0; 0x00: IQ4's -127), the binary16 factors then set to
  // a normal value, against activations all +127 or all -127 after quantisation. The AVX2
  // kernels add pairs of products in saturating int16 (vpmaddubsw) and, for the super-blocks,
  // several registers' pair sums in int16 before vpmaddwd: here every such sum is at its
  // largest, so a bound taken one step too far (kernels_quant_vnni.hpp, int16_registers())
  // saturates or wraps and differs from the portable kernel's plain int32 sums.
  using namespace quant;
  struct Factors {
    DType type;
    std::size_t at[2];  // binary16 factors (d, and m or dmin; SIZE_MAX: none)
  };
  constexpr std::size_t none = SIZE_MAX;
  const Factors types[] = {
      {DType::q8_0, {0, none}},
      {DType::q4_0, {0, none}},
      {DType::q4_1, {0, 2}},
      {DType::q5_0, {0, none}},
      {DType::q5_1, {0, 2}},
      {DType::iq4_nl, {0, none}},
      {DType::q2_k, {offsetof(BlockQ2_K, d), offsetof(BlockQ2_K, dmin)}},
      {DType::q3_k, {offsetof(BlockQ3_K, d), none}},
      {DType::q4_k, {offsetof(BlockQ4_K, d), offsetof(BlockQ4_K, dmin)}},
      {DType::q5_k, {offsetof(BlockQ5_K, d), offsetof(BlockQ5_K, dmin)}},
      {DType::q6_k, {offsetof(BlockQ6_K, d), none}},
      {DType::iq4_xs, {offsetof(BlockIQ4XS, d), none}},
  };
  STATIC_REQUIRE(std::size(types) == std::size(integer_types));
  const std::size_t rows = 21, cols = 512, n = 3;
  for (const Factors& f : types) {
    const std::size_t block_bytes = dtype_block_bytes(f.type);
    const std::size_t row_bytes = cols / dtype_block_elems(f.type) * block_bytes;
    for (unsigned char fill : {0xFF, 0x80, 0x00}) {
      std::vector<std::byte> bytes(rows * row_bytes, std::byte{fill});
      const std::uint16_t factor = fp32_to_fp16(1.0f / 1024);
      for (std::size_t b = 0; b < bytes.size() / block_bytes; ++b)
        for (std::size_t at : f.at)
          if (at != none) std::memcpy(bytes.data() + b * block_bytes + at, &factor, 2);
      const cpu::MatrixRef file{f.type, bytes.data(), rows, cols, row_bytes};
      for (float sign : {1.0f, -1.0f}) {
        INFO(dtype_name(f.type) << " bytes 0x" << std::hex << static_cast<int>(fill) << std::dec
                                << ", activations " << sign * 127);
        const std::vector<float> x(n * cols, sign);
        cpu::PackedInput portable;
        portable.pack(Isa::portable, f.type, x.data(), n, cols, cols);
        std::vector<float> expected(n * rows);
        cpu::matmul(Isa::portable, file, portable, 0, rows, expected.data(), rows);
        for_each_rows16_kernel([&](const std::string& features_name) {
          for (Isa isa : supported_isas()) {
            if (!cpu::repack_helps(isa, f.type)) continue;
            INFO(cpu::isa_name(isa) << ", " << features_name);
            const cpu::WeightBuffer buffer(cpu::repacked_bytes(isa, file));
            const cpu::MatrixRef w = cpu::repack_weights(isa, file, buffer.data());
            cpu::PackedInput packed;
            packed.pack(isa, f.type, x.data(), n, cols, cols);
            for (const cpu::MatrixRef* m : {&file, &w}) {
              std::vector<float> got(n * rows, std::nanf(""));
              cpu::matmul(isa, *m, packed, 0, rows, got.data(), rows);
              CHECK(bitwise_equal(got, expected));
            }
          }
        });
      }
    }
  }
}

TEST_CASE("BF16 on AVX512_BF16: close to a double product and batch invariant", "[cpu][kernels]") {
  if (!cpu::isa_supported(Isa::avx512) || !cpu::cpu_features().avx512_bf16 ||
      cpu::input_format(Isa::avx512, DType::bf16, 64) != cpu::InputFormat::bf16_rows) {
    WARN("SKIPPED: no AVX512_BF16");
    return;
  }
  for (std::size_t cols : {32, 53, 96, 2048, 4096}) {
    for (std::size_t rows : {1, 7, 37, 64}) {
      const TestMatrix m = make_matrix(DType::bf16, rows, cols, static_cast<unsigned>(cols + rows));
      const std::vector<float> x = normal_floats(16 * cols, static_cast<unsigned>(cols * rows));
      // The 1-token results in three row ranges (cutting the 8- and 4-row register blocks).
      std::vector<float> single(16 * rows);
      for (std::size_t t = 0; t < 16; ++t) {
        cpu::PackedInput packed;
        packed.pack(Isa::avx512, DType::bf16, x.data() + t * cols, 1, cols, cols);
        const std::size_t a = std::min<std::size_t>(rows, 3 + t % 5), b = std::min(rows, a + 9);
        for (auto [r0, r1] : {std::pair{std::size_t{0}, a}, std::pair{a, b}, std::pair{b, rows}})
          cpu::matmul(Isa::avx512, m.ref, packed, r0, r1, single.data() + t * rows, rows);
      }
      // Against a double-precision product of the bf16-rounded activations and the weights.
      for (std::size_t t = 0; t < 16; ++t)
        for (std::size_t r = 0; r < rows; ++r) {
          double exact = 0, magnitude = 0;
          for (std::size_t k = 0; k < cols; ++k) {
            const double p = static_cast<double>(m.dequantized[r * cols + k]) *
                             bf16_to_fp32(fp32_to_bf16(x[t * cols + k]));
            exact += p;
            magnitude += std::fabs(p);
          }
          INFO("[" << rows << ", " << cols << "] t=" << t << " r=" << r);
          REQUIRE(std::fabs(single[t * rows + r] - exact) <=
                  2e-7 * static_cast<double>(cols) * magnitude + 1e-30);
        }
      // Row t of every n-token call is bitwise the 1-token result.
      for (std::size_t n = 1; n <= 16; ++n) {
        const std::vector<float> xn(x.begin(), x.begin() + static_cast<std::ptrdiff_t>(n * cols));
        const std::vector<float> y = run_matmul(Isa::avx512, m, xn, n);
        INFO("[" << rows << ", " << cols << "] n=" << n);
        CHECK(std::memcmp(y.data(), single.data(), n * rows * sizeof(float)) == 0);
      }
    }
  }
}

TEST_CASE("AMX activation tiles hold exactly the portable bf16 conversions", "[cpu][kernels]") {
  if (!cpu::isa_supported(Isa::amx)) {
    WARN("SKIPPED: no AMX");
    return;
  }
  const std::size_t cols = 96, n = 19;
  std::vector<float> x = normal_floats(n * cols, 8, 3.0f);
  // Ties and specials.
  x[0] = 1.0f + std::ldexp(1.0f, -8);
  x[1] = std::numeric_limits<float>::infinity();
  x[2] = std::numeric_limits<float>::quiet_NaN();
  x[3] = -0.0f;
  cpu::PackedInput bf16;
  bf16.pack(Isa::amx, DType::bf16, x.data(), n, cols, cols);
  REQUIRE(bf16.format() == cpu::InputFormat::bf16_tiles);
  for (std::size_t t = 0; t < n; ++t) {
    for (std::size_t k = 0; k < cols; ++k) {
      const std::size_t m16 = std::min<std::size_t>(16, n - t / 16 * 16);  // tokens in the chunk
      const std::uint16_t got = bf16.bf16()[(t / 16) * (cols / 32) * 512 + (k / 32) * 32 * m16 +
                                            ((k % 32) / 2) * 2 * m16 + (t % 16) * 2 + k % 2];
      REQUIRE(got == fp32_to_bf16(x[t * cols + k]));
    }
  }
}

TEST_CASE("attention: every Isa bitwise equal to portable and close to a double reference",
          "[cpu][kernels]") {
  // head_dim: a multiple of 16 or not, the kernels' register blocks (up to 16 blocks of 16) and
  // beyond; heads: one, or a group sharing the K/V rows (the AVX-512 kernel's passes of H heads
  // and their remainders).
  constexpr std::size_t kHeads = 7;
  for (bool f16 : {false, true}) {
    for (std::size_t head_dim : {16, 24, 64, 80, 128, 256, 272}) {
      for (std::size_t count : {1, 7, 16, 33}) {
        const std::size_t stride = head_dim + 8;  // rows further apart than one head, like a cache
        const std::vector<float> queries = normal_floats(kHeads * head_dim, 1),
                                 kf = normal_floats(count * stride, 2),
                                 vf = normal_floats(count * stride, 3);
        const std::span<const float> q(queries.data(), head_dim);  // head 0
        std::vector<std::uint16_t> k16(kf.size()), v16(vf.size());
        cpu::f32_to_f16_row(Isa::portable, kf.data(), k16.data(), kf.size());
        cpu::f32_to_f16_row(Isa::portable, vf.data(), v16.data(), vf.size());
        // Heads [h0, h0 + heads) in one call: their outputs, one after the other.
        auto run_heads = [&](Isa isa, std::size_t h0, std::size_t heads) {
          std::vector<float> scores(heads * count), out(heads * head_dim);
          cpu::AttentionArgs a;
          a.heads = heads;
          a.q = queries.data() + h0 * head_dim;
          a.k = f16 ? static_cast<const void*>(k16.data()) : kf.data();
          a.v = f16 ? static_cast<const void*>(v16.data()) : vf.data();
          a.kv_f16 = f16;
          a.count = count;
          a.head_dim = head_dim;
          a.row_stride = stride;
          a.scale = 1.0f / std::sqrt(static_cast<float>(head_dim));
          a.scores = scores.data();
          a.out = out.data();
          cpu::attend(isa, a);
          return out;
        };
        auto run = [&](Isa isa) { return run_heads(isa, 0, 1); };
        const std::vector<float> reference = run(Isa::portable);
        // double-precision softmax attention over the same (possibly f16-rounded) values
        std::vector<double> s(count), expected(head_dim, 0.0);
        auto kval = [&](std::size_t i) { return f16 ? fp16_to_fp32(k16[i]) : kf[i]; };
        auto vval = [&](std::size_t i) { return f16 ? fp16_to_fp32(v16[i]) : vf[i]; };
        double max = -1e300, sum = 0;
        for (std::size_t j = 0; j < count; ++j) {
          for (std::size_t d = 0; d < head_dim; ++d)
            s[j] += static_cast<double>(q[d]) * kval(j * stride + d);
          s[j] /= std::sqrt(static_cast<double>(head_dim));
          max = std::max(max, s[j]);
        }
        for (std::size_t j = 0; j < count; ++j) sum += s[j] = std::exp(s[j] - max);
        for (std::size_t j = 0; j < count; ++j)
          for (std::size_t d = 0; d < head_dim; ++d)
            expected[d] += s[j] / sum * vval(j * stride + d);
        INFO("f16 " << f16 << " head_dim " << head_dim << " count " << count);
        for (std::size_t d = 0; d < head_dim; ++d)
          REQUIRE(std::fabs(reference[d] - expected[d]) <= 1e-5);
        // Every head alone on the portable path, then each Isa on groups of 1 .. kHeads heads.
        std::vector<float> alone;
        for (std::size_t h = 0; h < kHeads; ++h) {
          const std::vector<float> one = run_heads(Isa::portable, h, 1);
          alone.insert(alone.end(), one.begin(), one.end());
        }
        for (Isa isa : supported_isas()) {
          INFO(cpu::isa_name(isa));
          CHECK(bitwise_equal(run(isa), reference));
          for (std::size_t heads = 1; heads <= kHeads; ++heads) {
            INFO("heads " << heads);
            const std::vector<float> group = run_heads(isa, kHeads - heads, heads);
            CHECK(bitwise_equal(group, std::vector<float>(alone.end() - static_cast<std::ptrdiff_t>(
                                                                            heads * head_dim),
                                                          alone.end())));
          }
        }
      }
    }
  }
}

TEST_CASE("MatrixRef rejects malformed tensors with their name", "[cpu][kernels]") {
  std::vector<std::byte> bytes(64 * 34);
  CHECK_THROWS_WITH(
      cpu::MatrixRef::of(Tensor{"blk.0.ffn_up.weight", DType::q4_k, {2, 256}, bytes.data(), 144}),
      Catch::Contains("blk.0.ffn_up.weight") && Catch::Contains("bytes"));
  CHECK_THROWS_WITH(
      cpu::MatrixRef::of(Tensor{"w", DType::q8_0, {2, 48}, bytes.data(), bytes.size()}),
      Catch::Contains("whole blocks"));
  CHECK_THROWS_WITH(cpu::MatrixRef::of(Tensor{"w", DType::f32, {4, 64}, bytes.data(), 100}),
                    Catch::Contains("bytes"));
}
