// Properties of the CPU Transformer that exact speculative decoding relies on, checked with
// memcmp on random-weight models of every weight dtype and both architectures' options:
//  - batch invariance: a position's logits row is bitwise the same whatever number of tokens
//    (1 .. 16 and more) shared its forward call;
//  - incremental: forward(a) then forward(b) == forward(a ++ b) row by row;
//  - rollback: forward(prefix ++ draft), rollback, forward(other) == fresh forward(prefix ++
//  other);
//  - thread count does not change the result; two instances can share one WeightStore;
// plus the error cases of the interface.
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <limits>
#include <random>
#include <vector>

#include "../model/model_writers.hpp"
#include "random_model.hpp"
#include "specdec/cpu/kernels.hpp"
#include "specdec/cpu/transformer.hpp"
#include "specdec/model/loader.hpp"
#include "specdec_test.hpp"

namespace {

using namespace specdec;
using cpu::Isa;
using cpu::Transformer;

std::vector<token_t> random_tokens(std::size_t n, std::size_t vocab, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<token_t> d(0, static_cast<token_t>(vocab) - 1);
  std::vector<token_t> t(n);
  for (auto& x : t) x = d(rng);
  return t;
}

/// Logits of `tokens` fed in consecutive calls of the given sizes, as one [n][vocab] array.
std::vector<float> run_in_chunks(Transformer& model, const std::vector<token_t>& tokens,
                                 const std::vector<std::size_t>& sizes) {
  std::vector<float> out;
  std::size_t at = 0;
  for (std::size_t size : sizes) {
    const LogitsView l = model.forward(std::span(tokens).subspan(at, size));
    out.insert(out.end(), l.data, l.data + l.rows * l.vocab);
    at += size;
  }
  REQUIRE(at == tokens.size());
  return out;
}

bool rows_equal(const std::vector<float>& a, const std::vector<float>& b) {
  return a.size() == b.size() && std::memcmp(a.data(), b.data(), a.size() * sizeof(float)) == 0;
}

struct IsaOverride {
  explicit IsaOverride(Isa isa) { cpu::set_isa_override(isa); }
  ~IsaOverride() { cpu::set_isa_override(std::nullopt); }
};

}  // namespace

TEST_CASE("batch invariance, incremental and rollback equalities, bitwise", "[cpu][invariants]") {
  for (const bool qwen : {false, true}) {
    for (DType dtype : {DType::f32, DType::f16, DType::bf16, DType::q8_0}) {
      for (KvType kv : {KvType::f32, KvType::f16}) {
        if (kv == KvType::f16 && dtype != DType::f32)
          continue;  // the KV type is independent of the weights
        const test::RandomModel m =
            test::make_random_model(qwen ? test::small_qwen() : test::small_llama(), dtype, 42);
        INFO((qwen ? "qwen-like " : "llama ")
             << dtype_name(dtype) << " kv " << (kv == KvType::f16 ? "f16" : "f32") << " on "
             << cpu::isa_name(cpu::default_isa()));
        const std::vector<token_t> tokens = random_tokens(40, m.config.vocab_size, 9);
        Transformer model(m.config, m.weights, {.threads = 2, .kv_type = kv});

        // Reference: one token per call.
        const std::vector<float> single =
            run_in_chunks(model, tokens, std::vector<std::size_t>(tokens.size(), 1));
        // Batch invariance: the same positions in calls of 1 .. 16 tokens and one of 40.
        for (const std::vector<std::size_t>& sizes :
             {std::vector<std::size_t>{16, 16, 8}, {5, 2, 9, 4, 1, 3, 16}, {40}, {12, 28}}) {
          model.reset();
          CHECK(rows_equal(run_in_chunks(model, tokens, sizes), single));
        }

        // Rollback: prefix ++ draft, roll back to the prefix, then other tokens.
        const std::vector<token_t> draft = random_tokens(5, m.config.vocab_size, 10);
        const std::vector<token_t> other = random_tokens(4, m.config.vocab_size, 11);
        model.reset();
        model.forward(std::span(tokens).first(20));
        model.forward(draft);
        CHECK(model.cached() == 25);
        model.rollback(20);
        CHECK(model.cached() == 20);
        const LogitsView after = model.forward(other);
        const std::vector<float> after_rows(after.data, after.data + after.rows * after.vocab);
        std::vector<token_t> fresh_tokens(tokens.begin(), tokens.begin() + 20);
        fresh_tokens.insert(fresh_tokens.end(), other.begin(), other.end());
        Transformer fresh(m.config, m.weights,
                          {.threads = 1, .kv_type = kv});  // also: other thread count
        const LogitsView f = fresh.forward(fresh_tokens);
        CHECK(std::memcmp(after_rows.data(), f.data + 20 * f.vocab,
                          after_rows.size() * sizeof(float)) == 0);
        // and the fresh single-thread prefix equals the 2-thread single-token rows
        CHECK(std::memcmp(f.data, single.data(), 20 * f.vocab * sizeof(float)) == 0);
      }
    }
  }
}

