// `specdec convert` and the GGUF writer under it, against references:
//  - the gguf Python package's conversions (tests/data/cli/, tools/make_cli_fixtures.py): the
//    converted files must be byte-identical to what its GGUFWriter wrote with gguf.quants' Q8_0
//    (bit-exact with ggml's quantize_row_q8_0_ref) and numpy's float16 rounding;
//  - the CPU's own F16C conversion instruction for fp32_to_fp16 over 17 million floats, and an
//    exhaustive round trip of every binary16 value;
//  - the committed demo models: converting the shared trained pair again gives the same bytes.

#include <immintrin.h>

#include <cmath>
#include <cstring>
#include <random>
#include <string>
#include <vector>

#include "cli_test_util.hpp"
#include "specdec/model/float16.hpp"
#include "specdec/model/gguf_writer.hpp"
#include "specdec/model/quants.hpp"
#include "specdec_test.hpp"

using specdec::test::read_file;
using specdec::test::run_cli;

namespace {

std::string cli_data(const char* name) {
  return (specdec::test::test_data() / "cli" / name).string();
}

void check_convert(const char* type, const char* expected) {
  const auto out = specdec::test::temp_path(".gguf");
  const auto r = run_cli({"convert", cli_data("convert-input.gguf"), out.string(), "--type", type});
  INFO(r.err);
  REQUIRE(r.status == 0);
  const std::string mine = read_file(out), reference = read_file(cli_data(expected));
  std::filesystem::remove(out);
  REQUIRE(mine.size() == reference.size());
  CHECK(mine == reference);
}

__attribute__((target("f16c"))) std::uint16_t hardware_fp16(float f) {
  return static_cast<std::uint16_t>(_cvtss_sh(f, _MM_FROUND_TO_NEAREST_INT));
}

}  // namespace

TEST_CASE("convert --type q8_0 / f16 writes what the gguf package writes", "[cli]") {
  SECTION("q8_0") { check_convert("q8_0", "convert-q8_0.gguf"); }
  SECTION("f16") { check_convert("f16", "convert-f16.gguf"); }
  SECTION("type names are case-insensitive") { check_convert("Q8_0", "convert-q8_0.gguf"); }
}

TEST_CASE("fp32_to_fp16 rounds like the F16C instruction", "[cli]") {
  if (!__builtin_cpu_supports("f16c")) {
    WARN("SKIPPED: this CPU has no F16C instruction to compare with");
    return;
  }
  std::size_t mismatches = 0;
  std::uint32_t first_bad = 0;
  // Every 251st bit pattern: all exponents, signs and many mantissas (NaN payloads excluded:
  // the hardware keeps them, ggml and specdec return one quiet NaN).
  for (std::uint64_t bits = 0; bits <= 0xffffffffu; bits += 251) {
    const float f = std::bit_cast<float>(static_cast<std::uint32_t>(bits));
    if (std::isnan(f)) continue;
    if (specdec::fp32_to_fp16(f) != hardware_fp16(f) && mismatches++ == 0)
      first_bad = static_cast<std::uint32_t>(bits);
  }
  INFO("first mismatch at float bits 0x" << std::hex << first_bad);
  CHECK(mismatches == 0);
}

TEST_CASE("every binary16 value survives fp16 -> fp32 -> fp16", "[cli]") {
  for (std::uint32_t h = 0; h <= 0xffff; ++h) {
    const auto half = static_cast<std::uint16_t>(h);
    const float f = specdec::fp16_to_fp32(half);
    if (std::isnan(f)) {
      CHECK(std::isnan(specdec::fp16_to_fp32(specdec::fp32_to_fp16(f))));
      continue;
    }
    if (specdec::fp32_to_fp16(f) != half)
      FAIL("half 0x" << std::hex << h << " does not round-trip");
  }
}

TEST_CASE("Q8_0 blocks dequantize to within half a step", "[cli]") {
  std::mt19937 rng(5);
  std::normal_distribution<float> normal(0.0f, 2.0f);
  std::vector<float> x(32 * 64);
  for (auto& v : x) v = normal(rng);
  std::vector<std::byte> blocks(x.size() / 32 * 34);
  specdec::quant::quantize(specdec::DType::q8_0, x, blocks);
  std::vector<float> y(x.size());
  specdec::dequantize(specdec::DType::q8_0, blocks.data(), y.data(), y.size());
  for (std::size_t b = 0; b < x.size() / 32; ++b) {
    float amax = 0;
    for (std::size_t j = 0; j < 32; ++j) amax = std::max(amax, std::fabs(x[b * 32 + j]));
    const float d = amax / 127;  // the f16-rounded scale differs by at most 2^-11 relative
    for (std::size_t j = 0; j < 32; ++j)
      CHECK(std::fabs(x[b * 32 + j] - y[b * 32 + j]) <= 0.5f * d + amax * 1e-3f);
  }
  CHECK_THROWS_AS(
      specdec::quant::quantize(specdec::DType::q8_0, std::span<const float>(x.data(), 31), blocks),
      specdec::Error);
}

TEST_CASE("the committed demo models are the conversion of the shared trained pair", "[cli]") {
  const auto pair = specdec::test::tinyllama_pair();
  if (pair.empty()) {
    WARN("SKIPPED: ../shared/models/tinyllama-pair is not here");
    return;
  }
  for (const char* name : {"target", "draft"}) {
    INFO(name);
    const auto out = specdec::test::temp_path(".gguf");
    const auto r = run_cli({"convert", (pair / (std::string(name) + "-f32.gguf")).string(),
                            out.string(), "--type", "q8_0"});
    INFO(r.err);
    REQUIRE(r.status == 0);
    const bool same =
        read_file(out) ==
        read_file(specdec::test::demo_model((std::string(name) + "-q8_0.gguf").c_str()));
    std::filesystem::remove(out);
    CHECK(same);
  }
}
