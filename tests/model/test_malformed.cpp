// Bad model files: each case starts from a valid small file written by
// tests/model/model_writers.hpp, changes one thing, and requires a specdec::Error naming the file
// and the problem. Nothing may crash or read out of bounds (this executable also runs under ASan +
// UBSan).
#include <cstring>
#include <limits>

#include <nlohmann/json.hpp>

#include <fmt/format.h>

#include "model_writers.hpp"
#include "specdec/model/dtype.hpp"
#include "specdec/model/gguf.hpp"
#include "specdec/model/hf.hpp"
#include "specdec/model/safetensors.hpp"
#include "specdec_test.hpp"

using namespace specdec;
using namespace specdec::test;
namespace fs = std::filesystem;

namespace {

constexpr const char* kGgufName = "bad.gguf";
constexpr std::uint64_t k2to40 = std::uint64_t{1} << 40;

/// The model points into `bytes`: keep them alive while it is used.
LoadedModel load_gguf_bytes(const Bytes& bytes) {
  return load_gguf_model(parse_gguf(bytes, kGgufName));
}

/// The whole GGUF path (parse, config, weights) must throw a specdec::Error "bad.gguf:
/// ...problem...".
void expect_gguf_error(const Bytes& bytes, const std::string& problem) {
  INFO("expected problem: " << problem);
  CHECK_THROWS_MATCHES(load_gguf_bytes(bytes), Error,
                       Catch::Matchers::Predicate<Error>(
                           [&](const Error& e) {
                             const std::string m = e.what();
                             return m.starts_with(std::string(kGgufName) + ": ") &&
                                    m.find(problem) != std::string::npos;
                           },
                           "message names the file and contains: " + problem));
}

void expect_gguf_error(const GgufWriter& w, const std::string& problem) {
  expect_gguf_error(w.build(), problem);
}

GgufWriter tiny() { return tiny_gguf(TinyModel{}); }

}  // namespace

TEST_CASE("GGUF: the valid tiny models the corruptions start from load", "[malformed][gguf]") {
  for (const char* arch : {"llama", "mistral", "qwen2", "qwen3"}) {
    TinyModel m;
    m.arch = arch;
    m.qkv_bias = m.arch == "qwen2";
    m.qk_norm = m.arch == "qwen3";
    if (m.qk_norm) m.head_dim = 6;  // q_dim 12 != dim 8, as Qwen3 allows
    m.tied = m.arch == "qwen2";
    INFO(arch);
    const Bytes bytes = tiny_gguf(m).build();  // the model points into these bytes
    const LoadedModel lm = load_gguf_bytes(bytes);
    CHECK(lm.config.architecture == arch);
    CHECK(lm.config.head_dim == m.head_dim);
    CHECK(lm.config.qkv_bias == m.qkv_bias);
    CHECK(lm.config.qk_norm == m.qk_norm);
    CHECK(lm.config.tied_embeddings == m.tied);
    CHECK(lm.config.vocab_size == m.vocab);
    CHECK(lm.weights->tensors().size() == tiny_tensor_shapes(m).size());
  }
}

TEST_CASE("GGUF: truncation at every length gives an error", "[malformed][gguf]") {
  const Bytes full = tiny().build();
  REQUIRE_NOTHROW(load_gguf_bytes(full));
  for (std::size_t n = 0; n < full.size(); ++n) {
    const Bytes prefix(full.begin(), full.begin() + static_cast<std::ptrdiff_t>(n));
    INFO("prefix of " << n << " bytes");
    // "truncated" while a field is cut, "exceeds"/"cannot fit" when a count is bounded by the
    // bytes left, "past the end" once only tensor data is missing.
    CHECK_THROWS_MATCHES(load_gguf_bytes(prefix), Error,
                         Catch::Matchers::Predicate<Error>(
                             [](const Error& e) {
                               const std::string m = e.what();
                               return m.starts_with("bad.gguf: ") &&
                                      (m.find("truncated") != std::string::npos ||
                                       m.find("exceeds what the") != std::string::npos ||
                                       m.find("cannot fit") != std::string::npos ||
                                       m.find("past the end") != std::string::npos);
                             },
                             "names the file and reports missing bytes"));
  }
}

