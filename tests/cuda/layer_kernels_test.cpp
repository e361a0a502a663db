// The small per-layer kernels against their CPU references (reference.hpp), at several shapes
// including sizes that are not multiples of the vector width or the block size.
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

#include "host/blas.hpp"
#include "kernels/convert.hpp"
#include "kernels/embedding.hpp"
#include "kernels/rmsnorm.hpp"
#include "kernels/rope_kv.hpp"
#include "kernels/swiglu.hpp"
#include "random_weights.hpp"
#include "reference.hpp"
#include "support.hpp"

namespace {

using specdec::DType;
using specdec::KvType;
using specdec::RopeLayout;
using specdec::test::DeviceBuffer;
using specdec::test::for_each_order;
using specdec::test::random_floats;
using specdec::test::require_close;
namespace ref = specdec::test::ref;
namespace k = specdec::cuda::kernels;

}  // namespace

TEST_CASE("embedding gather: every weight type, bit for bit", "[cuda-emu][kernels]") {
  // Rows are dequantised on the device exactly as the model layer dequantises them.
  for_each_order([] {
    for (const DType type : specdec::all_dtypes()) {
      const int block = static_cast<int>(specdec::dtype_block_elems(type));
      std::vector<int> dims = {block, 3 * block};
      if (block == 1) dims = {64, 37, 288};  // float types: vector and element-wise paths
      for (const int dim : dims) {
        INFO(specdec::dtype_name(type) << " dim " << dim);
        const int vocab = 50;
        const auto table =
            specdec::test::random_weights(type, vocab, static_cast<std::size_t>(dim), 1u + dim);
        const auto values = specdec::test::dequantized(type, table, vocab, dim);
        const std::vector<specdec::token_t> tokens = {3, 0, 49, 3, 17, -1, 50};
        DeviceBuffer<std::uint8_t> d_table(table);
        DeviceBuffer<specdec::token_t> d_tokens(tokens);
        DeviceBuffer<float> out(tokens.size() * static_cast<std::size_t>(dim));
        k::embedding_gather(type, d_table.get(), vocab, dim, d_tokens.get(),
                            static_cast<int>(tokens.size()), out.get(), nullptr);
        const auto got = out.download();
        for (std::size_t t = 0; t < tokens.size(); ++t) {
          for (int i = 0; i < dim; ++i) {
            const float g = got[t * dim + i];
            if (tokens[t] < 0 || tokens[t] >= vocab) {
              REQUIRE(std::isnan(g));  // invalid ids (the host rejects them first) give NaN rows
            } else {
              const float e = values[static_cast<std::size_t>(tokens[t]) * dim + i];
              REQUIRE(std::memcmp(&g, &e, sizeof g) == 0);
            }
          }
        }
      }
    }
  });
}

TEST_CASE("dequantize_rows to F16 / BF16: every weight type, bit for bit", "[cuda-emu][kernels]") {
  // The prefill path's dequantisation: the model layer's value rounded to nearest even.
  for (const DType type : specdec::all_dtypes()) {
    const int block = static_cast<int>(specdec::dtype_block_elems(type));
    for (const int cols : {block == 1 ? 40 : 2 * block, block == 1 ? 13 : block}) {
      const int rows = 5;
      const auto bytes =
          specdec::test::random_weights(type, rows, static_cast<std::size_t>(cols), 7u);
      const auto values = specdec::test::dequantized(type, bytes, rows, cols);
      DeviceBuffer<std::uint8_t> d_w(bytes);
      for (const DType to : {DType::f16, DType::bf16}) {
        INFO(specdec::dtype_name(type) << " -> " << specdec::dtype_name(to) << ", cols " << cols);
        DeviceBuffer<std::uint16_t> d_out(values.size());
        k::dequantize_rows(type, d_w.get(), rows, cols, to, d_out.get(), nullptr);
        REQUIRE(d_out.download() == ref::to_bits(values, to));
      }
    }
  }
  DeviceBuffer<std::uint8_t> w(1024);
  DeviceBuffer<std::uint16_t> out(1024);
  CHECK_THROWS_AS(k::dequantize_rows(DType::q4_0, w.get(), 1, 48, DType::f16, out.get(), nullptr),
                  specdec::Error);  // not whole blocks
  CHECK_THROWS_AS(k::dequantize_rows(DType::q4_0, w.get(), 1, 32, DType::f32, out.get(), nullptr),
                  specdec::Error);  // not a 16-bit output
}

