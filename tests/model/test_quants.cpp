// The weight-type table and the dequantisers / quantisers, bit for bit against the gguf Python
// package (fixtures: tools/make_quant_fixtures.py -> tests/data/model/quants/) and, for the
// K-quant quantisers, which gguf.quants lacks, against llama.cpp's ggml_quantize_chunk
// (tools/make_kquant_fixtures.py).
#include <catch2/catch.hpp>

#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <set>
#include <string>
#include <vector>

#include <fmt/format.h>

#include "specdec/model/dtype.hpp"
#include "specdec/model/float16.hpp"
#include "specdec/model/quants.hpp"
#include "specdec_test.hpp"

using namespace specdec;

namespace {

std::filesystem::path quant_data() {
  return std::filesystem::path(SPECDEC_TEST_DATA) / "model" / "quants";
}

std::vector<std::byte> read_bytes(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  REQUIRE(in.good());
  std::vector<char> chars((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::vector<std::byte> bytes(chars.size());
  std::memcpy(bytes.data(), chars.data(), chars.size());
  return bytes;
}

std::vector<float> read_floats(const std::filesystem::path& path) {
  const std::vector<std::byte> bytes = read_bytes(path);
  std::vector<float> out(bytes.size() / 4);
  std::memcpy(out.data(), bytes.data(), out.size() * 4);
  return out;
}

std::string lower(std::string s) {
  for (char& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

}  // namespace

TEST_CASE("the weight-type table: ids, names, block geometry", "[model][quants]") {
  std::set<std::uint32_t> ids;
  for (DType t : all_dtypes()) {
    const GgmlType& row = dtype_info(t);
    CHECK(row.dtype == t);
    CHECK(ids.insert(row.id).second);
    CHECK(dtype_from_ggml(row.id) == t);
    CHECK(ggml_type(row.id) == &row);
    CHECK(parse_dtype(row.name) == t);
    CHECK(parse_dtype(lower(row.name)) == t);
    CHECK(std::string(ggml_type_name(row.id)) == row.name);
    CHECK(row.dequantize != nullptr);
  }
  CHECK(all_dtypes().size() == kDTypeCount);
  // ggml's ids and geometry of a few (ggml.h, ggml-common.h).
  CHECK(ggml_type_of(DType::q4_k) == 12);
  CHECK(dtype_block_bytes(DType::q4_k) == 144);
  CHECK(ggml_type_of(DType::bf16) == 30);
  CHECK(ggml_type_of(DType::iq4_xs) == 23);
  CHECK(dtype_block_bytes(DType::q3_k) == 110);
  // Known but not computed: listed for `info` and error messages, no DType.
  REQUIRE(ggml_type(16) != nullptr);
  CHECK(std::string(ggml_type(16)->name) == "IQ2_XXS");
  CHECK_FALSE(dtype_from_ggml(16).has_value());
  CHECK(ggml_type(4) == nullptr);  // the removed Q4_2
  CHECK(ggml_type(1000) == nullptr);
  CHECK_FALSE(parse_dtype("q4_k_m").has_value());
  CHECK(dtype_row_bytes(DType::q6_k, 512, "w") == 420);
  CHECK_THROWS_WITH(dtype_row_bytes(DType::q6_k, 896, "tensor blk.0.ffn_down.weight"),
                    Catch::Contains("blk.0.ffn_down.weight") && Catch::Contains("Q6_K") &&
                        Catch::Contains("896") && Catch::Contains("256"));
}

TEST_CASE("every type dequantises bit for bit like gguf.quants", "[model][quants]") {
  for (DType t : all_dtypes()) {
    if (t == DType::f32) continue;  // a copy
    const std::string name = lower(dtype_name(t));
    DYNAMIC_SECTION(name) {
      const std::vector<std::byte> blocks = read_bytes(quant_data() / (name + ".blocks"));
      const std::vector<float> expected = read_floats(quant_data() / (name + ".f32"));
      REQUIRE(blocks.size() / dtype_block_bytes(t) * dtype_block_elems(t) == expected.size());
      std::vector<float> got(expected.size());
      dequantize(t, blocks.data(), got.data(), got.size());
      std::size_t mismatches = 0;
      for (std::size_t i = 0; i < got.size(); ++i) {
        if (std::memcmp(&got[i], &expected[i], 4) == 0) continue;
        if (mismatches++ < 5)
          UNSCOPED_INFO(fmt::format("value {}: {} (0x{:08x}), gguf.quants {} (0x{:08x})", i, got[i],
                                    std::bit_cast<std::uint32_t>(got[i]), expected[i],
                                    std::bit_cast<std::uint32_t>(expected[i])));
      }
      CHECK(mismatches == 0);
    }
  }
}

TEST_CASE("the writable types quantise bit for bit like gguf.quants and llama.cpp",
          "[model][quants]") {
  for (DType t : {DType::q4_0, DType::q4_1, DType::q5_0, DType::q5_1, DType::q8_0, DType::bf16,
                  DType::q2_k, DType::q3_k, DType::q4_k, DType::q5_k, DType::q6_k}) {
    const std::string name = lower(dtype_name(t));
    DYNAMIC_SECTION(name) {
      REQUIRE(quant::can_quantize(t));
      // The K-quants share one input (normal, uniform, heavy-tailed, zero, constant, one-sided,
      // sparse, outlier, tiny and huge blocks); llama.cpp quantised it.
      const bool k_quant = dtype_block_elems(t) == 256;
      const std::vector<float> x =
          read_floats(quant_data() / (k_quant ? std::string("kquant.input") : name + ".input"));
      const std::vector<std::byte> expected = read_bytes(quant_data() / (name + ".quantized"));
      std::vector<std::byte> got(expected.size());
      quant::quantize(t, x, got);
      std::size_t first_bad = got.size();
      for (std::size_t i = 0; i < got.size() && first_bad == got.size(); ++i)
        if (got[i] != expected[i]) first_bad = i;
      INFO("first differing byte " << first_bad << " (block " << first_bad / dtype_block_bytes(t)
                                   << ")");
      CHECK(first_bad == got.size());
    }
  }
}

TEST_CASE("quantize refuses what it cannot write, with the reason", "[model][quants]") {
  std::vector<float> x(256, 1.0f);
  std::vector<std::byte> out(144);
  CHECK_THROWS_WITH(quant::quantize(DType::iq4_xs, x, out), Catch::Contains("IQ4_XS"));
  CHECK_THROWS_WITH(quant::quantize(DType::q8_0, std::span<const float>(x.data(), 31), out),
                    Catch::Contains("31") && Catch::Contains("Q8_0"));
  CHECK_THROWS_WITH(quant::quantize(DType::q8_0, std::span<const float>(x.data(), 64), out),
                    Catch::Contains("68 bytes"));
}

TEST_CASE("binary16 round trip of every finite value", "[model][quants]") {
  for (std::uint32_t h = 0; h < 65536; ++h) {
    const float f = fp16_to_fp32(static_cast<std::uint16_t>(h));
    if (std::isnan(f)) {
      CHECK(std::isnan(fp16_to_fp32(fp32_to_fp16(f))));
      continue;
    }
    REQUIRE(fp32_to_fp16(f) == h);
  }
  CHECK(fp32_to_fp16(1.0f + std::ldexp(1.0f, -11)) == 0x3c00);      // tie to even (down)
  CHECK(fp32_to_fp16(1.0f + 3 * std::ldexp(1.0f, -11)) == 0x3c02);  // tie to even (up)
  CHECK(fp32_to_fp16(65520.0f) == 0x7c00);
  CHECK(fp32_to_fp16(65519.0f) == 0x7bff);
  CHECK(fp32_to_fp16(std::ldexp(1.0f, -25)) == 0x0000);
  CHECK(fp32_to_fp16(3 * std::ldexp(1.0f, -26)) == 0x0001);
  CHECK(fp32_to_bf16(1.0f + std::ldexp(1.0f, -8)) == 0x3f80);
  CHECK(fp32_to_bf16(1.0f + 3 * std::ldexp(1.0f, -8)) == 0x3f82);
  CHECK(bf16_to_fp32(0xc040) == -3.0f);
}