TEST_CASE("GGUF: header problems", "[malformed][gguf]") {
  SECTION("wrong magic") {
    GgufWriter w = tiny();
    std::memcpy(w.magic, "GGML", 4);
    expect_gguf_error(w, "not a GGUF file");
  }
  SECTION("versions 1 and 4") {
    GgufWriter w = tiny();
    w.version = 1;
    expect_gguf_error(w, "unsupported GGUF version 1");
    w.version = 4;
    expect_gguf_error(w, "unsupported GGUF version 4");
  }
  SECTION("big-endian") {
    GgufWriter w = tiny();
    w.version = 0x03000000;
    expect_gguf_error(w, "big-endian");
  }
  SECTION("2^40 metadata entries") {
    GgufWriter w = tiny();
    w.metadata_count = k2to40;
    expect_gguf_error(w, "metadata count 1099511627776 exceeds");
  }
  SECTION("2^40 tensors") {
    GgufWriter w = tiny();
    w.tensor_count = k2to40;
    expect_gguf_error(w, "tensor count 1099511627776 exceeds");
  }
  SECTION("empty file") { expect_gguf_error(Bytes{}, "truncated"); }
}

TEST_CASE("GGUF: metadata problems", "[malformed][gguf]") {
  GgufWriter w = tiny();
  SECTION("array of 2^40 elements") {
    Bytes v;
    put<std::uint32_t>(v, kU8);
    put<std::uint64_t>(v, k2to40);
    w.kv("huge.array", kArray, v);
    expect_gguf_error(w, "array of 1099511627776 elements cannot fit");
  }
  SECTION("string of 2^40 bytes") {
    Bytes v;
    put<std::uint64_t>(v, k2to40);
    w.kv("huge.string", kString, v);
    expect_gguf_error(w, "truncated");
  }
  SECTION("key of 2^40 bytes") {
    w.kvs.insert(w.kvs.begin(), {"", kU8, {}});
    Bytes bytes = w.build();
    const std::uint64_t len = k2to40;
    std::memcpy(bytes.data() + 24, &len, 8);  // the first key's length, right after the header
    expect_gguf_error(bytes, "truncated file: metadata key");
  }
  SECTION("unknown value type") {
    w.kv("odd.type", 13, Bytes(4));
    expect_gguf_error(w, "unknown value type 13");
  }
  SECTION("unknown array element type") {
    Bytes v;
    put<std::uint32_t>(v, 99);
    put<std::uint64_t>(v, 1);
    w.kv("odd.array", kArray, v);
    expect_gguf_error(w, "unknown array element type 99");
  }
  SECTION("arrays nested too deep") {
    Bytes v;
    for (int i = 0; i < 9; ++i) {
      put<std::uint32_t>(v, i == 8 ? kU8 : kArray);
      put<std::uint64_t>(v, 1);
    }
    put<std::uint8_t>(v, 7);
    w.kv("deep", kArray, v);
    expect_gguf_error(w, "nested deeper");
  }
  SECTION("nested arrays within the limit are fine") {
    Bytes v;
    for (int i = 0; i < 3; ++i) {
      put<std::uint32_t>(v, i == 2 ? kU8 : kArray);
      put<std::uint64_t>(v, 1);
    }
    put<std::uint8_t>(v, 7);
    w.kv("nested", kArray, v);
    const GgufFile g = parse_gguf(w.build(), kGgufName);
    CHECK(g.find("nested")->to_string() == "[array x 1] [array x 1] [u8 x 1] 7");
  }
  SECTION("invalid bool") {
    w.kv_scalar("odd.bool", kBool, std::uint8_t{2});
    expect_gguf_error(w, "invalid bool value 2");
  }
  SECTION("duplicate key") {
    w.kv_u32("llama.block_count", 2);
    expect_gguf_error(w, "duplicate metadata key 'llama.block_count'");
  }
  SECTION("alignment not a power of two") {
    w.kv_u32("general.alignment", 48);
    expect_gguf_error(w, "general.alignment 48 is not a power of two");
    w.find_kv("general.alignment")->value = {std::byte{0}, std::byte{0}, std::byte{0},
                                             std::byte{0}};
    expect_gguf_error(w, "general.alignment 0 is not a power of two");
  }
  SECTION("a custom alignment is honoured") {
    w.kv_u32("general.alignment", 64);
    w.alignment = 64;
    const Bytes bytes = w.build();
    const LoadedModel m = load_gguf_bytes(bytes);
    for (const auto& [name, t] : m.weights->tensors())
      CHECK((t.data - m.weights->tensors().begin()->second.data) % 64 == 0);
  }
}

