// Harness of the attention kernel (cuda/kernels/attention.cu): causal GQA attention of n new
// tokens over a KV cache of kv_len positions, split over the key axis; variants: the KV cache type
// (f16, f32) and the warps per block.
//
//   q    [n][n_heads][head_dim]         f32, rotated
//   K, V [n_kv][capacity][head_dim]     f16 or f32 (capacity = kv_len here)
//   out  [n][n_heads * head_dim]        f32
//   work [splits][n][n_heads][hd + 2]   split-K partials (running max, sum, sum of p V)
//
// Check: against the double-precision reference (tests/cuda/reference.hpp) on the stored K/V
// values, within 1e-4 relative + 1e-5 absolute.
// Bandwidth: bytes = K and V of the kv_len positions (each read once per KV head) + q + out + the
// partials written and read back by the combine (2 x splits x n x n_heads x (hd + 2) x 4).
//
//   cuda_dev_attention [--check]     GPU: TinyLlama-1.1B and Qwen2.5-Coder-1.5B heads
//   cuda_emu_dev_attention           emulator: small shapes, checks only (ctest)
#include <cmath>
#include <cstdint>
#include <string>
#include <vector>

#include "harness.hpp"
#include "kernels/attention.hpp"
#include "reference.hpp"

namespace {

using specdec::DType;
using specdec::KvType;
namespace dev = specdec::cuda::dev;
namespace k = specdec::cuda::kernels;
namespace ref = specdec::test::ref;

struct Shape {
  const char* what;
  int n_heads, n_kv, head_dim, kv_len, n;
};

const std::vector<Shape> kGpuShapes = {
    {"TinyLlama decode", 32, 4, 64, 1024, 1},     {"TinyLlama verify", 32, 4, 64, 1024, 8},
    {"TinyLlama verify", 32, 4, 64, 1024, 16},    {"TinyLlama decode", 32, 4, 64, 2048, 1},
    {"Qwen2.5-1.5B decode", 12, 2, 128, 4096, 1}, {"Qwen2.5-1.5B verify", 12, 2, 128, 4096, 8},
};
const std::vector<Shape> kEmulatedShapes = {{"decode", 4, 2, 64, 100, 1},
                                            {"verify", 4, 2, 64, 100, 5},
                                            {"decode, split-K", 4, 2, 64, 300, 1},
                                            {"head_dim 128", 2, 1, 128, 40, 3}};

}  // namespace

int main(int argc, char** argv) {
  dev::Harness h(argc, argv, "attention (causal GQA, split-K)");
  const auto& shapes = dev::kEmulated ? kEmulatedShapes : kGpuShapes;
  const std::vector<int> warp_variants =
      dev::kEmulated ? std::vector<int>{1, 4} : std::vector<int>{2, 4};
  int multiprocessors = 1;
  SPECDEC_CUDA_CHECK(cudaDeviceGetAttribute(&multiprocessors, cudaDevAttrMultiProcessorCount, 0));

  for (const Shape& s : shapes) {
    const int capacity = s.kv_len;
    const int start = s.kv_len - s.n;  // the n new tokens are the last positions
    const int chunk = k::attention_chunk(capacity, s.n_kv, multiprocessors);
    const int splits = k::attention_splits(s.kv_len, chunk);
    const auto q = dev::random_floats(static_cast<std::size_t>(s.n) * s.n_heads * s.head_dim,
                                      90u + static_cast<std::uint32_t>(s.head_dim), -2.0f, 2.0f);
    const std::size_t cache = static_cast<std::size_t>(s.n_kv) * capacity * s.head_dim;
    const auto k_values = dev::random_floats(cache, 91u, -2.0f, 2.0f);
    const auto v_values = dev::random_floats(cache, 92u);
    dev::Buffer<float> d_q(q);
    dev::Buffer<int> d_start(std::vector<int>{start});
    dev::Buffer<float> d_out(q.size());
    dev::Buffer<float> d_work(std::max<std::size_t>(
        k::attention_workspace_floats(splits, s.n, s.n_heads, s.head_dim), 1));
    for (const KvType kv : {KvType::f16, KvType::f32}) {
      // The reference sees the stored values.
      std::vector<float> kf = k_values;
      std::vector<float> vf = v_values;
      std::vector<std::uint16_t> k16, v16;
      if (kv == KvType::f16) {
        k16 = ref::to_bits(kf, DType::f16);
        v16 = ref::to_bits(vf, DType::f16);
        kf = ref::from_bits(k16, DType::f16);
        vf = ref::from_bits(v16, DType::f16);
      }
      dev::Buffer<std::uint16_t> d_k16(k16), d_v16(v16);
      dev::Buffer<float> d_k32(kv == KvType::f32 ? kf : std::vector<float>{});
      dev::Buffer<float> d_v32(kv == KvType::f32 ? vf : std::vector<float>{});
      const float scale = 1.0f / std::sqrt(static_cast<float>(s.head_dim));
      const auto expected =
          ref::attention(q, kf, vf, s.n, s.n_heads, s.n_kv, s.head_dim, capacity, start, scale);
      for (const int warps : warp_variants) {
        k::AttentionParams p;
        p.q = d_q.get();
        p.kv_type = kv;
        p.k_cache = kv == KvType::f16 ? static_cast<const void*>(d_k16.get()) : d_k32.get();
        p.v_cache = kv == KvType::f16 ? static_cast<const void*>(d_v16.get()) : d_v32.get();
        p.capacity = capacity;
        p.start = d_start.get();
        p.n = s.n;
        p.n_heads = s.n_heads;
        p.n_kv = s.n_kv;
        p.head_dim = s.head_dim;
        p.scale = scale;
        p.chunk = chunk;
        p.splits = splits;
        p.partial = d_work.get();
        p.out = d_out.get();
        auto launch = [&] { k::attention(p, nullptr, warps); };
        launch();
        const auto out = d_out.download();
        bool ok = true;
        for (std::size_t i = 0; i < out.size(); ++i)
          ok = ok && std::abs(out[i] - expected[i]) <= 1e-5 + 1e-4 * std::abs(expected[i]);
        const double error = dev::scaled_error(out, expected);
        const double ms = h.timing() ? dev::time_ms(launch) : 0.0;
        const double kv_bytes = 2.0 * s.n_kv * s.kv_len * s.head_dim * (kv == KvType::f16 ? 2 : 4);
        const double io_bytes = 2.0 * 4 * q.size();
        const double partial_bytes =
            splits > 1 ? 2.0 * 4 * splits * s.n * s.n_heads * (s.head_dim + 2) : 0.0;
        h.row(std::string(s.what) + " " + std::to_string(s.n_heads) + "/" + std::to_string(s.n_kv) +
                  " hd" + std::to_string(s.head_dim) + " kv=" + std::to_string(s.kv_len) +
                  " n=" + std::to_string(s.n) + (kv == KvType::f16 ? " f16" : " f32") +
                  " splits=" + std::to_string(splits) + " warps=" + std::to_string(warps),
              ok, dev::error_text(error), ms, kv_bytes + io_bytes + partial_bytes);
      }
    }
  }
  return h.finish();
}
