// The skinny GEMM and the split-K attention against CPU references, plus the skinny GEMM's
// batch invariance (bitwise) and the attention's independence of the split count.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "kernels/attention.hpp"
#include "kernels/skinny_gemm.hpp"
#include "reference.hpp"
#include "support.hpp"

namespace {

using specdec::cuda::KvType;
using specdec::cuda::WeightType;
using specdec::test::DeviceBuffer;
using specdec::test::for_each_order;
using specdec::test::random_floats;
using specdec::test::require_close;
namespace ref = specdec::test::ref;
namespace k = specdec::cuda::kernels;

}  // namespace

TEST_CASE("skinny GEMM matches the reference", "[cuda-emu][kernels][gemm]") {
  struct Shape {
    int out, in;
  };
  for_each_order([] {
    for (WeightType type : {WeightType::f16, WeightType::bf16}) {
      for (const Shape s :
           {Shape{37, 64}, Shape{130, 72}, Shape{9, 520}, Shape{20, 100}, Shape{5, 3}}) {
        for (int n : {1, 2, 3, 5, 9, 16}) {
          const int warps = n % 3 == 0 ? 1 : (n % 2 == 0 ? 2 : 4);
          INFO("out " << s.out << " in " << s.in << " n " << n << " warps " << warps << " bf16 "
                      << (type == WeightType::bf16));
          const auto w_bits =
              ref::to_bits(random_floats(static_cast<std::size_t>(s.out) * s.in, 70u + s.in), type);
          const auto x = random_floats(static_cast<std::size_t>(n) * s.in, 71u + n);
          DeviceBuffer<std::uint16_t> d_w(w_bits);
          DeviceBuffer<float> d_x(x);
          DeviceBuffer<float> d_y(static_cast<std::size_t>(n) * s.out);
          k::skinny_gemm(type, d_w.get(), d_x.get(), d_y.get(), n, s.out, s.in, nullptr, warps);
          const auto expected = ref::gemm_xwT(ref::from_bits(w_bits, type), x, n, s.out, s.in);
          require_close(d_y.download(), expected, 1e-5,
                        1e-5 * std::sqrt(static_cast<double>(s.in)));
        }
      }
    }
  });
}

TEST_CASE("skinny GEMM is batch-invariant bit for bit", "[cuda-emu][kernels][gemm]") {
  // Token rows computed alone, in batches of every size and at every position of the batch give
  // the same bits.
  for (const int in : {256, 72, 100}) {  // one vector path with full and partial chunks, one scalar
    const int out = 24;
    const int max_n = k::kSkinnyMaxTokens;
    const auto w_bits =
        ref::to_bits(random_floats(static_cast<std::size_t>(out) * in, 80u), WeightType::f16);
    const auto x = random_floats(static_cast<std::size_t>(max_n) * in, 81u, -4.0f, 4.0f);
    DeviceBuffer<std::uint16_t> d_w(w_bits);
    DeviceBuffer<float> d_x(x);
    DeviceBuffer<float> d_full(static_cast<std::size_t>(max_n) * out);
    k::skinny_gemm(WeightType::f16, d_w.get(), d_x.get(), d_full.get(), max_n, out, in, nullptr);
    const auto full = d_full.download();
    for (int n = 1; n <= max_n; ++n) {
      for (int first = 0; first + n <= max_n; first += n) {
        INFO("in " << in << " batch of " << n << " starting at token " << first);
        DeviceBuffer<float> d_sub(
            std::vector<float>(x.begin() + static_cast<std::ptrdiff_t>(first) * in,
                               x.begin() + static_cast<std::ptrdiff_t>(first + n) * in));
        DeviceBuffer<float> d_y(static_cast<std::size_t>(n) * out);
        k::skinny_gemm(WeightType::f16, d_w.get(), d_sub.get(), d_y.get(), n, out, in, nullptr,
                       1 + n % 4);
        const auto y = d_y.download();
        REQUIRE(std::memcmp(y.data(), full.data() + static_cast<std::size_t>(first) * out,
                            y.size() * sizeof(float)) == 0);
      }
    }
  }
}