TEST_CASE("GGUF: tensor problems", "[malformed][gguf]") {
  GgufWriter w = tiny();
  SECTION("unknown tensor type") {
    w.find_tensor("blk.0.attn_q.weight")->type = 1000;
    expect_gguf_error(w, "tensor 'blk.0.attn_q.weight': unknown tensor type 1000");
    w.find_tensor("blk.0.attn_q.weight")->type = 4;  // the removed Q4_2
    expect_gguf_error(w, "unknown tensor type 4");
  }
  SECTION("known but unsupported type") {
    auto* t = w.find_tensor("token_embd.weight");
    t->type = kGgmlIQ2_XS;
    t->shape = {1, 256};
    t->data = Bytes(74);
    expect_gguf_error(w,
                      "tensor 'token_embd.weight' has type IQ2_XS, which specdec does not support");
  }
  SECTION("row length not a multiple of the block size") {
    auto* t = w.find_tensor("blk.0.attn_q.weight");
    t->type = kGgmlQ8_0;
    t->shape = {1, 33};
    expect_gguf_error(w, "row length 33 is not a multiple of the Q8_0 block size 32");
  }
  SECTION("data past the end of the file") {
    auto* t = w.find_tensor("output.weight");
    t->offset = std::uint64_t{1} << 20;
    t->write_data = false;
    expect_gguf_error(w, "tensor 'output.weight': data at offset");
    expect_gguf_error(w, "past the end of the file");
    t->offset =
        std::numeric_limits<std::uint64_t>::max() - 31;  // aligned, and offset + size overflows
    expect_gguf_error(w, "past the end of the file");
  }
  SECTION("overlapping tensors") {
    w.find_tensor("blk.0.attn_k.weight")->offset = 0;  // where token_embd.weight is
    w.find_tensor("blk.0.attn_k.weight")->write_data = false;
    expect_gguf_error(w, "overlap");
  }
  SECTION("misaligned tensor") {
    w.find_tensor("blk.0.attn_k.weight")->offset = 4;
    w.find_tensor("blk.0.attn_k.weight")->write_data = false;
    expect_gguf_error(w,
                      "tensor 'blk.0.attn_k.weight' is misaligned: offset 4 is not a multiple of "
                      "the alignment 32");
  }
  SECTION("2^62 elements") {
    auto* t = w.find_tensor("blk.0.attn_q.weight");
    t->shape = {std::uint64_t{1} << 31, std::uint64_t{1} << 31};  // 2^62 F32 = 2^64 bytes
    expect_gguf_error(w, "byte size of shape [2147483648, 2147483648] (F32) overflows");
    t->type = 24;  // I8: 2^62 bytes, no overflow, but far past the end
    expect_gguf_error(w, "past the end");
    t->shape = {std::uint64_t{1} << 32, std::uint64_t{1} << 32};  // 2^64 elements
    expect_gguf_error(w, "element count of shape [4294967296, 4294967296] overflows");
    t->shape = {std::uint64_t{1} << 63};
    expect_gguf_error(w, "dimension 9223372036854775808 is out of range");
  }
  SECTION("five dimensions") {
    w.find_tensor("output_norm.weight")->shape = {1, 1, 1, 1, 8};
    expect_gguf_error(w, "tensor 'output_norm.weight' has 5 dimensions (at most 4)");
  }
  SECTION("duplicate tensor") {
    w.tensors.push_back(*w.find_tensor("output_norm.weight"));
    w.tensors.back().offset.reset();
    expect_gguf_error(w, "duplicate tensor 'output_norm.weight'");
  }
  SECTION("name longer than 63 bytes") {
    w.find_tensor("output_norm.weight")->name = std::string(64, 'n');
    expect_gguf_error(w, "is longer than 63 bytes");
  }
}

