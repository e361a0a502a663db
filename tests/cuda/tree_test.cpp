// Token trees in cuda::Transformer (forward_tree, extend_tree, accept_path), checked with memcmp
// against the same backend's plain forward():
//  - tree invariance: row i of forward_tree() is bitwise the last row of forward() over the path
//    to node i after the same prefix, for trees of several shapes, on the tinyllama draft (F16
//    weights, f16 KV) and on the K-quant and 32-block random models (f32 KV), with CUDA graphs
//    and without; on the random models also trees of 33 and 64 nodes (several steps of 16: the
//    plain forwards run in steps of 16 too, Options::max_step_tokens);
//  - extend_tree(): node by node and in two parts, the rows forward_tree() gives;
//  - accept_path(): the next forward() after keeping a path gives bitwise the rows it gives after
//    forward() of the path's tokens (the K/V rows were moved into place);
//  - the interface errors, which leave the cache and the pending tree unchanged.
// The attention kernel's own tree test is in gemm_attention_test.cpp.
#include <cstring>
#include <random>
#include <span>
#include <vector>

#include "model_f16.hpp"
#include "quantised_model.hpp"
#include "specdec/cuda/transformer.hpp"
#include "support.hpp"
#include "token_trees.hpp"

namespace {

using specdec::LogitsView;
using specdec::token_t;
using specdec::cuda::Transformer;
using specdec::test::path_to;
using specdec::test::same_row;
using specdec::test::tokens_of;
using specdec::test::tree_shapes;

std::vector<float> host_rows(Transformer& m, const LogitsView& v) {
  REQUIRE(v.where == specdec::Memory::device);
  std::vector<float> out(v.rows * v.vocab);
  m.copy_logits_to_host(out);
  return out;
}

std::vector<token_t> random_tokens(std::size_t n, std::size_t vocab, std::mt19937& rng) {
  std::uniform_int_distribution<token_t> d(3, static_cast<token_t>(vocab) - 1);
  std::vector<token_t> t(n);
  for (auto& x : t) x = d(rng);
  return t;
}

/// Tree invariance, extend_tree and accept_path on one model (see the top of the file).
void check_model(const specdec::ModelConfig& config,
                 std::shared_ptr<const specdec::WeightStore> weights,
                 specdec::cuda::Options options, std::size_t prefix_length, bool all_paths,
                 const std::vector<std::vector<std::int32_t>>& shapes) {
  std::mt19937 rng(11);
  const std::size_t vocab = config.vocab_size;
  Transformer tree_model(config, weights, options);
  options.cuda_graphs = !options.cuda_graphs;  // the plain forwards take the other launch path
  Transformer reference(config, weights, options);
  const std::vector<token_t> prefix = random_tokens(prefix_length, vocab, rng);
  (void)reference.forward(prefix);
  for (const std::vector<std::int32_t>& parents : shapes) {
    const std::vector<token_t> tokens = random_tokens(parents.size(), vocab, rng);
    INFO("tree of " << parents.size() << " nodes after " << prefix.size() << " tokens");
    tree_model.reset();
    (void)tree_model.forward(prefix);
    const std::vector<float> rows = host_rows(tree_model, tree_model.forward_tree(tokens, parents));
    CHECK(tree_model.cached() == prefix.size());

    // Row i is the plain forward's last row of the path to node i.
    for (std::size_t node = 0; node < parents.size(); ++node) {
      if (!all_paths && node + 3 < parents.size() && node % 3 != 0) continue;
      const std::vector<token_t> path = tokens_of(tokens, path_to(parents, node));
      reference.rollback(prefix.size());
      const std::vector<float> plain = host_rows(reference, reference.forward(path));
      INFO("node " << node << " at depth " << path.size() - 1);
      REQUIRE(
          same_row(rows.data() + node * vocab, plain.data() + (path.size() - 1) * vocab, vocab));
    }

    // The same tree in parts: node by node, then the first half and the rest.
    for (const std::size_t part : {std::size_t{1}, (parents.size() + 1) / 2}) {
      INFO("extend_tree in parts of " << part);
      tree_model.rollback(prefix.size());
      for (std::size_t first = 0; first < parents.size(); first += part) {
        const std::size_t n = std::min(part, parents.size() - first);
        const std::vector<float> got =
            host_rows(tree_model, tree_model.extend_tree(std::span(tokens).subspan(first, n),
                                                         std::span(parents).subspan(first, n)));
        INFO("nodes " << first << " .. " << first + n - 1);
        REQUIRE(std::memcmp(got.data(), rows.data() + first * vocab, n * vocab * 4) == 0);
      }
    }

    // accept_path then a forward: the rows forward() of the path then of the same token gives.
    for (const std::size_t node : {parents.size() - 1, parents.size() / 2}) {
      const std::vector<std::size_t> path = path_to(parents, node);
      INFO("kept the path to node " << node);
      tree_model.rollback(prefix.size());
      (void)tree_model.forward_tree(tokens, parents);
      tree_model.accept_path(path);
      REQUIRE(tree_model.cached() == prefix.size() + path.size());
      const std::vector<token_t> next = {tokens.back(), 5};
      const std::vector<float> after_tree = host_rows(tree_model, tree_model.forward(next));
      reference.rollback(prefix.size());
      (void)reference.forward(tokens_of(tokens, path));
      const std::vector<float> after_plain = host_rows(reference, reference.forward(next));
      REQUIRE(std::memcmp(after_tree.data(), after_plain.data(), after_plain.size() * 4) == 0);
    }
  }
}

}  // namespace