namespace {

struct AttentionCase {
  int n, n_heads, n_kv, hd, start;
};

// Runs the kernel on random q and a random cache of kv_len = start + n positions; returns
// (device output, reference output).
std::pair<std::vector<float>, std::vector<float>> run_attention(const AttentionCase& c, KvType kv,
                                                                int chunk, int extra_splits,
                                                                int warps) {
  const int splits = k::attention_splits(c.start + c.n, chunk) + extra_splits;
  const int capacity = c.start + c.n + 5;
  const auto q =
      random_floats(static_cast<std::size_t>(c.n) * c.n_heads * c.hd, 90u + c.hd, -2.0f, 2.0f);
  const std::size_t cache_elems = static_cast<std::size_t>(c.n_kv) * capacity * c.hd;
  auto kf = random_floats(cache_elems, 91u + c.start, -2.0f, 2.0f);
  auto vf = random_floats(cache_elems, 92u + c.start);
  DeviceBuffer<float> d_k32, d_v32;
  DeviceBuffer<std::uint16_t> d_k16, d_v16;
  if (kv == KvType::f16) {
    const auto kb = ref::to_bits(kf, WeightType::f16);
    const auto vb = ref::to_bits(vf, WeightType::f16);
    kf = ref::from_bits(kb, WeightType::f16);  // the reference sees the stored values
    vf = ref::from_bits(vb, WeightType::f16);
    d_k16 = DeviceBuffer<std::uint16_t>(kb);
    d_v16 = DeviceBuffer<std::uint16_t>(vb);
  } else {
    d_k32 = DeviceBuffer<float>(kf);
    d_v32 = DeviceBuffer<float>(vf);
  }
  // Positions beyond kv_len hold NaN in the device cache: the kernel must not read them.
  for (int h = 0; h < c.n_kv; ++h) {
    for (int pos = c.start + c.n; pos < capacity; ++pos) {
      const std::size_t at = (static_cast<std::size_t>(h) * capacity + pos) * c.hd;
      if (kv == KvType::f16) {
        SPECDEC_CUDA_CHECK(cudaMemset(d_k16.get() + at, 0xFF, static_cast<std::size_t>(c.hd) * 2));
        SPECDEC_CUDA_CHECK(cudaMemset(d_v16.get() + at, 0xFF, static_cast<std::size_t>(c.hd) * 2));
      } else {
        SPECDEC_CUDA_CHECK(cudaMemset(d_k32.get() + at, 0xFF, static_cast<std::size_t>(c.hd) * 4));
        SPECDEC_CUDA_CHECK(cudaMemset(d_v32.get() + at, 0xFF, static_cast<std::size_t>(c.hd) * 4));
      }
    }
  }
  DeviceBuffer<float> d_q(q);
  DeviceBuffer<int> d_start(std::vector<int>{c.start});
  DeviceBuffer<float> d_out(q.size());
  DeviceBuffer<float> d_work(k::attention_workspace_floats(splits, c.n, c.n_heads, c.hd));

  k::AttentionParams p;
  p.q = d_q.get();
  p.kv_type = kv;
  p.k_cache = kv == KvType::f16 ? static_cast<const void*>(d_k16.get()) : d_k32.get();
  p.v_cache = kv == KvType::f16 ? static_cast<const void*>(d_v16.get()) : d_v32.get();
  p.capacity = capacity;
  p.start = d_start.get();
  p.n = c.n;
  p.n_heads = c.n_heads;
  p.n_kv = c.n_kv;
  p.head_dim = c.hd;
  p.scale = 1.0f / std::sqrt(static_cast<float>(c.hd));
  p.chunk = chunk;
  p.splits = splits;
  p.partial = d_work.get();
  p.out = d_out.get();
  k::attention(p, nullptr, warps);
  return {d_out.download(),
          ref::attention(q, kf, vf, c.n, c.n_heads, c.n_kv, c.hd, capacity, c.start, p.scale)};
}

}  // namespace