TEST_CASE("GGUF: files that contradict the config", "[malformed][gguf]") {
  GgufWriter w = tiny();
  SECTION("shape of attn_q contradicts heads * head_dim") {
    auto* t = w.find_tensor("blk.1.attn_q.weight");
    t->shape = {12, 8};
    t->data = f32_bytes(some_floats(12 * 8, 3));
    expect_gguf_error(
        w, "tensor 'blk.1.attn_q.weight' has shape [12, 8], but the config implies [8, 8]");
  }
  SECTION("transposed matrix") {
    w.find_tensor("blk.0.ffn_down.weight")->shape = {16, 8};
    expect_gguf_error(
        w, "tensor 'blk.0.ffn_down.weight' has shape [16, 8], but the config implies [8, 16]");
  }
  SECTION("vocab_size key contradicts the embedding") {
    w.kv_u32("llama.vocab_size", 20);
    expect_gguf_error(
        w, "tensor 'token_embd.weight' has shape [16, 8], but the config implies [20, 8]");
  }
  SECTION("missing tensor") {
    w.remove_tensor("blk.1.ffn_up.weight");
    expect_gguf_error(w, "missing tensor 'blk.1.ffn_up.weight'");
  }
  SECTION("missing embedding") {
    w.remove_tensor("token_embd.weight");
    expect_gguf_error(w, "vocab_size must be positive");
  }
  SECTION("a layer beyond block_count") {
    w.f32_tensor("blk.2.attn_norm.weight", {8}, 99);
    expect_gguf_error(w, "unexpected tensor 'blk.2.attn_norm.weight'");
  }
  SECTION("a bias on a model without biases elsewhere") {
    w.f32_tensor("blk.1.attn_q.bias", {8}, 99);
    expect_gguf_error(w, "unexpected tensor 'blk.1.attn_q.bias'");
  }
  SECTION("heads not a multiple of KV heads") {
    w.find_kv("llama.attention.head_count_kv")->value = {std::byte{3}, std::byte{0}, std::byte{0},
                                                         std::byte{0}};
    expect_gguf_error(w, "n_heads (2) is not a multiple of n_kv_heads (3)");
  }
  SECTION("zero KV heads") {
    w.find_kv("llama.attention.head_count_kv")->value = Bytes(4);
    expect_gguf_error(w, "n_kv_heads must be positive");
  }
  SECTION("missing key") {
    w.remove_kv("llama.embedding_length");
    expect_gguf_error(w, "missing metadata key 'llama.embedding_length'");
  }
  SECTION("key of the wrong type") {
    w.remove_kv("llama.block_count");
    w.kv_string("llama.block_count", "two");
    expect_gguf_error(
        w, "metadata key 'llama.block_count' is string (\"two\"), expected a non-negative integer");
  }
  SECTION("unsupported architecture") {
    w.find_kv("general.architecture")->value.clear();
    put_string(w.find_kv("general.architecture")->value, "gpt2");
    expect_gguf_error(w, "unsupported architecture 'gpt2'");
  }
  SECTION("partial rotary") {
    w.kv_u32("llama.rope.dimension_count", 2);
    expect_gguf_error(w, "partial rotary embeddings are not supported");
  }
  SECTION("yarn rope scaling") {
    w.kv_string("llama.rope.scaling.type", "yarn");
    expect_gguf_error(w, "rope scaling type 'yarn' is not supported");
  }
  SECTION("odd head dimension") {
    w.kv_u32("llama.attention.key_length", 3);
    expect_gguf_error(w, "head_dim (3) must be even");
  }
  SECTION("special token outside the vocabulary") {
    w.kv_u32("tokenizer.ggml.eos_token_id", 16);
    expect_gguf_error(w, "eos_token (16) is outside the vocabulary of 16 tokens");
  }
  SECTION("absurd dimensions") {
    w.find_kv("llama.embedding_length")->value = {std::byte{0xff}, std::byte{0xff}, std::byte{0xff},
                                                  std::byte{0xff}};
    w.kv_u32("llama.attention.key_length", 4);
    expect_gguf_error(w, "dim (4294967295) exceeds the supported maximum");
  }
}

