// The skinny GEMM (every weight type) and the split-K attention against CPU references, plus the
// skinny GEMM's exact order and batch invariance (bitwise) and the attention's independence of
// the split count.
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <limits>
#include <span>
#include <vector>

#include "kernels/attention.hpp"
#include "kernels/skinny_gemm.hpp"
#include "random_weights.hpp"
#include "reference.hpp"
#include "support.hpp"
#include "token_trees.hpp"

namespace {

using specdec::DType;
using specdec::KvType;
using specdec::test::DeviceBuffer;
using specdec::test::for_each_order;
using specdec::test::random_floats;
using specdec::test::require_close;
namespace ref = specdec::test::ref;
namespace k = specdec::cuda::kernels;

}  // namespace

namespace {

/// Every weight type, as DType.
std::vector<DType> all_types() {
  const auto t = specdec::all_dtypes();
  return {t.begin(), t.end()};
}

/// A row length of `blocks` blocks of t.
int cols_of(DType t, int blocks) {
  return blocks * static_cast<int>(specdec::dtype_block_elems(t));
}

/// Runs the skinny GEMM on random weights of type t and checks it against both references:
/// bitwise against the exact-order one, within rounding against the double-precision one.
/// rows: rows per lane (0: the kernel's choice for n).
void check_gemm(DType type, int out, int in, int n, int warps, std::uint32_t seed, int rows = 0) {
  INFO(specdec::dtype_name(type) << ": out " << out << " in " << in << " n " << n << " warps "
                                 << warps << " rows per lane " << rows);
  const auto bytes = specdec::test::random_weights(type, static_cast<std::size_t>(out),
                                                   static_cast<std::size_t>(in), seed);
  const auto w = specdec::test::dequantized(type, bytes, static_cast<std::size_t>(out),
                                            static_cast<std::size_t>(in));
  const auto x = random_floats(static_cast<std::size_t>(n) * in, seed + 1, -2.0f, 2.0f);
  DeviceBuffer<std::uint8_t> d_w(bytes);
  DeviceBuffer<float> d_x(x);
  DeviceBuffer<float> d_y(static_cast<std::size_t>(n) * out);
  k::skinny_gemm(type, d_w.get(), d_x.get(), d_y.get(), n, out, in, nullptr, warps, 0, rows);
  const auto got = d_y.download();
  // Float rows that are not whole 8-weight blocks are read element by element.
  const bool elementwise = specdec::is_float_dtype(type) && in % 8 != 0;
  const auto exact = ref::gemm_exact_order(type, w, x, n, out, in, elementwise);
  REQUIRE(std::memcmp(got.data(), exact.data(), got.size() * sizeof(float)) == 0);
  // f32 accumulation of `in` products of magnitude <= max|w| * 2: its rounding bound.
  double w_max = 0.0;
  for (const float v : w) w_max = std::max(w_max, std::abs(double{v}));
  require_close(got, ref::gemm_xwT(w, x, n, out, in), 1e-5, 2e-6 * w_max * static_cast<double>(in));
}

}  // namespace

TEST_CASE("skinny GEMM matches the references for every weight type", "[cuda-emu][kernels][gemm]") {
  // Ragged shapes: row counts that are not multiples of the rows per block (2 per warp and row
  // per lane), one block per row, several, and the 896 / 4864 widths of Qwen2.5-0.5B (896 is no
  // multiple of the K-quants' 256: only the 32-block and float types have it); 1, 2 and 4 rows
  // per lane.
  for_each_order([] {
    for (const DType type : all_types()) {
      const int block = static_cast<int>(specdec::dtype_block_elems(type));
      check_gemm(type, 5, cols_of(type, 1), 3, 2, 100, 4);
      check_gemm(type, 19, cols_of(type, 3), 16, 4, 101, 2);
      if (896 % block == 0) check_gemm(type, 7, 896, 2, 1, 102, 4);
      check_gemm(type, 3, 4864, 5, 2, 103, 1);
    }
  });
  // The float types' element-by-element path (rows not a multiple of 8).
  for (const DType type : {DType::f32, DType::f16, DType::bf16}) {
    check_gemm(type, 9, 37, 4, 1, 104, 4);
    check_gemm(type, 20, 100, 9, 2, 105, 2);
    check_gemm(type, 13, 100, 16, 1, 106, 1);
  }
}