TEST_CASE("RMSNorm fused with the residual add", "[cuda-emu][kernels]") {
  for_each_order([] {
    for (int dim : {64, 100, 288}) {
      for (int threads : {32, 64, 128}) {
        for (bool residual : {false, true}) {
          INFO("dim " << dim << " threads " << threads << " residual " << residual);
          const int n = 3;
          auto h = random_floats(static_cast<std::size_t>(n) * dim, 10u + dim, -2.0f, 2.0f);
          const auto delta = random_floats(h.size(), 20u + dim);
          const auto weight = random_floats(static_cast<std::size_t>(dim), 30u + dim, 0.5f, 1.5f);
          DeviceBuffer<float> d_h(h);
          DeviceBuffer<float> d_delta(delta);
          DeviceBuffer<float> d_w(weight);
          DeviceBuffer<float> d_out(h.size());
          k::rmsnorm_residual(d_h.get(), residual ? d_delta.get() : nullptr, d_w.get(), 1e-5f, n,
                              dim, d_out.get(), threads, nullptr);
          std::vector<float> expected;
          ref::rmsnorm_residual(h, residual ? &delta : nullptr, weight, 1e-5f, n, dim, expected);
          require_close(d_h.download(), h, 0.0, 0.0);  // the residual sum is exact f32 addition
          require_close(d_out.download(), expected, 1e-5, 1e-6);
        }
      }
    }
  });
}

TEST_CASE("rotary embedding fused into the KV-cache write", "[cuda-emu][kernels]") {
  struct Shape {
    int n, n_heads, n_kv, hd;
    bool bias, qk_norm;
  };
  for_each_order([] {
    for (const Shape s : {Shape{1, 4, 2, 32, false, false}, Shape{3, 6, 2, 48, true, false},
                          Shape{5, 2, 1, 128, false, true}, Shape{2, 3, 3, 72, true, true}}) {
      for (RopeLayout layout : {RopeLayout::adjacent_pairs, RopeLayout::rotate_half}) {
        for (KvType kv : {KvType::f16, KvType::f32}) {
          INFO("n " << s.n << " heads " << s.n_heads << "/" << s.n_kv << " hd " << s.hd
                    << " layout " << specdec::rope_layout_name(layout) << " kv f16 "
                    << (kv == KvType::f16));
          const int width = (s.n_heads + 2 * s.n_kv) * s.hd;
          const int capacity = 40;
          const int start = 7;
          const auto qkv = random_floats(static_cast<std::size_t>(s.n) * width, 40u + s.hd);
          const auto bias = random_floats(static_cast<std::size_t>(width), 41u);
          const auto q_norm = random_floats(static_cast<std::size_t>(s.hd), 42u, 0.5f, 1.5f);
          const auto k_norm = random_floats(static_cast<std::size_t>(s.hd), 43u, 0.5f, 1.5f);
          std::vector<float> inv_freq(static_cast<std::size_t>(s.hd / 2));
          for (int i = 0; i < s.hd / 2; ++i)
            inv_freq[i] = 1.0f / std::pow(10000.0f, 2.0f * i / s.hd);

          DeviceBuffer<float> d_qkv(qkv), d_bias(bias), d_qn(q_norm), d_kn(k_norm),
              d_freq(inv_freq);
          DeviceBuffer<int> d_start(std::vector<int>{start});
          DeviceBuffer<float> d_q(static_cast<std::size_t>(s.n) * s.n_heads * s.hd);
          const std::size_t cache_elems = static_cast<std::size_t>(s.n_kv) * capacity * s.hd;
          DeviceBuffer<float> d_k32(cache_elems), d_v32(cache_elems);
          DeviceBuffer<std::uint16_t> d_k16(cache_elems), d_v16(cache_elems);

          k::RopeKvParams p;
          p.qkv = d_qkv.get();
          p.n = s.n;
          p.n_heads = s.n_heads;
          p.n_kv = s.n_kv;
          p.head_dim = s.hd;
          p.bias = s.bias ? d_bias.get() : nullptr;
          p.q_norm = s.qk_norm ? d_qn.get() : nullptr;
          p.k_norm = s.qk_norm ? d_kn.get() : nullptr;
          p.norm_eps = 1e-6f;
          p.inv_freq = d_freq.get();
          p.layout = layout;
          p.start = d_start.get();
          p.q_out = d_q.get();
          p.kv_type = kv;
          p.k_cache = kv == KvType::f16 ? static_cast<void*>(d_k16.get()) : d_k32.get();
          p.v_cache = kv == KvType::f16 ? static_cast<void*>(d_v16.get()) : d_v32.get();
          p.capacity = capacity;
          k::rope_kv_write(p, nullptr);

          // Reference: bias, norm, rotation per head.
          std::vector<float> x = qkv;
          for (int t = 0; t < s.n; ++t) {
            for (int head = 0; head < s.n_heads + 2 * s.n_kv; ++head) {
              float* hx = x.data() + static_cast<std::size_t>(t) * width + head * s.hd;
              if (s.bias) {
                for (int d = 0; d < s.hd; ++d)
                  hx[d] += bias[static_cast<std::size_t>(head) * s.hd + d];
              }
              if (head >= s.n_heads + s.n_kv) continue;  // v: no rotation
              if (s.qk_norm) ref::norm_head(hx, s.hd, head < s.n_heads ? q_norm : k_norm, 1e-6f);
              ref::rope_head(hx, s.hd, start + t, inv_freq, layout);
            }
          }
          const auto got_q = d_q.download();
          std::vector<float> exp_q(got_q.size());
          for (int t = 0; t < s.n; ++t) {
            for (int i = 0; i < s.n_heads * s.hd; ++i) {
              exp_q[static_cast<std::size_t>(t) * s.n_heads * s.hd + i] =
                  x[static_cast<std::size_t>(t) * width + i];
            }
          }
          require_close(got_q, exp_q, 1e-5, 1e-5);

          const double kv_tol = kv == KvType::f16 ? 1e-3 : 1e-5;
          const auto kc =
              kv == KvType::f16 ? ref::from_bits(d_k16.download(), DType::f16) : d_k32.download();
          const auto vc =
              kv == KvType::f16 ? ref::from_bits(d_v16.download(), DType::f16) : d_v32.download();
          for (int t = 0; t < s.n; ++t) {
            for (int h = 0; h < s.n_kv; ++h) {
              for (int d = 0; d < s.hd; ++d) {
                const std::size_t at =
                    (static_cast<std::size_t>(h) * capacity + start + t) * s.hd + d;
                const float ek =
                    x[static_cast<std::size_t>(t) * width + (s.n_heads + h) * s.hd + d];
                const float ev =
                    x[static_cast<std::size_t>(t) * width + (s.n_heads + s.n_kv + h) * s.hd + d];
                REQUIRE(std::abs(kc[at] - ek) <= kv_tol * std::abs(ek) + 1e-5);
                REQUIRE(std::abs(vc[at] - ev) <= kv_tol * std::abs(ev) + 1e-5);
              }
            }
          }
          // Positions outside [start, start + n) are untouched (still the 0xFF fill: NaN).
          const std::size_t before = (static_cast<std::size_t>(0) * capacity + start - 1) * s.hd;
          REQUIRE(std::isnan(kc[before]));
          REQUIRE(std::isnan(vc[before + static_cast<std::size_t>(s.n + 1) * s.hd]));
        }
      }
    }
  });
}