TEST_CASE("GGUF: tokenizer metadata problems", "[malformed][gguf]") {
  TinyModel m;
  m.tokenizer = true;
  GgufWriter w = tiny_gguf(m);
  auto spec_of = [&]() { return gguf_tokenizer_spec(parse_gguf(w.build(), kGgufName)); };
  const auto spec = spec_of();
  REQUIRE(spec.has_value());
  CHECK(spec->tokens.size() == 16);
  CHECK(spec->model == "llama");
  CHECK(spec->add_bos);
  CHECK_FALSE(spec->add_eos);
  CHECK(spec->bos == 1);
  CHECK_FALSE(spec->byte_fallback);  // no byte tokens in this toy vocabulary
  SECTION("scores of the wrong length") {
    w.remove_kv("tokenizer.ggml.scores");
    w.kv_f32s("tokenizer.ggml.scores", {0.0f, 1.0f, 2.0f});
    CHECK_THROWS_WITH(spec_of(),
                      Catch::Contains("bad.gguf: tokenizer.ggml.scores has 3 entries but "
                                      "tokenizer.ggml.tokens has 16"));
  }
  SECTION("tokens of the wrong type") {
    w.remove_kv("tokenizer.ggml.tokens");
    w.kv_f32s("tokenizer.ggml.tokens", {0.0f});
    CHECK_THROWS_WITH(
        spec_of(),
        Catch::Contains("'tokenizer.ggml.tokens' is an array of f32, expected an array of "
                        "string"));
  }
  SECTION("bos outside the tokens") {
    w.find_kv("tokenizer.ggml.bos_token_id")->value = {std::byte{99}, std::byte{0}, std::byte{0},
                                                       std::byte{0}};
    CHECK_THROWS_WITH(
        spec_of(),
        Catch::Contains("tokenizer.ggml.bos_token_id (99) is outside the tokenizer's 16"));
  }
  SECTION("missing tokens") {
    w.remove_kv("tokenizer.ggml.tokens");
    CHECK_THROWS_WITH(spec_of(), Catch::Contains("missing metadata key 'tokenizer.ggml.tokens'"));
  }
  SECTION("every truncation of a file with a tokenizer") {
    const Bytes full = w.build();
    for (std::size_t n = 0; n < full.size(); ++n)
      CHECK_THROWS_AS(parse_gguf(std::span(full).first(n), kGgufName), Error);
  }
}

// ---------------------------------------------------------------------------------- safetensors

namespace {

constexpr const char* kStName = "bad.safetensors";

void expect_st_error(const Bytes& bytes, const std::string& problem) {
  INFO("expected problem: " << problem);
  CHECK_THROWS_MATCHES(parse_safetensors(bytes, kStName), Error,
                       Catch::Matchers::Predicate<Error>(
                           [&](const Error& e) {
                             const std::string m = e.what();
                             return m.starts_with(std::string(kStName) + ": ") &&
                                    m.find(problem) != std::string::npos;
                           },
                           "message names the file and contains: " + problem));
}

SafetensorsWriter small_st() {
  SafetensorsWriter w;
  w.f32_tensor("a", {2, 3}, 1);
  w.tensor("b", "F16", {4}, Bytes(8));
  w.tensor("c", "BF16", {2, 2}, Bytes(8));
  w.header["__metadata__"] = {{"format", "pt"}};
  return w;
}

}  // namespace

TEST_CASE("safetensors: truncation at every length gives an error", "[malformed][safetensors]") {
  const Bytes full = small_st().build();
  REQUIRE(parse_safetensors(full, kStName).tensors.size() == 3);
  for (std::size_t n = 0; n < full.size(); ++n) {
    INFO("prefix of " << n << " bytes");
    CHECK_THROWS_AS(parse_safetensors(std::span(full).first(n), kStName), Error);
  }
}

TEST_CASE("safetensors: header and tensor problems", "[malformed][safetensors]") {
  SafetensorsWriter w = small_st();
  SECTION("header size past the end") {
    Bytes b = w.build();
    const std::uint64_t n = b.size();
    std::memcpy(b.data(), &n, 8);
    expect_st_error(b, "truncated file: the header needs");
  }
  SECTION("absurd header size") {
    Bytes b = w.build();
    const std::uint64_t n = std::uint64_t{1} << 63;
    std::memcpy(b.data(), &n, 8);
    expect_st_error(b, "exceeds the limit");
  }
  SECTION("not JSON") {
    expect_st_error(w.build_with_header("{\"a\": [1, 2"), "invalid JSON header");
  }
  SECTION("not an object") { expect_st_error(w.build_with_header("[1, 2]"), "not a JSON object"); }
  SECTION("unknown dtype") {
    w.header["a"]["dtype"] = "F7";
    expect_st_error(w.build(), "tensor 'a': unknown or unsupported dtype 'F7'");
  }
  SECTION("offsets disagree with the shape") {
    w.header["a"]["shape"] = {2, 2};
    expect_st_error(
        w.build(),
        "tensor 'a': data_offsets [0, 24] hold 24 bytes but shape [2, 2] of F32 needs 16");
  }
  SECTION("data past the end") {
    w.header["c"]["data_offsets"] = {40, 48};
    expect_st_error(w.build(), "tensor 'c': data [40, 48) lies past the end");
  }
  SECTION("overlapping") {
    w.header["c"]["data_offsets"] = {20, 28};
    expect_st_error(w.build(), "overlap");
  }
  SECTION("misaligned") {
    w.header["b"]["data_offsets"] = {25, 33};  // F16 at an odd offset
    expect_st_error(w.build(), "tensor 'b': misaligned");
  }
  SECTION("2^62 elements") {
    w.header["a"]["shape"] = {std::uint64_t{1} << 31, std::uint64_t{1} << 31};
    expect_st_error(w.build(), "byte size of shape [2147483648, 2147483648] (F32) overflows");
    w.header["a"]["dtype"] = "U8";  // 2^62 bytes: no overflow, but not what the offsets hold
    expect_st_error(w.build(), "needs 4611686018427387904");
  }
  SECTION("reversed offsets") {
    w.header["a"]["data_offsets"] = {24, 0};
    expect_st_error(w.build(), "reversed");
  }
  SECTION("negative shape") {
    w.header["a"]["shape"] = {-2, 3};
    expect_st_error(w.build(), "shape entries must be non-negative integers");
  }
  SECTION("missing data_offsets") {
    w.header["a"].erase("data_offsets");
    expect_st_error(w.build(), "\"data_offsets\" must be two non-negative integers");
  }
  SECTION("metadata values must be strings") {
    w.header["__metadata__"]["n"] = 3;
    expect_st_error(w.build(), "__metadata__ value of 'n' is not a string");
  }
  SECTION("too short for the size field") { expect_st_error(Bytes(5), "truncated file"); }
}

