#pragma once
// The checks of the token-tree interface (TreeCausalLM, causal_lm.hpp), one copy for every
// backend: the nodes a forward_tree() / extend_tree() adds, and the path accept_path() keeps.
// Each throws specdec::Error prefixed with `who`, the backend's function
// ("cpu::Transformer::forward_tree"), before the backend changes anything.

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "specdec/common.hpp"

namespace specdec {

/// `count` nodes added after `first` earlier ones of a tree: at most `max_nodes` in all, their
/// slots after the `cached` positions within `context`, and one parent each, -1 (the cached
/// prefix) or an earlier node of the whole tree.
inline void check_tree_nodes(std::size_t count, std::span<const std::int32_t> parents,
                             std::size_t first, std::size_t max_nodes, std::size_t cached,
                             std::size_t context, const std::string& who) {
  if (first + count > max_nodes)
    throw Error(who + ": " + std::to_string(first + count) + " nodes, at most " +
                std::to_string(max_nodes) + " are supported");
  if (cached + first > context || count > context - cached - first)
    throw Error(who + ": " + std::to_string(cached) + " cached + " + std::to_string(first) +
                " tree nodes + " + std::to_string(count) + " new ones exceed the context length " +
                std::to_string(context));
  if (parents.size() != count)
    throw Error(who + ": " + std::to_string(count) + " tokens but " +
                std::to_string(parents.size()) + " parents");
  for (std::size_t i = 0; i < count; ++i)
    if (parents[i] < -1 || parents[i] >= static_cast<std::int64_t>(first + i))
      throw Error(who + ": node " + std::to_string(first + i) + " has parent " +
                  std::to_string(parents[i]) +
                  " (must be -1, the cached prefix, or a node before it)");
}

/// depth[i] = the depth of node i of a tree (parents[i] = -1 or an earlier node): 0 for a root.
inline void tree_depths(std::span<const std::int32_t> parents, std::vector<std::size_t>& depth) {
  depth.assign(parents.size(), 0);
  for (std::size_t i = 0; i < parents.size(); ++i)
    if (parents[i] >= 0) depth[i] = depth[static_cast<std::size_t>(parents[i])] + 1;
}

/// Whether `node` has no child in the tree.
inline bool tree_leaf(std::span<const std::int32_t> parents, std::size_t node) {
  for (const std::int32_t parent : parents)
    if (parent == static_cast<std::int64_t>(node)) return false;
  return true;
}

/// `path` is a chain from a root of `tree` (the parents of the tree scored since the cache last
/// changed; empty when there is none): path[0]'s parent is -1, each next node a child of the one
/// before.
inline void check_tree_path(std::span<const std::int32_t> tree, std::span<const std::size_t> path,
                            const std::string& who) {
  if (tree.empty())
    throw Error(who +
                ": no forward_tree() or extend_tree() since the cache last changed (a path is "
                "kept right after the tree was scored)");
  for (std::size_t k = 0; k < path.size(); ++k) {
    const bool in_tree = path[k] < tree.size();
    const std::int64_t want = k == 0 ? -1 : static_cast<std::int64_t>(path[k - 1]);
    if (in_tree && tree[path[k]] == want) continue;
    std::string message = who;
    message += ": node ";
    message += std::to_string(path[k]);
    message += " (at ";
    message += std::to_string(k);
    message += " of the path) ";
    if (!in_tree) {
      message += "is not in the tree of ";
      message += std::to_string(tree.size());
      message += " nodes";
    } else {
      message += "has parent ";
      message += std::to_string(tree[path[k]]);
      message += ", not ";
      message += std::to_string(want);
    }
    throw Error(message);
  }
}

}  // namespace specdec