TEST_CASE("skinny GEMM: every token count 1..16", "[cuda-emu][kernels][gemm]") {
  for (const DType type : all_types()) {
    for (int n = 1; n <= k::kSkinnyMaxTokens; ++n)
      check_gemm(type, 11, cols_of(type, 2), n, 1 + n % 4, 110 + static_cast<std::uint32_t>(n),
                 1 << (n % 3));
  }
}

TEST_CASE("skinny GEMM writes rows of a wider output (ldy)", "[cuda-emu][kernels][gemm]") {
  const int out = 6, in = 512, n = 3, ldy = 10, first = 4;
  const auto bytes = specdec::test::random_weights(DType::q4_k, out, in, 120);
  const auto w = specdec::test::dequantized(DType::q4_k, bytes, out, in);
  const auto x = random_floats(static_cast<std::size_t>(n) * in, 121);
  DeviceBuffer<std::uint8_t> d_w(bytes);
  DeviceBuffer<float> d_x(x);
  DeviceBuffer<float> d_y(static_cast<std::size_t>(n) * ldy);
  k::skinny_gemm(DType::q4_k, d_w.get(), d_x.get(), d_y.get() + first, n, out, in, nullptr, 2, ldy);
  const auto y = d_y.download();
  const auto exact = ref::gemm_exact_order(DType::q4_k, w, x, n, out, in, false);
  for (int t = 0; t < n; ++t) {
    for (int c = 0; c < ldy; ++c) {
      const float v = y[static_cast<std::size_t>(t) * ldy + c];
      if (c < first) {
        REQUIRE(std::isnan(v));  // untouched (DeviceBuffer's 0xFF fill)
      } else {
        REQUIRE(v == exact[static_cast<std::size_t>(t) * out + c - first]);
      }
    }
  }
}

TEST_CASE("skinny GEMM rejects invalid arguments", "[cuda-emu][kernels][gemm]") {
  DeviceBuffer<std::uint8_t> w(4096);
  DeviceBuffer<float> x(1024), y(1024);
  auto gemm = [&](DType type, int n, int out, int in, const void* wp, const float* xp,
                  int ldy = 0) {
    k::skinny_gemm(type, wp, xp, y.get(), n, out, in, nullptr, 4, ldy);
  };
  CHECK_THROWS_AS(gemm(DType::q4_k, 1, 2, 128, w.get(), x.get()), specdec::Error);  // half block
  CHECK_THROWS_AS(gemm(DType::q4_k, 1, 2, 256, w.get() + 8, x.get()), specdec::Error);
  CHECK_THROWS_AS(gemm(DType::q8_0, 1, 2, 32, w.get() + 1, x.get()), specdec::Error);
  CHECK_THROWS_AS(gemm(DType::q8_0, 1, 2, 32, w.get(), x.get() + 1), specdec::Error);
  CHECK_THROWS_AS(gemm(DType::q8_0, 0, 2, 32, w.get(), x.get()), specdec::Error);
  CHECK_THROWS_AS(gemm(DType::q8_0, 17, 2, 32, w.get(), x.get()), specdec::Error);
  CHECK_THROWS_AS(gemm(DType::q8_0, 1, 4, 32, w.get(), x.get(), 3), specdec::Error);
  CHECK_THROWS_AS(
      k::skinny_gemm(DType::q8_0, w.get(), x.get(), y.get(), 1, 2, 32, nullptr, 4, 0, 3),
      specdec::Error);
  for (const DType type : all_types()) CHECK(k::has_weight_kernels(type));
}