// ---------------------------------------------------------------------------------- HF folders

namespace {

/// A folder with config.json and model.safetensors of a TinyModel, each editable before write().
struct HfFolder {
  TempDir dir;
  TinyModel model;
  nlohmann::json config = tiny_hf_config(model);
  SafetensorsWriter weights = tiny_safetensors(model);

  void write() const {
    write_file(dir.path() / "config.json", config.dump());
    write_file(dir.path() / "model.safetensors", weights.build());
  }
  void expect_error(const std::string& file, const std::string& problem) const {
    write();
    INFO("expected problem: " << problem);
    const std::string prefix = (file.empty() ? dir.path() : dir.path() / file).string() + ": ";
    CHECK_THROWS_MATCHES(load_model(dir.path().string()), Error,
                         Catch::Matchers::Predicate<Error>(
                             [&](const Error& e) {
                               const std::string m = e.what();
                               return m.starts_with(prefix) && m.find(problem) != std::string::npos;
                             },
                             "message starts with " + prefix + " and contains: " + problem));
  }
};

}  // namespace

TEST_CASE("Hugging Face folders: the valid tiny folder loads", "[malformed][hf]") {
  HfFolder f;
  f.write();
  const LoadedModel m = load_model(f.dir.path().string());
  CHECK(m.config.rope_layout == RopeLayout::rotate_half);
  CHECK(m.weights->tensors().size() == tiny_tensor_shapes(f.model).size());
  CHECK(m.tokenizer == nullptr);
  // The same bytes through the GGUF writer give the same model, apart from the rope layout.
  const Bytes bytes = tiny().build();
  const LoadedModel g = load_gguf_bytes(bytes);
  for (const auto& [name, t] : g.weights->tensors()) {
    INFO(name);
    REQUIRE(m.weights->find(name) != nullptr);
    CHECK(std::memcmp(m.weights->find(name)->data, t.data, t.nbytes) == 0);
  }
}

TEST_CASE("Hugging Face folders: config problems", "[malformed][hf]") {
  HfFolder f;
  SECTION("missing field") {
    f.config.erase("hidden_size");
    f.expect_error("config.json", "missing \"hidden_size\"");
  }
  SECTION("field of the wrong type") {
    f.config["num_hidden_layers"] = "2";
    f.expect_error("config.json",
                   "\"num_hidden_layers\" must be a non-negative integer, not \"2\"");
  }
  SECTION("negative field") {
    f.config["intermediate_size"] = -16;
    f.expect_error("config.json", "\"intermediate_size\" must be a non-negative integer");
  }
  SECTION("unsupported architecture") {
    f.config["architectures"] = {"GPT2LMHeadModel"};
    f.expect_error("config.json", "unsupported architecture \"GPT2LMHeadModel\"");
  }
  SECTION("unsupported activation") {
    f.config["hidden_act"] = "gelu";
    f.expect_error("config.json", "hidden_act \"gelu\" is not supported");
  }
  SECTION("attention bias on a llama") {
    f.config["attention_bias"] = true;
    f.expect_error("config.json", "attention_bias");
  }
  SECTION("unsupported rope scaling") {
    f.config["rope_scaling"] = {{"rope_type", "yarn"}, {"factor", 4.0}};
    f.expect_error("config.json", "rope type \"yarn\" is not supported");
  }
  SECTION("llama3 rope scaling without its parameters") {
    f.config["rope_scaling"] = {{"rope_type", "llama3"}, {"factor", 8.0}};
    f.expect_error("config.json", "missing \"low_freq_factor\" for rope type llama3");
  }
  SECTION("not JSON") {
    f.write();
    write_file(f.dir.path() / "config.json", std::string_view("{\"vocab_size\": "));
    CHECK_THROWS_WITH(load_model(f.dir.path().string()),
                      Catch::Contains("config.json: invalid JSON"));
  }
  SECTION("heads not a multiple of KV heads") {
    f.config["num_key_value_heads"] = 3;
    f.expect_error("config.json", "n_heads (2) is not a multiple of n_kv_heads (3)");
  }
}

