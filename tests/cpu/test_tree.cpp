// Token trees in the CPU Transformer (forward_tree, accept_path), checked with memcmp on
// random-weight models:
//  - tree invariance: row i of forward_tree() is bitwise the last row of forward() over the path
//    to node i after the same prefix, for every node of trees of several shapes (chains, wide
//    and deep branches, several roots), weight types, KV types and instruction sets;
//  - extend_tree(): a tree scored in parts (node by node, or in two) gives bitwise the rows of
//    forward_tree() over the whole tree;
//  - accept_path(): after keeping any root-to-node path, the cache is the one forward() of the
//    path's tokens would have left: the next forward() gives bitwise the same rows;
//  - the interface errors, which leave the cache unchanged.
#include <cstring>
#include <random>
#include <vector>

#include "random_model.hpp"
#include "specdec/cpu/kernels.hpp"
#include "specdec/cpu/transformer.hpp"
#include "specdec_test.hpp"
#include "token_trees.hpp"

namespace {

using namespace specdec;
using cpu::Isa;
using cpu::Transformer;
using test::path_to;
using test::same_row;
using test::tokens_of;
using test::tree_shapes;

std::vector<token_t> random_tokens(std::size_t n, std::size_t vocab, std::mt19937& rng) {
  std::uniform_int_distribution<token_t> d(0, static_cast<token_t>(vocab) - 1);
  std::vector<token_t> t(n);
  for (auto& x : t) x = d(rng);
  return t;
}

struct IsaOverride {
  explicit IsaOverride(Isa isa) { cpu::set_isa_override(isa); }
  ~IsaOverride() { cpu::set_isa_override(std::nullopt); }
};

/// Every node's row against the forward of its path, then accept_path() for several paths
/// against forward() of the path's tokens, on one model.
void check_model(const test::RandomModel& m, KvType kv, std::mt19937& rng) {
  const std::size_t vocab = m.config.vocab_size;
  Transformer tree_model(m.config, m.weights, {.threads = 2, .kv_type = kv});
  Transformer reference(m.config, m.weights, {.threads = 1, .kv_type = kv});
  const std::vector<token_t> prefix = random_tokens(21, vocab, rng);
  for (const std::vector<std::int32_t>& parents : tree_shapes()) {
    const std::vector<token_t> tokens = random_tokens(parents.size(), vocab, rng);
    INFO("tree of " << parents.size() << " nodes");
    tree_model.reset();
    tree_model.forward(prefix);
    const LogitsView tree = tree_model.forward_tree(tokens, parents);
    const std::vector<float> rows(tree.data, tree.data + tree.rows * tree.vocab);
    CHECK(tree_model.cached() == prefix.size());

    // The same tree in parts: node by node, then the first half and the rest.
    for (const std::size_t part : {std::size_t{1}, (parents.size() + 1) / 2}) {
      INFO("extend_tree in parts of " << part);
      tree_model.rollback(prefix.size());
      for (std::size_t first = 0; first < parents.size(); first += part) {
        const std::size_t n = std::min(part, parents.size() - first);
        const LogitsView some = tree_model.extend_tree(std::span(tokens).subspan(first, n),
                                                       std::span(parents).subspan(first, n));
        REQUIRE(some.rows == n);
        CHECK(std::memcmp(some.data, rows.data() + first * vocab, n * vocab * sizeof(float)) == 0);
      }
      CHECK(tree_model.cached() == prefix.size());
    }

    reference.reset();
    reference.forward(prefix);
    for (std::size_t node = 0; node < parents.size(); ++node) {
      const std::vector<std::size_t> path = path_to(parents, node);
      const LogitsView plain = reference.forward(tokens_of(tokens, path));
      INFO("node " << node << " at depth " << path.size() - 1);
      CHECK(same_row(rows.data() + node * vocab, plain.data + (plain.rows - 1) * vocab, vocab));
      reference.rollback(prefix.size());
    }

    // Keep the path to each leaf-ish node (and the empty path), then continue with two tokens.
    const std::vector<token_t> next = random_tokens(2, vocab, rng);
    for (std::size_t node : {parents.size() - 1, parents.size() / 2, std::size_t{0}}) {
      const std::vector<std::size_t> path = path_to(parents, node);
      for (const int how : {0, 1, 2}) {  // the whole tree; an empty path; the tree in two parts
        const bool empty = how == 1;
        INFO("accepting the path to node " << node << (empty ? " (empty)" : "")
                                           << (how == 2 ? " of a tree extended once" : ""));
        tree_model.rollback(prefix.size());
        if (how == 2) {
          const std::size_t half = (parents.size() + 1) / 2;
          tree_model.extend_tree(std::span(tokens).first(half), std::span(parents).first(half));
          if (half < parents.size())
            tree_model.extend_tree(std::span(tokens).subspan(half),
                                   std::span(parents).subspan(half));
        } else {
          tree_model.forward_tree(tokens, parents);
        }
        const std::vector<std::size_t> kept = empty ? std::vector<std::size_t>{} : path;
        tree_model.accept_path(kept);
        CHECK(tree_model.cached() == prefix.size() + kept.size());
        const LogitsView after = tree_model.forward(next);
        const std::vector<float> after_rows(after.data, after.data + after.rows * after.vocab);

        reference.rollback(prefix.size());
        std::vector<token_t> plain_tokens = tokens_of(tokens, kept);
        plain_tokens.insert(plain_tokens.end(), next.begin(), next.end());
        const LogitsView plain = reference.forward(plain_tokens);
        CHECK(std::memcmp(after_rows.data(), plain.data + kept.size() * vocab,
                          after_rows.size() * sizeof(float)) == 0);
      }
    }
  }
}

}  // namespace

