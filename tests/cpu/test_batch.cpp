// Transformer::forward_batch: several sequences (one Transformer each, over one WeightStore) in
// one forward. Each sequence's logits must be bitwise those of its own forward() — what makes a
// server's batched verification exact — for every weight dtype, both KV cache types (also mixed
// in one batch), sequences at different positions and of different lengths, steps cut at 256
// tokens; and the refusals leave every cache unchanged.
#include <cstring>
#include <random>
#include <vector>

#include "random_model.hpp"
#include "specdec/cpu/transformer.hpp"
#include "specdec_test.hpp"

namespace {

using namespace specdec;
using cpu::Transformer;

std::vector<token_t> random_tokens(std::size_t n, std::size_t vocab, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_int_distribution<token_t> d(0, static_cast<token_t>(vocab) - 1);
  std::vector<token_t> t(n);
  for (auto& x : t) x = d(rng);
  return t;
}

std::vector<float> copy_rows(const LogitsView& l) {
  return std::vector<float>(l.data, l.data + l.rows * l.vocab);
}

bool same_bits(const std::vector<float>& a, const LogitsView& b) {
  return a.size() == b.rows * b.vocab &&
         std::memcmp(a.data(), b.data, a.size() * sizeof(float)) == 0;
}

}  // namespace

TEST_CASE("forward_batch gives every sequence bitwise the logits of its own forward",
          "[cpu][batch]") {
  for (const bool qwen : {false, true}) {
    for (DType dtype : {DType::f32, DType::f16, DType::bf16, DType::q8_0}) {
      const test::RandomModel m =
          test::make_random_model(qwen ? test::small_qwen() : test::small_llama(), dtype, 7);
      const std::size_t vocab = m.config.vocab_size;
      INFO((qwen ? "qwen-like " : "llama ") << dtype_name(dtype));
      // Three sequences with different prompts (so different positions), one with an f16 cache.
      const std::vector<std::vector<token_t>> prompts = {
          random_tokens(9, vocab, 1), random_tokens(3, vocab, 2), random_tokens(17, vocab, 3)};
      const KvType kv_types[] = {KvType::f32, KvType::f16, KvType::f32};
      // Rounds of inputs: verify-sized (k + 1 tokens, differing per sequence), single tokens,
      // and one that is longer than a step of 256 tokens in all (a prefill-sized batch).
      const std::vector<std::vector<std::size_t>> rounds = {
          {5, 1, 3}, {1, 1, 1}, {4, 2, 9}, {200, 70, 3}};

      std::vector<Transformer> alone, batched;
      for (std::size_t b = 0; b < 3; ++b) {
        alone.emplace_back(
            m.config, m.weights,
            cpu::Options{.threads = 2, .kv_type = kv_types[b], .context_length = 512});
        batched.emplace_back(
            m.config, m.weights,
            cpu::Options{.threads = 2, .kv_type = kv_types[b], .context_length = 512});
        alone[b].forward(prompts[b]);
        batched[b].forward(prompts[b]);
      }
      unsigned seed = 100;
      for (const auto& sizes : rounds) {
        std::vector<std::vector<token_t>> inputs;
        for (std::size_t b = 0; b < 3; ++b)
          inputs.push_back(random_tokens(sizes[b], vocab, seed++));
        std::vector<std::vector<float>> expected;
        for (std::size_t b = 0; b < 3; ++b)
          expected.push_back(copy_rows(alone[b].forward(inputs[b])));
        Transformer* models[] = {&batched[0], &batched[1], &batched[2]};
        const std::span<const token_t> spans[] = {inputs[0], inputs[1], inputs[2]};
        const std::vector<LogitsView> got = Transformer::forward_batch(models, spans);
        REQUIRE(got.size() == 3);
        for (std::size_t b = 0; b < 3; ++b) {
          INFO("sequence " << b << ", " << sizes[b] << " tokens");
          CHECK(got[b].rows == sizes[b]);
          CHECK(same_bits(expected[b], got[b]));
          CHECK(batched[b].cached() == alone[b].cached());
        }
        // Roll back like a rejected draft, differently per sequence.
        for (std::size_t b = 0; b < 3; ++b) {
          const std::size_t keep = alone[b].cached() - (sizes[b] > 1 ? b % sizes[b] : 0);
          alone[b].rollback(keep);
          batched[b].rollback(keep);
        }
      }
    }
  }
}