TEST_CASE("Hugging Face folders: weight problems", "[malformed][hf]") {
  HfFolder f;
  SECTION("shape contradicts the config") {
    f.weights.header["model.layers.0.self_attn.k_proj.weight"]["shape"] = {8, 4};
    f.expect_error("",
                   "tensor 'blk.0.attn_k.weight' has shape [8, 4], but the config implies [4, 8]");
  }
  SECTION("missing tensor") {
    f.weights.header.erase("model.layers.1.mlp.up_proj.weight");
    f.expect_error("", "missing tensor 'blk.1.ffn_up.weight'");
  }
  SECTION("unsupported dtype") {
    f.weights.header["model.norm.weight"]["dtype"] = "I32";
    f.expect_error("model.safetensors",
                   "tensor 'model.norm.weight' has dtype I32, which specdec does not support");
  }
  SECTION("a parameter specdec does not implement") {
    f.weights.tensor("model.layers.0.self_attn.o_proj.bias", "F32", {8}, Bytes(32));
    f.expect_error("model.safetensors",
                   "tensor 'model.layers.0.self_attn.o_proj.bias' is not a parameter");
  }
  SECTION("two names for one tensor") {
    f.weights.f32_tensor("model.layers.00.input_layernorm.weight", {8}, 99);
    f.expect_error("model.safetensors", "not a parameter");
  }
  SECTION("no weights at all") {
    f.write();
    fs::remove(f.dir.path() / "model.safetensors");
    CHECK_THROWS_WITH(load_model(f.dir.path().string()), Catch::Contains("no model.safetensors"));
  }
  SECTION("malformed safetensors inside the folder") {
    f.write();
    Bytes b = f.weights.build();
    b.resize(b.size() - 1);
    write_file(f.dir.path() / "model.safetensors", b);
    CHECK_THROWS_WITH(
        load_model(f.dir.path().string()),
        Catch::Contains("model.safetensors: tensor") && Catch::Contains("past the end"));
  }
}

TEST_CASE("Hugging Face folders: sharded checkpoints", "[malformed][hf]") {
  HfFolder f;
  f.write();
  fs::remove(f.dir.path() / "model.safetensors");
  // Two shards: the embedding alone, everything else.
  SafetensorsWriter first, second;
  nlohmann::json index = {{"metadata", {{"total_size", 0}}},
                          {"weight_map", nlohmann::json::object()}};
  unsigned seed = 1;
  for (const auto& [name, shape] : tiny_tensor_shapes(f.model)) {
    SafetensorsWriter& shard = name == "token_embd.weight" ? first : second;
    shard.f32_tensor(hf_name(name), shape, seed++);
    index["weight_map"][hf_name(name)] =
        name == "token_embd.weight" ? "model-1.safetensors" : "model-2.safetensors";
  }
  write_file(f.dir.path() / "model-1.safetensors", first.build());
  write_file(f.dir.path() / "model-2.safetensors", second.build());
  const fs::path index_path = f.dir.path() / "model.safetensors.index.json";
  auto expect_index_error = [&](const std::string& problem) {
    write_file(index_path, index.dump());
    CHECK_THROWS_WITH(load_model(f.dir.path().string()), Catch::Contains(problem));
  };

  SECTION("valid") {
    write_file(index_path, index.dump());
    const LoadedModel m = load_model(f.dir.path().string());
    CHECK(m.format == "Hugging Face safetensors (2 shards)");
    CHECK(m.weights->files().size() == 2);
  }
  SECTION("shard outside the folder") {
    index["weight_map"]["model.norm.weight"] = "../model-2.safetensors";
    expect_index_error(
        "shard name \"../model-2.safetensors\" of 'model.norm.weight' is not a file name in the "
        "folder");
  }
  SECTION("missing shard") {
    index["weight_map"]["model.layers.0.extra.weight"] = "model-3.safetensors";
    expect_index_error("model-3.safetensors: cannot open");
  }
  SECTION("index lists a tensor its shard lacks") {
    index["weight_map"]["model.layers.5.input_layernorm.weight"] = "model-1.safetensors";
    expect_index_error(
        "tensor 'model.layers.5.input_layernorm.weight' is listed in shard model-1.safetensors but "
        "not "
        "found there");
  }
  SECTION("index and shard disagree") {
    index["weight_map"]["model.norm.weight"] = "model-1.safetensors";
    expect_index_error(
        "tensor 'model.norm.weight' is listed in shard model-1.safetensors of the index");
  }
  SECTION("index without weight_map") {
    index.erase("weight_map");
    expect_index_error("model.safetensors.index.json: missing \"weight_map\" object");
  }
}