TEST_CASE("every instruction set gives the same logits for F32, F16 and Q8_0 weights",
          "[cpu][invariants]") {
  for (DType dtype : {DType::f32, DType::f16, DType::q8_0}) {
    const test::RandomModel m = test::make_random_model(test::small_qwen(), dtype, 5);
    const std::vector<token_t> tokens = random_tokens(12, m.config.vocab_size, 6);
    std::vector<float> first;
    for (Isa isa : {Isa::portable, Isa::avx2, Isa::avx512, Isa::amx}) {
      if (!cpu::isa_supported(isa)) continue;
      const IsaOverride use(isa);
      Transformer model(m.config, m.weights, {.threads = 1});
      const LogitsView l = model.forward(tokens);
      const std::vector<float> rows(l.data, l.data + l.rows * l.vocab);
      INFO(dtype_name(dtype) << " on " << cpu::isa_name(isa));
      if (first.empty())
        first = rows;
      else
        CHECK(rows_equal(rows, first));
    }
  }
}

TEST_CASE("every quantised type: batch invariant, the same logits on every instruction set",
          "[cpu][invariants]") {
  for (DType dtype : all_dtypes()) {
    if (is_float_dtype(dtype)) continue;  // the test cases above
    const bool k = dtype_block_elems(dtype) == 256;
    const test::RandomModel m =
        test::make_random_model(k ? test::small_k() : test::small_llama(), dtype, 7);
    INFO(dtype_name(dtype) << " on " << cpu::isa_name(cpu::default_isa()));
    const std::vector<token_t> tokens = random_tokens(24, m.config.vocab_size, 3);
    Transformer model(m.config, m.weights, {.threads = 2});
    const std::vector<float> single =
        run_in_chunks(model, tokens, std::vector<std::size_t>(tokens.size(), 1));
    for (float v : single) REQUIRE(std::isfinite(v));
    for (const std::vector<std::size_t>& sizes :
         {std::vector<std::size_t>{16, 8}, {5, 2, 9, 4, 1, 3}, {24}}) {
      model.reset();
      CHECK(rows_equal(run_in_chunks(model, tokens, sizes), single));
    }
    // The weights repacked at load (on AVX512-VNNI) and the file's layout: the same bits.
    CHECK((model.repacked_bytes() > 0) == cpu::repack_helps(cpu::default_isa(), dtype));
    Transformer file_layout(m.config, m.weights, {.threads = 2, .repack_weights = false});
    CHECK(file_layout.repacked_bytes() == 0);
    CHECK(rows_equal(run_in_chunks(file_layout, tokens, {24}), single));
    for (Isa isa : {Isa::portable, Isa::avx2, Isa::avx512, Isa::amx}) {
      if (!cpu::isa_supported(isa)) continue;
      const IsaOverride use(isa);
      Transformer one(m.config, m.weights, {.threads = 1});
      const LogitsView l = one.forward(tokens);
      INFO(cpu::isa_name(isa));
      CHECK(rows_equal(std::vector<float>(l.data, l.data + l.rows * l.vocab), single));
    }
  }
}

