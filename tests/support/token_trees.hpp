#pragma once
// Token trees for the backends' tree tests (tests/cpu/test_tree.cpp, tests/cuda/tree_test.cpp):
// the shapes every backend is checked on, and the path of a node, whose plain forward a tree
// row must equal bit for bit.

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <vector>

#include "specdec/common.hpp"

namespace specdec::test {

/// Tree shapes: parents arrays (-1: after the cached prefix).
inline std::vector<std::vector<std::int32_t>> tree_shapes() {
  return {
      {-1},                                                // one node
      {-1, 0, 1, 2, 3},                                    // a chain (a verify step)
      {-1, 0, 0, 0, 1, 1, 2, 4, 4, 7},                     // root, three children, deeper branches
      {-1, 0, 1, 0, 3, 1, -1, 6, 6, 8},                    // two roots, interleaved node order
      {-1, 0, 0, 1, 1, 2, 2, 3, 3, 4, 4, 5, 5, 6, 6, 14},  // a binary tree of 16 nodes
  };
}

/// Trees of more than 16 nodes (a CUDA target scores them in several steps of 16): a chain of
/// 33 nodes (a path across two step boundaries) and 64 nodes, a ternary tree of 40 with a chain
/// of 24 below its last node (so deep paths and wide levels both span steps).
inline std::vector<std::vector<std::int32_t>> large_tree_shapes() {
  std::vector<std::int32_t> chain(33);
  for (std::size_t i = 0; i < chain.size(); ++i) chain[i] = static_cast<std::int32_t>(i) - 1;
  std::vector<std::int32_t> wide_deep(64);
  for (std::size_t i = 0; i < wide_deep.size(); ++i) {
    const auto node = static_cast<std::int32_t>(i);
    wide_deep[i] = i == 0 ? -1 : i < 40 ? (node - 1) / 3 : node - 1;
  }
  return {chain, wide_deep};
}

/// The nodes from a root (parent -1) down to `node`.
inline std::vector<std::size_t> path_to(const std::vector<std::int32_t>& parents,
                                        std::size_t node) {
  std::vector<std::size_t> path;
  for (std::int64_t a = static_cast<std::int64_t>(node); a >= 0;
       a = parents[static_cast<std::size_t>(a)])
    path.insert(path.begin(), static_cast<std::size_t>(a));
  return path;
}

/// The tokens of the nodes `path`.
inline std::vector<token_t> tokens_of(const std::vector<token_t>& tokens,
                                      const std::vector<std::size_t>& path) {
  std::vector<token_t> out;
  for (std::size_t node : path) out.push_back(tokens[node]);
  return out;
}

/// Whether two logits rows of `vocab` entries have the same bits.
inline bool same_row(const float* a, const float* b, std::size_t vocab) {
  return std::memcmp(a, b, vocab * sizeof(float)) == 0;
}

}  // namespace specdec::test