TEST_CASE("attention matches the reference (GQA, causal, split-K)",
          "[cuda-emu][kernels][attention]") {
  for_each_order([] {
    for (const AttentionCase c :
         {AttentionCase{1, 4, 2, 32, 0}, AttentionCase{1, 6, 2, 48, 70},
          AttentionCase{3, 8, 1, 64, 33}, AttentionCase{16, 2, 2, 32, 5},
          AttentionCase{4, 4, 4, 128, 40}, AttentionCase{2, 2, 1, 256, 9},
          AttentionCase{16, 8, 1, 40, 100}, AttentionCase{40, 4, 2, 32, 3}}) {
      for (KvType kv : {KvType::f16, KvType::f32}) {
        for (const auto& [chunk, extra] : {std::pair{256, 0}, std::pair{32, 0}, std::pair{64, 2}}) {
          const int warps = 1 + (c.n + chunk / 32 + extra) % 4;
          INFO("n " << c.n << " heads " << c.n_heads << "/" << c.n_kv << " hd " << c.hd << " start "
                    << c.start << " kv f16 " << (kv == KvType::f16) << " chunk " << chunk
                    << " empty splits " << extra << " warps " << warps);
          const auto [got, expected] = run_attention(c, kv, chunk, extra, warps);
          require_close(got, expected, 1e-4, 1e-5);
        }
      }
    }
  });
}

TEST_CASE("attention is batch-invariant bit for bit", "[cuda-emu][kernels][attention]") {
  // Token t of a call with n tokens at `start` gives the same bits as a call with that token alone
  // at start + t (same cache contents), with one split or several.
  const int n = 7, n_heads = 6, n_kv = 2, hd = 48, start = 60, capacity = 80;
  const auto q = random_floats(static_cast<std::size_t>(n) * n_heads * hd, 200u, -2.0f, 2.0f);
  const std::size_t cache_elems = static_cast<std::size_t>(n_kv) * capacity * hd;
  DeviceBuffer<std::uint16_t> d_k(
      ref::to_bits(random_floats(cache_elems, 201u, -2.0f, 2.0f), WeightType::f16));
  DeviceBuffer<std::uint16_t> d_v(ref::to_bits(random_floats(cache_elems, 202u), WeightType::f16));
  for (int chunk : {32, 128}) {
    auto run = [&](int first, int count) {
      DeviceBuffer<float> d_q(std::vector<float>(
          q.begin() + static_cast<std::ptrdiff_t>(first) * n_heads * hd,
          q.begin() + static_cast<std::ptrdiff_t>(first + count) * n_heads * hd));
      DeviceBuffer<int> d_start(std::vector<int>{start + first});
      const int splits = k::attention_splits(start + first + count, chunk);
      DeviceBuffer<float> d_work(k::attention_workspace_floats(splits, count, n_heads, hd));
      DeviceBuffer<float> d_out(static_cast<std::size_t>(count) * n_heads * hd);
      k::AttentionParams p;
      p.q = d_q.get();
      p.kv_type = KvType::f16;
      p.k_cache = d_k.get();
      p.v_cache = d_v.get();
      p.capacity = capacity;
      p.start = d_start.get();
      p.n = count;
      p.n_heads = n_heads;
      p.n_kv = n_kv;
      p.head_dim = hd;
      p.scale = 0.125f;
      p.chunk = chunk;
      p.splits = splits;
      p.partial = d_work.get();
      p.out = d_out.get();
      k::attention(p, nullptr, 2);
      return d_out.download();
    };
    const auto batch = run(0, n);
    for (int t = 0; t < n; ++t) {
      INFO("chunk " << chunk << " token " << t);
      const auto alone = run(t, 1);
      REQUIRE(std::memcmp(alone.data(), batch.data() + static_cast<std::size_t>(t) * n_heads * hd,
                          alone.size() * sizeof(float)) == 0);
    }
  }
}

TEST_CASE("attention split length", "[cuda-emu][kernels][attention]") {
  // TinyLlama-1.1B (4 KV heads) with a 2048-token cache: H100 (132 SMs), RTX 4090 (128 SMs).
  CHECK(k::attention_chunk(2048, 4, 132) == 128);  // 16 splits: 64 blocks at a full context
  CHECK(k::attention_chunk(32768, 4, 132) == 512);
  CHECK(k::attention_chunk(32768, 8, 128) == 1024);
  CHECK(k::attention_splits(2048, 128) == 16);
  CHECK(k::attention_splits(1, 128) == 1);
}