TEST_CASE("a tensor type the backend cannot compute fails at load, by file, tensor and type",
          "[cpu][invariants]") {
  // Every DType has kernels, so what is left to refuse are the ggml types outside DType: the
  // GGUF loader names them (the Transformer's own check stays for types added later).
  for (DType t : all_dtypes()) CHECK(cpu::has_matmul_kernel(t));
  test::GgufWriter w = test::tiny_gguf(test::TinyModel{});
  auto* t = w.find_tensor("blk.0.ffn_down.weight");
  t->type = test::kGgmlIQ2_XS;
  t->shape = {1, 256};
  t->data = test::Bytes(74);
  const std::filesystem::path path =
      std::filesystem::temp_directory_path() / "specdec-test-iq2_xs.gguf";
  const test::Bytes bytes = w.build();
  std::ofstream(path, std::ios::binary)
      .write(reinterpret_cast<const char*>(bytes.data()),
             static_cast<std::streamsize>(bytes.size()));
  CHECK_THROWS_WITH(load_model(path.string()), Catch::Contains(path.string()) &&
                                                   Catch::Contains("blk.0.ffn_down.weight") &&
                                                   Catch::Contains("IQ2_XS"));
  std::filesystem::remove(path);
}

TEST_CASE("f16 KV cache stays close to f32", "[cpu][invariants]") {
  const test::RandomModel m = test::make_random_model(test::small_llama(), DType::f32, 3);
  const std::vector<token_t> tokens = random_tokens(30, m.config.vocab_size, 4);
  Transformer a(m.config, m.weights, {.threads = 1, .kv_type = KvType::f32});
  Transformer b(m.config, m.weights, {.threads = 1, .kv_type = KvType::f16});
  const LogitsView la = a.forward(tokens);
  const LogitsView lb = b.forward(tokens);
  double worst = 0, scale = 0;
  for (std::size_t i = 0; i < la.rows * la.vocab; ++i) {
    worst = std::max(worst, static_cast<double>(std::fabs(la.data[i] - lb.data[i])));
    scale = std::max(scale, static_cast<double>(std::fabs(la.data[i])));
  }
  CHECK(worst <= 1e-2 * scale);  // f16 keeps 11 significant bits
  CHECK(b.kv_cache_bytes() * 2 == a.kv_cache_bytes());
}

