// Harness of the skinny GEMM (cuda/kernels/skinny_gemm.cu): y = x W^T for n <= 16 tokens,
// every weight type the CUDA backend has kernels for (all of the model layer's DTypes), variants
// of warps per block and weight rows per lane (the kernel's automatic choice is
// skinny_rows_per_lane(out); every variant computes the same bits).
//
//   W  [out][in]  the type's blocks as a model file stores them (tests/cuda/random_weights.hpp)
//   x  [n][in]    f32 activations
//   y  [n][out]   f32
//
// Check: every output against the double-precision reference (tests/cuda/reference.hpp) on the
// weights dequantised by the model layer, within 1e-5 relative + 1e-5 sqrt(in) absolute (the
// kernel's f32 FMA chain). On large shapes a sample of rows is checked (the reference costs
// out x in x n MACs). Bandwidth: bytes = the weights (out x in x bytes per weight of the type)
// + x + y, read or written once.
//
//   cuda_dev_skinny_gemm [--check]     GPU: TinyLlama-1.1B and Qwen2.5-Coder-1.5B shapes
//   cuda_emu_dev_skinny_gemm           emulator: small shapes, checks only (ctest)
#include <cstdint>
#include <cstdlib>
#include <string>
#include <vector>

#include "harness.hpp"
#include "kernels/skinny_gemm.hpp"
#include "random_weights.hpp"
#include "reference.hpp"
#include "specdec/model/dtype.hpp"

namespace {

using specdec::DType;
namespace dev = specdec::cuda::dev;
namespace ref = specdec::test::ref;

/// The weights the kernel must compute with: the model layer's dequantisation of the blocks.
std::vector<float> decode(DType t, const std::vector<std::uint8_t>& bytes, int out, int in) {
  std::vector<float> w(static_cast<std::size_t>(out) * in);
  const std::size_t row_bytes = specdec::dtype_row_bytes(t, static_cast<std::size_t>(in), "W");
  for (int r = 0; r < out; ++r)
    specdec::dequantize(t, reinterpret_cast<const std::byte*>(bytes.data()) + r * row_bytes,
                        w.data() + static_cast<std::size_t>(r) * in, static_cast<std::size_t>(in));
  return w;
}

// ---------------------------------------------------------------- shapes and variants

struct Shape {
  const char* what;
  int out, in;
};

const std::vector<Shape> kGpuShapes = {
    {"TinyLlama QKV", 2560, 2048},      {"TinyLlama O", 2048, 2048},
    {"TinyLlama gate/up", 11264, 2048}, {"TinyLlama down", 2048, 5632},
    {"TinyLlama head", 32000, 2048},    {"Qwen2.5-1.5B head", 151936, 1536},
};
// (A shape runs for the types whose block size divides `in`.)
const std::vector<Shape> kEmulatedShapes = {{"small", 37, 256},
                                            {"long rows", 9, 1024},
                                            {"896-wide rows (32-blocks)", 5, 896},
                                            {"scalar path (in % 8 != 0)", 20, 100}};

/// Rows of the reference to compute: all of them on small shapes, 97 spread ones otherwise.
std::vector<int> rows_to_check(int out) {
  std::vector<int> rows;
  const int step = out <= 256 ? 1 : out / 97;
  for (int r = 0; r < out; r += step) rows.push_back(r);
  if (rows.back() != out - 1) rows.push_back(out - 1);
  return rows;
}

}  // namespace

int main(int argc, char** argv) {
  dev::Harness h(argc, argv, "skinny GEMM y = x W^T");
  const auto& shapes = dev::kEmulated ? kEmulatedShapes : kGpuShapes;
  const std::vector<int> ns =
      dev::kEmulated ? std::vector<int>{1, 3, 16} : std::vector<int>{1, 2, 4, 8, 16};
  struct Variant {
    int warps, rows_per_lane;
  };
  const std::vector<Variant> variants = dev::kEmulated
                                            ? std::vector<Variant>{{1, 1}, {4, 2}, {2, 4}}
                                            : std::vector<Variant>{{4, 1}, {4, 2}, {4, 4}, {8, 2}};

  // SPECDEC_DEV_TYPES=Q4_K,Q6_K runs only those types (the whole list takes minutes on a GPU,
  // most of them the CPU's: weights, references).
  const char* only = std::getenv("SPECDEC_DEV_TYPES");
  for (const DType type : specdec::all_dtypes()) {
    if (!specdec::cuda::kernels::has_weight_kernels(type)) continue;
    const std::string name = specdec::dtype_name(type);
    if (only != nullptr &&
        ("," + std::string(only) + ",").find("," + name + ",") == std::string::npos)
      continue;
    const double bytes_per_weight = static_cast<double>(specdec::dtype_block_bytes(type)) /
                                    static_cast<double>(specdec::dtype_block_elems(type));
    for (const Shape& s : shapes) {
      if (static_cast<std::size_t>(s.in) % specdec::dtype_block_elems(type) != 0) continue;
      const auto w_bytes = specdec::test::random_weights(
          type, static_cast<std::size_t>(s.out), static_cast<std::size_t>(s.in),
          70u + static_cast<std::uint32_t>(s.in), 0.5f);
      const std::vector<float> w = decode(type, w_bytes, s.out, s.in);
      dev::Buffer<std::uint8_t> d_w(w_bytes);
      for (const int n : ns) {
        const auto x = dev::random_floats(static_cast<std::size_t>(n) * s.in, 71u + n);
        dev::Buffer<float> d_x(x);
        dev::Buffer<float> d_y(static_cast<std::size_t>(n) * s.out);
        const std::vector<int> rows = rows_to_check(s.out);
        // The reference on the checked rows: expected[t][i] for row rows[i].
        std::vector<float> w_rows;
        for (const int r : rows)
          w_rows.insert(w_rows.end(), w.begin() + static_cast<std::ptrdiff_t>(r) * s.in,
                        w.begin() + static_cast<std::ptrdiff_t>(r + 1) * s.in);
        const auto expected = ref::gemm_xwT(w_rows, x, n, static_cast<int>(rows.size()), s.in);
        for (const auto [warps, rows_per_lane] : variants) {
          auto launch = [&] {
            specdec::cuda::kernels::skinny_gemm(type, d_w.get(), d_x.get(), d_y.get(), n, s.out,
                                                s.in, nullptr, warps, 0, rows_per_lane);
          };
          launch();
          const auto y = d_y.download();
          bool ok = true;
          double worst = 0;
          const double abs_bound = 1e-5 * std::sqrt(static_cast<double>(s.in));
          for (int t = 0; t < n; ++t) {
            for (std::size_t i = 0; i < rows.size(); ++i) {
              const double e = expected[static_cast<std::size_t>(t) * rows.size() + i];
              const double a = y[static_cast<std::size_t>(t) * s.out + rows[i]];
              const double err = std::abs(a - e);
              worst = std::max(worst, err);
              ok = ok && err <= abs_bound + 1e-5 * std::abs(e);
            }
          }
          const double ms = h.timing() ? dev::time_ms(launch) : 0.0;
          const double bytes =
              static_cast<double>(s.out) * s.in * bytes_per_weight + 4.0 * n * (s.in + s.out);
          h.row(name + " " + s.what + " " + std::to_string(s.out) + "x" + std::to_string(s.in) +
                    " n=" + std::to_string(n) + " warps=" + std::to_string(warps) +
                    " rows/lane=" + std::to_string(rows_per_lane),
                ok, dev::error_text(worst), ms, bytes);
        }
      }
    }
  }
  return h.finish();
}