TEST_CASE("forward_batch with token trees: each tree bitwise its forward_tree, kept by accept_path",
          "[cpu][batch][tree]") {
  const test::RandomModel m = test::make_random_model(test::small_qwen(), DType::q8_0, 9);
  const std::size_t vocab = m.config.vocab_size;
  const std::vector<std::vector<token_t>> prompts = {
      random_tokens(7, vocab, 1), random_tokens(12, vocab, 2), random_tokens(4, vocab, 3)};
  // Sequence 0 and 2 score trees, sequence 1 a chain; in the second round sequence 1's chain of
  // 250 tokens leaves no room for sequence 2's tree in its step (the tree goes to the next).
  const std::vector<std::int32_t> tree0 = {-1, 0, 0, 1, 1, 2}, tree2 = {-1, 0, 1, 0, 3};
  const std::vector<std::size_t> chain_sizes = {3, 250};
  std::vector<Transformer> alone, batched;
  for (std::size_t b = 0; b < 3; ++b) {
    alone.emplace_back(m.config, m.weights, cpu::Options{.threads = 2, .context_length = 600});
    batched.emplace_back(m.config, m.weights, cpu::Options{.threads = 2, .context_length = 600});
    alone[b].forward(prompts[b]);
    batched[b].forward(prompts[b]);
  }
  unsigned seed = 40;
  for (const std::size_t chain : chain_sizes) {
    INFO("chain of " << chain);
    const std::vector<std::vector<token_t>> inputs = {random_tokens(tree0.size(), vocab, seed++),
                                                      random_tokens(chain, vocab, seed++),
                                                      random_tokens(tree2.size(), vocab, seed++)};
    const std::vector<float> e0 = copy_rows(alone[0].forward_tree(inputs[0], tree0));
    const std::vector<float> e1 = copy_rows(alone[1].forward(inputs[1]));
    const std::vector<float> e2 = copy_rows(alone[2].forward_tree(inputs[2], tree2));
    Transformer* models[] = {&batched[0], &batched[1], &batched[2]};
    const std::span<const token_t> spans[] = {inputs[0], inputs[1], inputs[2]};
    const std::span<const std::int32_t> trees[] = {tree0, {}, tree2};
    const std::vector<LogitsView> got = Transformer::forward_batch(models, spans, trees);
    CHECK(same_bits(e0, got[0]));
    CHECK(same_bits(e1, got[1]));
    CHECK(same_bits(e2, got[2]));
    CHECK(batched[0].cached() == alone[0].cached());
    CHECK(batched[1].cached() == alone[1].cached());
    // The batched models kept their trees: accept_path as alone, then the same next rows.
    const std::vector<std::size_t> path0 = {0, 1, 4}, path2 = {0, 3, 4};
    alone[0].accept_path(path0);
    batched[0].accept_path(path0);
    alone[2].accept_path(path2);
    batched[2].accept_path(path2);
    const std::vector<token_t> next = random_tokens(2, vocab, seed++);
    for (const std::size_t b : {std::size_t{0}, std::size_t{2}})
      CHECK(same_bits(copy_rows(alone[b].forward(next)), batched[b].forward(next)));
  }
  // A bad tree refuses the whole batch and changes no cache.
  Transformer* models[] = {&batched[0], &batched[1]};
  const std::vector<token_t> t = {1, 2};
  const std::span<const token_t> spans[] = {t, t};
  const std::vector<std::int32_t> bad = {-1, 1};
  const std::span<const std::int32_t> trees[] = {{}, bad};
  const std::size_t before = batched[0].cached();
  CHECK_THROWS_WITH(Transformer::forward_batch(models, spans, trees),
                    Catch::Contains("node 1 has parent 1"));
  CHECK(batched[0].cached() == before);
  const std::span<const std::int32_t> one_tree[] = {bad};
  CHECK_THROWS_WITH(Transformer::forward_batch(models, spans, one_tree),
                    Catch::Contains("2 models but 1 trees"));
}

TEST_CASE("forward_batch of one sequence is forward(), and a subset of the sequences may sit out",
          "[cpu][batch]") {
  const test::RandomModel m = test::make_random_model(test::small_llama(), DType::q8_0, 3);
  const std::size_t vocab = m.config.vocab_size;
  Transformer a(m.config, m.weights, {.threads = 2}), b(m.config, m.weights, {.threads = 2}),
      c(m.config, m.weights, {.threads = 2});
  const std::vector<token_t> x = random_tokens(6, vocab, 1), y = random_tokens(4, vocab, 2);
  const std::vector<float> expected_x = copy_rows(a.forward(x));
  a.reset();
  Transformer* one[] = {&b};
  const std::span<const token_t> one_input[] = {x};
  CHECK(same_bits(expected_x, Transformer::forward_batch(one, one_input)[0]));
  // c advances alone (a plain forward), then b and c together: both hold x, then get y.
  c.forward(x);
  a.forward(x);
  const std::vector<float> expected_y = copy_rows(a.forward(y));
  Transformer* two[] = {&c, &b};
  const std::span<const token_t> two_inputs[] = {y, y};
  const auto got = Transformer::forward_batch(two, two_inputs);
  CHECK(same_bits(expected_y, got[0]));
  CHECK(same_bits(expected_y, got[1]));
  CHECK(Transformer::forward_batch({}, {}).empty());
}

TEST_CASE("forward_batch refuses what it cannot batch and leaves every cache unchanged",
          "[cpu][batch]") {
  const test::RandomModel m = test::make_random_model(test::small_llama(), DType::f32, 4);
  const test::RandomModel other = test::make_random_model(test::small_llama(), DType::f32, 5);
  const std::size_t vocab = m.config.vocab_size;
  Transformer a(m.config, m.weights, {.threads = 2, .context_length = 16}),
      b(m.config, m.weights, {.threads = 2, .context_length = 16});
  Transformer foreign(other.config, other.weights, {.threads = 2});
  Transformer one_thread(m.config, m.weights, {.threads = 1});
  a.forward(random_tokens(3, vocab, 1));
  const std::vector<token_t> ok = random_tokens(2, vocab, 2), empty;
  const std::vector<token_t> bad_token = {0, static_cast<token_t>(vocab)};
  const std::vector<token_t> too_long = random_tokens(15, vocab, 3);  // a holds 3 of 16

  auto refused = [&](std::vector<Transformer*> models, std::vector<std::span<const token_t>> in,
                     const char* message) {
    CHECK_THROWS_WITH(Transformer::forward_batch(models, in), Catch::Contains(message));
    CHECK(a.cached() == 3);
    CHECK(b.cached() == 0);
  };
  refused({&a, &b}, {ok}, "2 models but 1 inputs");
  refused({&a, &a}, {ok, ok}, "appears twice");
  refused({&a, &foreign}, {ok, ok}, "other weights");
  refused({&a, &one_thread}, {ok, ok}, "same Options::threads");
  refused({&b, &a}, {ok, empty}, "no tokens");
  refused({&b, &a}, {ok, bad_token}, "outside the vocabulary");
  refused({&b, &a}, {ok, too_long}, "exceed the context length 16");
}