TEST_CASE("skinny GEMM is batch-invariant bit for bit", "[cuda-emu][kernels][gemm]") {
  // Token rows computed alone, in batches of every size and at every position of the batch give
  // the same bits, whatever the rows per lane (the full batch: 1; the others: 2, 4, automatic).
  struct Case {
    DType type;
    int in;
  };
  // F16 with one vector path with full and partial chunks and one element-wise; quantised types
  // of each family.
  for (const Case c :
       {Case{DType::f16, 256}, Case{DType::f16, 72}, Case{DType::f16, 100}, Case{DType::q4_k, 512},
        Case{DType::q6_k, 768}, Case{DType::q8_0, 96}, Case{DType::q5_1, 64}}) {
    const int in = c.in;
    const int out = 24;
    const int max_n = k::kSkinnyMaxTokens;
    const auto bytes = specdec::test::random_weights(c.type, out, static_cast<std::size_t>(in), 80);
    const auto x = random_floats(static_cast<std::size_t>(max_n) * in, 81u, -4.0f, 4.0f);
    DeviceBuffer<std::uint8_t> d_w(bytes);
    DeviceBuffer<float> d_x(x);
    DeviceBuffer<float> d_full(static_cast<std::size_t>(max_n) * out);
    k::skinny_gemm(c.type, d_w.get(), d_x.get(), d_full.get(), max_n, out, in, nullptr, 4, 0, 1);
    const auto full = d_full.download();
    for (int n = 1; n <= max_n; ++n) {
      for (int first = 0; first + n <= max_n; first += n) {
        INFO(specdec::dtype_name(c.type)
             << " in " << in << " batch of " << n << " starting at token " << first);
        DeviceBuffer<float> d_sub(
            std::vector<float>(x.begin() + static_cast<std::ptrdiff_t>(first) * in,
                               x.begin() + static_cast<std::ptrdiff_t>(first + n) * in));
        DeviceBuffer<float> d_y(static_cast<std::size_t>(n) * out);
        k::skinny_gemm(c.type, d_w.get(), d_sub.get(), d_y.get(), n, out, in, nullptr, 1 + n % 4, 0,
                       (n % 3) == 0 ? 0 : 1 << (n % 3));
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
    const auto kb = ref::to_bits(kf, DType::f16);
    const auto vb = ref::to_bits(vf, DType::f16);
    kf = ref::from_bits(kb, DType::f16);  // the reference sees the stored values
    vf = ref::from_bits(vb, DType::f16);
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
      ref::to_bits(random_floats(cache_elems, 201u, -2.0f, 2.0f), DType::f16));
  DeviceBuffer<std::uint16_t> d_v(ref::to_bits(random_floats(cache_elems, 202u), DType::f16));
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

TEST_CASE("attention over a token tree: each row bitwise the plain attention of its path",
          "[cuda-emu][kernels][attention][tree]") {
  // A tree's nodes sit in the slots after the prefix in node order. Row t (node first + t) must
  // give the bits of the plain attention of its path: a cache holding the prefix, then the path's
  // nodes at consecutive positions, and a call whose last row is that node. Prefixes that put the
  // tree across a tile (32 keys) and a split boundary, one split or several, f16 and f32 caches,
  // trees scored whole and in two parts (first > 0), up to 64 nodes (kMaxTreeNodes). Slots past
  // the tree hold NaN: never read.
  const int n_heads = 4, n_kv = 2, hd = 40;
  std::vector<std::vector<std::int32_t>> shapes = specdec::test::tree_shapes();
  for (auto& large : specdec::test::large_tree_shapes()) shapes.push_back(std::move(large));
  std::uint32_t seed = 300;
  for (const KvType kv : {KvType::f16, KvType::f32}) {
    for (const int prefix : {3, 27, 60}) {
      for (const int chunk : {32, 64}) {
        for (const auto& parents : shapes) {
          const int nodes = static_cast<int>(parents.size());
          const int capacity = prefix + nodes + 8;
          std::vector<int> depth(parents.size(), 0);
          for (std::size_t i = 0; i < parents.size(); ++i)
            depth[i] = parents[i] < 0 ? 0 : depth[static_cast<std::size_t>(parents[i])] + 1;
          const std::size_t cache_elems = static_cast<std::size_t>(n_kv) * capacity * hd;
          const auto kf = random_floats(cache_elems, ++seed, -2.0f, 2.0f);
          const auto vf = random_floats(cache_elems, ++seed);
          const auto q = random_floats(parents.size() * n_heads * hd, ++seed, -2.0f, 2.0f);
          const std::size_t row_floats = static_cast<std::size_t>(n_heads) * hd;
          // Runs the kernel over `cache` (K and V as f32 values; positions from `valid` on are
          // NaN) for `count` rows of q starting at slot `start`; with `tree`, a tree step.
          auto run = [&](const std::vector<float>& k_vals, const std::vector<float>& v_vals,
                         int valid, const std::vector<float>& q_rows, int start, int count,
                         const k::TreeRows* tree) {
            std::vector<float> kc = k_vals, vc = v_vals;
            for (int h = 0; h < n_kv; ++h)
              for (int pos = valid; pos < capacity; ++pos)
                for (int d = 0; d < hd; ++d) {
                  const std::size_t at = (static_cast<std::size_t>(h) * capacity + pos) * hd + d;
                  kc[at] = vc[at] = std::numeric_limits<float>::quiet_NaN();
                }
            DeviceBuffer<float> d_k32, d_v32;
            DeviceBuffer<std::uint16_t> d_k16, d_v16;
            if (kv == KvType::f16) {
              d_k16 = DeviceBuffer<std::uint16_t>(ref::to_bits(kc, DType::f16));
              d_v16 = DeviceBuffer<std::uint16_t>(ref::to_bits(vc, DType::f16));
            } else {
              d_k32 = DeviceBuffer<float>(kc);
              d_v32 = DeviceBuffer<float>(vc);
            }
            DeviceBuffer<float> d_q(q_rows);
            DeviceBuffer<int> d_start(std::vector<int>{start});
            const int splits = k::attention_splits(start + count, chunk);
            DeviceBuffer<float> d_work(k::attention_workspace_floats(splits, count, n_heads, hd));
            DeviceBuffer<float> d_out(static_cast<std::size_t>(count) * row_floats);
            DeviceBuffer<k::TreeRows> d_tree(1);
            if (tree != nullptr) d_tree.upload(std::span(tree, 1));
            k::AttentionParams p;
            p.q = d_q.get();
            p.kv_type = kv;
            p.k_cache = kv == KvType::f16 ? static_cast<const void*>(d_k16.get()) : d_k32.get();
            p.v_cache = kv == KvType::f16 ? static_cast<const void*>(d_v16.get()) : d_v32.get();
            p.capacity = capacity;
            p.start = d_start.get();
            p.n = count;
            p.n_heads = n_heads;
            p.n_kv = n_kv;
            p.head_dim = hd;
            p.scale = 0.15f;
            p.chunk = chunk;
            p.splits = splits;
            p.partial = d_work.get();
            p.out = d_out.get();
            p.tree = tree != nullptr ? d_tree.get() : nullptr;
            p.tree_nodes = tree != nullptr ? k::tree_staged_nodes(nodes) : 0;
            k::attention(p, nullptr, 2);
            return d_out.download();
          };
          for (const int first : {0, nodes / 2}) {
            k::TreeRows tree;
            tree.first = first;
            for (int t = 0; first + t < nodes; ++t) {
              const int node = first + t;
              tree.depth[t] = depth[static_cast<std::size_t>(node)];
              for (int a = node; a >= 0; a = parents[static_cast<std::size_t>(a)])
                tree.ancestor[t][depth[static_cast<std::size_t>(a)]] = static_cast<std::uint8_t>(a);
            }
            const int count = nodes - first;
            const std::vector<float> q_rows(
                q.begin() + static_cast<std::ptrdiff_t>(first * row_floats), q.end());
            const auto got = run(kf, vf, prefix + nodes, q_rows, prefix + first, count, &tree);
            for (int t = 0; t < count; ++t) {
              // The plain forward of the path: its nodes at prefix, prefix + 1, ...
              const int d = tree.depth[t];
              std::vector<float> kp = kf, vp = vf;
              std::vector<float> qp(static_cast<std::size_t>(d + 1) * row_floats, 0.0f);
              for (int e = 0; e <= d; ++e) {
                const int from = prefix + tree.ancestor[t][e];
                for (int h = 0; h < n_kv; ++h)
                  for (int x = 0; x < hd; ++x) {
                    const std::size_t base = static_cast<std::size_t>(h) * capacity;
                    kp[(base + prefix + e) * hd + x] = kf[(base + from) * hd + x];
                    vp[(base + prefix + e) * hd + x] = vf[(base + from) * hd + x];
                  }
              }
              std::copy_n(q_rows.begin() + static_cast<std::ptrdiff_t>(t * row_floats), row_floats,
                          qp.begin() + static_cast<std::ptrdiff_t>(d * row_floats));
              const auto plain = run(kp, vp, prefix + d + 1, qp, prefix, d + 1, nullptr);
              INFO("kv f16 " << (kv == KvType::f16) << " prefix " << prefix << " chunk " << chunk
                             << " tree of " << nodes << " first " << first << " node "
                             << first + t);
              REQUIRE(std::memcmp(got.data() + static_cast<std::size_t>(t) * row_floats,
                                  plain.data() + static_cast<std::size_t>(d) * row_floats,
                                  row_floats * sizeof(float)) == 0);
            }
          }
        }
      }
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