TEST_CASE("cuda::Transformer::forward_tree: tree invariance, extend_tree, accept_path",
          "[cuda-emu][transformer][tree]") {
  SECTION("quantised random models, f32 KV") {
    for (const auto& m : {specdec::test::k_quant_model(), specdec::test::block32_model()}) {
      auto options = specdec::test::emulator_friendly();
      options.kv_type = specdec::KvType::f32;
      options.context_length = 96;
      options.cuda_graphs = false;
      options.max_step_tokens = 16;  // a path of more than 16 nodes: skinny steps, as decoding
      INFO("head_dim " << m->config.head_dim);
      auto shapes = tree_shapes();
      for (auto& large : specdec::test::large_tree_shapes()) shapes.push_back(std::move(large));
      check_model(m->config, m->quantised, options, 21, true, shapes);
    }
  }
  SECTION("tinyllama draft, F16 weights, f16 KV") {
    const auto model = specdec::test::load_f16("draft-f32.gguf");
    if (!model) {
      WARN("tinyllama-pair not found: skipped");
      return;
    }
    auto options = specdec::test::emulator_friendly();
    options.context_length = 96;
    // 29 prefix tokens: the tree's slots cross a 32-key tile.
    check_model(model->config, model->store, options, 29, false, tree_shapes());
  }
}

TEST_CASE("cuda::Transformer tree errors leave the cache and the pending tree",
          "[cuda-emu][transformer][tree]") {
  const auto m = specdec::test::block32_model();
  auto options = specdec::test::emulator_friendly();
  options.context_length = 12;
  Transformer model(m->config, m->quantised, options);
  const std::vector<token_t> prefix = {1, 5, 9, 12};
  (void)model.forward(prefix);
  using Catch::Contains;
  // accept_path needs a tree scored since the cache last changed.
  CHECK_THROWS_WITH(model.accept_path(std::vector<std::size_t>{0}), Contains("no forward_tree()"));

  const std::vector<token_t> tokens = {7, 8, 9};
  const std::vector<std::int32_t> parents = {-1, 0, 0};
  const std::vector<float> rows = host_rows(model, model.forward_tree(tokens, parents));
  CHECK_THROWS_WITH(model.forward_tree(std::vector<token_t>{}, std::vector<std::int32_t>{}),
                    Contains("no tokens"));
  CHECK_THROWS_WITH(model.extend_tree(std::vector<token_t>{4}, std::vector<std::int32_t>{3}),
                    Contains("node 3 has parent 3"));
  CHECK_THROWS_WITH(model.extend_tree(std::vector<token_t>{4, 5}, std::vector<std::int32_t>{0}),
                    Contains("2 tokens but 1 parents"));
  CHECK_THROWS_WITH(model.extend_tree(std::vector<token_t>{-2}, std::vector<std::int32_t>{0}),
                    Contains("outside the vocabulary"));
  CHECK_THROWS_WITH(
      model.extend_tree(std::vector<token_t>(62, 4), std::vector<std::int32_t>(62, 0)),
      Contains("65 nodes, at most 64"));
  CHECK_THROWS_WITH(model.extend_tree(std::vector<token_t>(6, 4), std::vector<std::int32_t>(6, 0)),
                    Contains("exceed the context length 12"));
  CHECK_THROWS_WITH(model.accept_path(std::vector<std::size_t>{1}),
                    Contains("has parent 0, not -1"));
  CHECK_THROWS_WITH(model.accept_path(std::vector<std::size_t>{0, 3}), Contains("not in the tree"));
  CHECK_THROWS_WITH(model.accept_path(std::vector<std::size_t>{0, 1, 2}),
                    Contains("has parent 0, not 1"));
  CHECK(model.cached() == prefix.size());

  // The refusals left the tree: extending it gives the row forward_tree() of the whole tree gives.
  const std::vector<float> extended =
      host_rows(model, model.extend_tree(std::vector<token_t>{6}, std::vector<std::int32_t>{2}));
  const std::vector<token_t> all_tokens = {7, 8, 9, 6};
  const std::vector<std::int32_t> all_parents = {-1, 0, 0, 2};
  const std::vector<float> whole = host_rows(model, model.forward_tree(all_tokens, all_parents));
  const std::size_t vocab = model.vocab_size();
  CHECK(std::memcmp(whole.data(), rows.data(), rows.size() * 4) == 0);
  CHECK(same_row(whole.data() + 3 * vocab, extended.data(), vocab));
  model.accept_path(std::vector<std::size_t>{0, 2, 3});
  CHECK(model.cached() == prefix.size() + 3);
  // A forward or a rollback ends the tree.
  CHECK_THROWS_WITH(model.accept_path(std::vector<std::size_t>{}), Contains("no forward_tree()"));
  (void)model.forward_tree(tokens, parents);
  model.rollback(2);
  CHECK_THROWS_WITH(model.accept_path(std::vector<std::size_t>{0}), Contains("no forward_tree()"));
}