TEST_CASE("SwiGLU", "[cuda-emu][kernels]") {
  for (int ffn : {1, 300, 768}) {
    const int n = 3;
    const auto gate_up =
        random_floats(static_cast<std::size_t>(n) * 2 * ffn, 50u + ffn, -6.0f, 6.0f);
    DeviceBuffer<float> d_in(gate_up);
    DeviceBuffer<float> d_out(static_cast<std::size_t>(n) * ffn);
    specdec::cuda::kernels::swiglu(d_in.get(), n, ffn, d_out.get(), nullptr);
    std::vector<float> expected(static_cast<std::size_t>(n) * ffn);
    for (int t = 0; t < n; ++t) {
      for (int c = 0; c < ffn; ++c) {
        expected[static_cast<std::size_t>(t) * ffn + c] =
            ref::silu_mul(gate_up[static_cast<std::size_t>(t) * 2 * ffn + c],
                          gate_up[static_cast<std::size_t>(t) * 2 * ffn + ffn + c]);
      }
    }
    require_close(d_out.download(), expected, 1e-5, 1e-6);
  }
}

TEST_CASE("f32 to 16-bit conversion and the BLAS layer (prefill GEMM)", "[cuda-emu][kernels]") {
  for (DType type : {DType::f16, DType::bf16}) {
    const int n = 20, out = 33, in = 40;
    const auto x = random_floats(static_cast<std::size_t>(n) * in, 60u);
    const auto w_bits = ref::to_bits(random_floats(static_cast<std::size_t>(out) * in, 61u), type);
    DeviceBuffer<float> d_x(x);
    DeviceBuffer<std::uint16_t> d_x16(x.size());
    k::convert_f32(d_x.get(), x.size(), type, d_x16.get(), nullptr);
    const auto x16 = d_x16.download();
    for (std::size_t i = 0; i < x.size(); ++i) REQUIRE(x16[i] == ref::to_bits(x[i], type));

    DeviceBuffer<std::uint16_t> d_w(w_bits);
    DeviceBuffer<float> d_y(static_cast<std::size_t>(n) * out);
    specdec::cuda::Blas blas;
    blas.gemm_xwT(type, d_w.get(), d_x16.get(), d_y.get(), n, out, in, out, nullptr);
    const auto expected =
        ref::gemm_xwT(ref::from_bits(w_bits, type), ref::from_bits(x16, type), n, out, in);
    require_close(d_y.download(), expected, 1e-4, 1e-5);

    // Into rows of a wider output (ldy > out): the prefill path's row chunks and projection parts.
    const int ldy = out + 7;
    DeviceBuffer<float> d_wide(static_cast<std::size_t>(n) * ldy);
    blas.gemm_xwT(type, d_w.get(), d_x16.get(), d_wide.get() + 3, n, out, in, ldy, nullptr);
    const auto wide = d_wide.download();
    for (int t = 0; t < n; ++t) {
      for (int c = 0; c < ldy; ++c) {
        const float v = wide[static_cast<std::size_t>(t) * ldy + c];
        if (c < 3 || c >= 3 + out) {
          REQUIRE(std::isnan(v));  // untouched
        } else {
          REQUIRE(std::abs(v - expected[static_cast<std::size_t>(t) * out + c - 3]) <=
                  1e-5 + 1e-4 * std::abs(expected[static_cast<std::size_t>(t) * out + c - 3]));
        }
      }
    }
  }
}