TEST_CASE("load_model: paths that are not models", "[malformed]") {
  TempDir dir;
  CHECK_THROWS_WITH(load_model((dir.path() / "nothing.gguf").string()),
                    Catch::Contains("no such file or directory"));
  write_file(dir.path() / "random.bin", std::string_view("not a model at all"));
  CHECK_THROWS_WITH(load_model((dir.path() / "random.bin").string()),
                    Catch::Contains("random.bin: neither a GGUF file"));
  // A folder that is not a Hugging Face model folder: said so, with the .gguf files it holds.
  CHECK_THROWS_WITH(load_model(dir.path().string()),
                    Catch::Contains("a folder without config.json, so not a Hugging Face model "
                                    "folder") &&
                        !Catch::Contains("it holds"));
  write_file(dir.path() / "m.gguf", tiny().build());
  CHECK_THROWS_WITH(load_model(dir.path().string()),
                    Catch::Contains("; it holds m.gguf: give the file"));
  // A truncated GGUF on disk: the message names the path.
  Bytes b = tiny().build();
  b.resize(b.size() / 2);
  const fs::path cut = dir.path() / "cut.gguf";
  write_file(cut, b);
  CHECK_THROWS_WITH(load_model(cut.string()), Catch::StartsWith(cut.string() + ": "));
}

TEST_CASE("GGUF: a quantised block with a non-finite scale is refused, naming tensor and block",
          "[malformed][gguf]") {
  // A scale of Inf or NaN makes every weight of its block Inf or NaN (llama.cpp runs such a file
  // and prints garbage). Every type with float16 scales, each scale field, NaN, +Inf and -Inf.
  TinyModel m;
  m.dim = 256;  // one K-quant block, or eight 32-blocks, per row
  m.head_dim = 128;
  const std::string name = "blk.1.ffn_up.weight";  // [ffn = 16, dim = 256]
  for (const DType t : all_dtypes()) {
    const GgmlType& row = dtype_info(t);
    for (const int offset : row.half_scales) {
      if (offset < 0) continue;
      for (const std::uint16_t bits :
           {std::uint16_t{0x7E00}, std::uint16_t{0x7C00}, std::uint16_t{0xFC00}}) {
        INFO(row.name << " scale at byte " << offset << " bits " << bits);
        GgufWriter w = tiny_gguf(m);
        auto* tensor = w.find_tensor(name);
        tensor->type = row.id;
        const std::size_t blocks = 16 * 256 / row.block_elems;
        tensor->data = Bytes(blocks * row.block_bytes);  // all-zero blocks: finite scales
        {
          const Bytes good = w.build();
          CHECK_NOTHROW(load_gguf_bytes(good));
        }
        const std::size_t bad = blocks - 3;
        std::memcpy(tensor->data.data() + bad * row.block_bytes + offset, &bits, 2);
        const std::size_t per_row = 256 / row.block_elems;
        const std::size_t first = (bad % per_row) * row.block_elems;
        expect_gguf_error(
            w, fmt::format("tensor '{}' ({}): block {} (row {}, columns {}..{}) has a non-finite "
                           "scale {} = {}",
                           name, row.name, bad, bad / per_row, first, first + row.block_elems - 1,
                           offset == row.half_scales[0] ? "d"
                           : row.block_elems == 256     ? "dmin"
                                                        : "m",
                           bits == 0x7E00   ? "nan"
                           : bits == 0x7C00 ? "inf"
                                            : "-inf"));
      }
    }
  }
}