TEST_CASE(
    "a token tree's rows are bitwise the forward of each node's path, and a kept path is "
    "the cache forward() would leave",
    "[cpu][tree]") {
  std::mt19937 rng(17);
  for (const bool qwen : {false, true}) {
    for (DType dtype : {DType::f32, DType::q8_0, DType::q4_0}) {
      for (KvType kv : {KvType::f32, KvType::f16}) {
        const test::RandomModel m =
            test::make_random_model(qwen ? test::small_qwen() : test::small_llama(), dtype, 5);
        INFO((qwen ? "qwen-like " : "llama ")
             << dtype_name(dtype) << " kv " << (kv == KvType::f16 ? "f16" : "f32") << " on "
             << cpu::isa_name(cpu::default_isa()));
        check_model(m, kv, rng);
      }
    }
  }
  // The K-quants (256-weight blocks), and every instruction set's attention kernel.
  const test::RandomModel k = test::make_random_model(test::small_k(), DType::q4_k, 8);
  for (Isa isa : {Isa::portable, Isa::avx2, Isa::avx512, Isa::amx}) {
    if (!cpu::isa_supported(isa)) continue;
    const IsaOverride use(isa);
    INFO("q4_k on " << cpu::isa_name(isa));
    check_model(k, KvType::f32, rng);
  }
}

TEST_CASE(
    "forward_tree, extend_tree and accept_path refuse bad trees and paths, leaving the cache "
    "unchanged",
    "[cpu][tree]") {
  const test::RandomModel m = test::make_random_model(test::small_llama(), DType::f32, 3);
  Transformer model(m.config, m.weights, {.threads = 1});
  model.forward(std::vector<token_t>{1, 2, 3});
  const std::vector<token_t> tokens{4, 5, 6};
  const auto refused = [&](auto&& call, const char* words) {
    CHECK_THROWS_WITH(call(), Catch::Matchers::Contains(words));
    CHECK(model.cached() == 3);
  };
  refused([&] { model.forward_tree(tokens, std::vector<std::int32_t>{-1, 0}); }, "3 tokens but 2");
  refused(
      [&] {
        model.forward_tree(tokens, std::vector<std::int32_t>{-1, 2, 0});
      },
      "node 1 has parent 2");
  refused(
      [&] {
        model.forward_tree(tokens, std::vector<std::int32_t>{0, 0, 1});
      },
      "node 0 has parent 0");
  refused(
      [&] {
        model.forward_tree(tokens, std::vector<std::int32_t>{-1, -2, 0});
      },
      "node 1 has parent -2");
  refused(
      [&] {
        model.forward_tree(std::vector<token_t>{4, 160}, std::vector<std::int32_t>{-1, 0});
      },
      "outside the vocabulary");
  refused([&] { model.forward_tree(std::vector<token_t>{}, std::vector<std::int32_t>{}); },
          "no tokens");
  refused(
      [&] { model.forward_tree(std::vector<token_t>(94, 1), std::vector<std::int32_t>(94, -1)); },
      "exceed the context length");
  refused([&] { model.accept_path(std::vector<std::size_t>{0}); }, "no forward_tree()");
  // extend_tree: parents index the whole tree, the nodes already there count against the context.
  model.forward_tree(tokens, std::vector<std::int32_t>{-1, 0, 0});
  refused(
      [&] {
        model.extend_tree(tokens, std::vector<std::int32_t>{2, 5, 0});
      },
      "node 4 has parent 5");
  refused([&] { model.extend_tree(tokens, std::vector<std::int32_t>{3, 1}); }, "3 tokens but 2");
  refused(
      [&] { model.extend_tree(std::vector<token_t>(91, 1), std::vector<std::int32_t>(91, -1)); },
      "3 tree nodes + 91 new ones exceed the context length");
  model.extend_tree(std::vector<token_t>{9}, std::vector<std::int32_t>{2});  // node 3
  model.accept_path(std::vector<std::size_t>{0, 2, 3});
  CHECK(model.cached() == 6);
  model.rollback(3);

  model.forward_tree(tokens, std::vector<std::int32_t>{-1, 0, 0});
  // A refused tree leaves the pending one as it was.
  refused([&] { model.forward_tree(tokens, std::vector<std::int32_t>{-1, 2, 0}); }, "has parent 2");
  refused([&] { model.accept_path(std::vector<std::size_t>{1}); }, "has parent 0, not -1");
  refused([&] { model.accept_path(std::vector<std::size_t>{0, 1, 2}); }, "has parent 0, not 1");
  refused([&] { model.accept_path(std::vector<std::size_t>{0, 3}); }, "not in the tree of 3");
  model.accept_path(std::vector<std::size_t>{0, 2});
  CHECK(model.cached() == 5);
  // The tree is gone once a path was kept, or once anything else changed the cache.
  CHECK_THROWS_WITH(model.accept_path(std::vector<std::size_t>{0}),
                    Catch::Matchers::Contains("no forward_tree()"));
  model.forward_tree(tokens, std::vector<std::int32_t>{-1, 0, 0});
  model.forward(std::vector<token_t>{7});
  CHECK_THROWS_WITH(model.accept_path(std::vector<std::size_t>{0}),
                    Catch::Matchers::Contains("no forward_tree()"));
  model.forward_tree(tokens, std::vector<std::int32_t>{-1, 0, 0});
  model.rollback(5);
  CHECK_THROWS_WITH(model.accept_path(std::vector<std::size_t>{0}),
                    Catch::Matchers::Contains("no forward_tree()"));
}