// Options::head_tokens (the restricted draft head): the logits of the listed ids are bitwise
// the whole head's, every other logit is kMaskedLogit, for a prefix of the ids (read in place) and
// for a list that is not a prefix (rows copied), in one call and in steps of several sequences.
TEST_CASE("a restricted output head computes exactly the listed rows", "[cpu][invariants]") {
  for (const DType dtype : {DType::f32, DType::q8_0, DType::q6_k}) {
    const test::RandomModel m = test::make_random_model(
        dtype == DType::q6_k ? test::small_k() : test::small_qwen(), dtype, 7);
    const std::size_t vocab = m.config.vocab_size;
    INFO(dtype_name(dtype));
    const std::vector<token_t> tokens = random_tokens(12, vocab, 3);
    Transformer whole(m.config, m.weights, {.threads = 2});
    const LogitsView w = whole.forward(tokens);
    const std::vector<float> reference(w.data, w.data + w.rows * w.vocab);
    std::vector<token_t> scattered;
    for (std::size_t i = 1; i < vocab; i += 3) scattered.push_back(static_cast<token_t>(i));
    for (const std::vector<token_t>& ids : {cpu::first_tokens(vocab / 2), scattered}) {
      // The head repacked (on AVX512-VNNI: Q6_K) and in the file's layout.
      Transformer head(m.config, m.weights, {.threads = 2, .head_tokens = ids});
      Transformer head_file_layout(m.config, m.weights,
                                   {.threads = 2, .head_tokens = ids, .repack_weights = false});
      std::vector<bool> listed(vocab, false);
      for (const token_t id : ids) listed[static_cast<std::size_t>(id)] = true;
      for (const std::vector<std::size_t>& sizes :
           {std::vector<std::size_t>{12}, std::vector<std::size_t>{1, 4, 7}}) {
        head.reset();
        head_file_layout.reset();
        const std::vector<float> rows = run_in_chunks(head, tokens, sizes);
        CHECK(rows_equal(run_in_chunks(head_file_layout, tokens, sizes), rows));
        std::size_t mismatches = 0;
        for (std::size_t t = 0; t < tokens.size(); ++t)
          for (std::size_t v = 0; v < vocab; ++v) {
            const float got = rows[t * vocab + v];
            const float want = listed[v] ? reference[t * vocab + v] : cpu::kMaskedLogit;
            if (std::memcmp(&got, &want, sizeof(float)) != 0) ++mismatches;
          }
        CHECK(mismatches == 0);
      }
    }
  }
  const test::RandomModel m = test::make_random_model(test::small_llama(), DType::f32, 1);
  const auto vocab = static_cast<token_t>(m.config.vocab_size);
  for (const std::vector<token_t>& bad : {std::vector<token_t>{0, vocab}, std::vector<token_t>{-1},
                                          std::vector<token_t>{3, 2}, std::vector<token_t>{1, 1}})
    CHECK_THROWS_WITH(Transformer(m.config, m.weights, {.threads = 1, .head_tokens = bad}),
                      Catch::Contains("head_tokens"));
}

TEST_CASE("interface errors leave the cache unchanged", "[cpu][invariants]") {
  const test::RandomModel m = test::make_random_model(test::small_llama(), DType::f32, 1);
  Transformer model(m.config, m.weights, {.threads = 1, .context_length = 8});
  CHECK(model.context_length() == 8);
  CHECK(model.vocab_size() == m.config.vocab_size);
  const std::vector<token_t> four = {1, 2, 3, 4};
  model.forward(four);
  CHECK_THROWS_AS(model.forward({}), Error);
  const std::vector<token_t> bad = {1, static_cast<token_t>(m.config.vocab_size)};
  CHECK_THROWS_WITH(model.forward(bad), Catch::Contains("outside the vocabulary"));
  const std::vector<token_t> negative = {-1};
  CHECK_THROWS_AS(model.forward(negative), Error);
  const std::vector<token_t> five = {1, 2, 3, 4, 5};
  CHECK_THROWS_WITH(model.forward(five), Catch::Contains("context length"));
  CHECK(model.cached() == 4);
  CHECK_THROWS_AS(model.rollback(5), Error);
  model.rollback(0);
  CHECK(model.cached() == 0);
  CHECK(model.forward(std::span(five).first(4)).rows ==
        4);  // positions 0..3 again, then 4 more fit
  CHECK(model.forward(four).rows == 4);
  CHECK(model.cached() == 8);
}

TEST_CASE("missing or mis-shaped tensors are reported by name", "[cpu][invariants]") {
  test::RandomModel m = test::make_random_model(test::small_llama(), DType::f32, 1);
  ModelConfig wrong = m.config;
  wrong.ffn_dim = 128;
  CHECK_THROWS_WITH(Transformer(wrong, m.weights), Catch::Contains("blk.0.ffn_gate.weight"));
  ModelConfig more_layers = m.config;
  more_layers.n_layers = 3;
  CHECK_THROWS_WITH(Transformer(more_layers, m.weights), Catch::Contains("blk.2."));
  ModelConfig with_bias = m.config;
  with_bias.qkv_bias = true;
  CHECK_THROWS_WITH(Transformer(with_bias, m.weights), Catch::Contains("attn_q.bias"));
}
