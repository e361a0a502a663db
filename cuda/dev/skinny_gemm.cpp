// Harness of the skinny GEMM (cuda/kernels/skinny_gemm.cu): y = x W^T for n <= 16 tokens,
// every weight format of the CUDA backend (kFormats), several block sizes (variants).
//
//   W  [out][in]  the weight format's encoding (16-bit: f16 / bf16)
//   x  [n][in]    f32 activations
//   y  [n][out]   f32
//
// Check: every output against the double-precision reference (tests/cuda/reference.hpp) on the
// decoded weights, within 1e-5 relative + 1e-5 sqrt(in) absolute (the kernel's f32 FMA chain).
// On large shapes a sample of rows is checked (the reference costs out x in x n MACs).
// Bandwidth: bytes = the weights (out x in x bytes per weight) + x + y, read or written once.
//
//   cuda_dev_skinny_gemm [--check]     GPU: TinyLlama-1.1B and Qwen2.5-Coder-1.5B shapes
//   cuda_emu_dev_skinny_gemm           emulator: small shapes, checks only (ctest)
#include <cstdint>
#include <string>
#include <vector>

#include "harness.hpp"
#include "kernels/skinny_gemm.hpp"
#include "reference.hpp"

namespace {

using specdec::cuda::WeightType;
namespace dev = specdec::cuda::dev;
namespace ref = specdec::test::ref;

// ---------------------------------------------------------------- weight formats
// Adding a weight type is one line here: its WeightType, its bytes per weight (for the
// bandwidth), its encoder from f32 and its decoder back (what the kernel must compute with).

template <WeightType T>
std::vector<std::uint8_t> encode_16bit(const std::vector<float>& w) {
  const std::vector<std::uint16_t> bits = ref::to_bits(w, T);
  std::vector<std::uint8_t> bytes(bits.size() * 2);
  std::memcpy(bytes.data(), bits.data(), bytes.size());
  return bytes;
}
template <WeightType T>
std::vector<float> decode_16bit(const std::vector<std::uint8_t>& bytes) {
  std::vector<std::uint16_t> bits(bytes.size() / 2);
  std::memcpy(bits.data(), bytes.data(), bytes.size());
  return ref::from_bits(bits, T);
}

struct Format {
  const char* name;
  WeightType type;
  double bytes_per_weight;
  std::vector<std::uint8_t> (*encode)(const std::vector<float>&);
  std::vector<float> (*decode)(const std::vector<std::uint8_t>&);
};

const Format kFormats[] = {
    {"f16", WeightType::f16, 2.0, encode_16bit<WeightType::f16>, decode_16bit<WeightType::f16>},
    {"bf16", WeightType::bf16, 2.0, encode_16bit<WeightType::bf16>, decode_16bit<WeightType::bf16>},
};

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
const std::vector<Shape> kEmulatedShapes = {
    {"small", 37, 64}, {"long rows", 9, 520}, {"scalar path (in % 8 != 0)", 20, 100}};

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
  const std::vector<int> warp_variants =
      dev::kEmulated ? std::vector<int>{1, 4} : std::vector<int>{2, 4, 8};

  for (const Format& f : kFormats) {
    for (const Shape& s : shapes) {
      const auto w_bytes = f.encode(dev::random_floats(static_cast<std::size_t>(s.out) * s.in,
                                                       70u + static_cast<std::uint32_t>(s.in)));
      const std::vector<float> w = f.decode(w_bytes);
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
        for (const int warps : warp_variants) {
          auto launch = [&] {
            specdec::cuda::kernels::skinny_gemm(f.type, d_w.get(), d_x.get(), d_y.get(), n, s.out,
                                                s.in, nullptr, warps);
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
              static_cast<double>(s.out) * s.in * f.bytes_per_weight + 4.0 * n * (s.in + s.out);
          h.row(std::string(f.name) + " " + s.what + " " + std::to_string(s.out) + "x" +
                    std::to_string(s.in) + " n=" + std::to_string(n) +
                    " warps=" + std::to_string(warps),
                ok, dev::error_text(worst), ms, bytes);
        }
      }
    }
  }
  return h.finish();
}
