#pragma once
// Exact speculative sampling on token trees: verify a tree of drafted tokens against the target
// in one step and keep one root-to-node path of it.
//
// The tree (n >= 1 nodes, topological order):
//   tokens   n      node i's token. Node 0 is the root: the last token already emitted (its
//                   token is not read);
//   parents  n      parents[0] == -1; for i >= 1, 0 <= parents[i] < i. The children of a node are
//                   tried in increasing node index.
// Rows (row-major, Real = float or double):
//   p        n x V  row i = the target's processed distribution of the token after the path
//                   root ... i (one target forward over the tree gives them all);
//   q        n x V  sampled proposals only: row i = the draft distribution node i's children were
//                   drawn from (rows of leaves are not read); empty for point-mass proposals.
// How the children of node i were proposed (TreeProposal), i.e. the law r_c of child c given its
// earlier siblings:
//   sampled_with_replacement     i.i.d. from q_i:                              r_c = q_i;
//   sampled_without_replacement  successively from q_i without the earlier siblings' tokens,
//                                renormalised (sibling tokens must be distinct): r_c = that;
//   point_mass                   deterministic proposals (n-gram, suffix, top-k branches):
//                                r_c = the point mass at c's token; no q.
// Output: path = the accepted nodes a_1, a_2, ..., a_m after the root, in depth order (a_1 a child
// of the root, a_(j+1) a child of a_j; empty if every child of the root was rejected), and
// next = one more token: a sample of the residual left at a_m when all of a_m's children were
// rejected, or the bonus token (a sample of p_(a_m)) when a_m is a leaf. The emitted tokens
// tokens[a_1] ... tokens[a_m], next are distributed exactly as sampling from p token by token
// (proof: docs/math.md, section 3.6).
//
// The rule, at the current node i (the root first): keep an unnormalised residual w (initially
// p_i) and its total Z (initially exactly 1, not computed). For each child c of i in order, with
// token x: accept c iff u_c * Z * r_c(x) < w(x) (probability min(1, (w/Z)(x) / r_c(x))). If
// accepted, move to c (w = p_c, Z = 1) and go on. If rejected: w <- max(0, w - Z * r_c) (for a
// point mass: w(x) <- 0) and Z <- sum(w). When every child of i is rejected, next is sampled
// from w / Z (from p_i when Z has no mass, like verify_chain); at a leaf, next is sampled from p_i.
//
// Bitwise compatibility with verify.hpp: the first test at a node has Z = 1 and w = p_i, and is
// exactly verify_chain's accept_draft(u, p_i(x), q_i(x)) (point mass: accept_draft(u, p_i(x), 1)).
// When the round ends at a node where exactly one child was tried and rejected, next comes from
// the chain's own samplers (detail::finish_residual, or finish_exclude_one for a point mass); at a
// leaf, from the chain's bonus sampler. A chain-shaped tree (parents[i] = i - 1) therefore gives
// bit for bit verify_chain's / verify_chain_onehot's / verify_chain_greedy's results.
// When a node's first child is rejected and another child follows, w is materialised in a
// scratch row of V entries (Real): max(0, p_i - q_i), or p_i without x for a point mass, after p_i
// and q_i are checked in full. Later updates are computed in double per entry,
// w_j <- max(0, w_j - s * r_j), and the rejected token's entry is set to 0 (which the rule gives
// anyway: a rejection means w(x) <= u * s * r(x) < s * r(x)). Z is then the total of that row in
// the lane order of verify.hpp (block sums in Real, added into a double), recomputed after each
// update (for a point mass that is Z - w(x) up to rounding), so that the tests, the updates and
// the inverse CDF that samples next all use the same Z, and a token of zero weight is never
// returned. Tests after the first at a node use double arithmetic, u * s * r(x) < w(x), where
// r = q_i and s = Z with replacement; r(x) = 1 and s = Z for a point mass; r = q_i and
// s = Z / (1 - the sum of q_i over the earlier siblings' tokens) without replacement (a candidate
// from a remainder without mass, which cannot have been drawn, gets s = 0: it is accepted iff
// w(x) > 0, like a q(x) = 0 token in verify_chain).
//
// RNG COUNTER CONVENTION (fixed). A tree verify call on stream (seed, stream) starting at counter
// c uses
//   philox_uniform(seed, stream, c + j - 1)  for the acceptance test of node j, j = 1 ... n-1,
//   philox_uniform(seed, stream, c + n - 1)  for the final sample (residual or bonus),
// and moves the stream's counter to c + n, whatever the outcome. Nodes that are not tested (the
// siblings after an accepted node, the subtrees of rejected nodes) leave their uniforms undrawn.
// For a chain of k drafted tokens (n = k + 1, node j = drafted token j - 1) this is exactly
// verify_chain's convention. The greedy variant draws none.
//
// Greedy (temperature 0, verify_tree_greedy): at node i, a = argmax p_i (lowest index on ties,
// the scan and checks of verify_chain_greedy_row); accept the first child whose token is a; if
// there is none, next = a; at a leaf, next = argmax p_leaf.
//
// Checks: the tree's structure (parents, tokens in [0, V) for i >= 1, distinct sibling tokens for
// sampled_without_replacement), then, as in verify.hpp, only what is read: each p_i(x) and q_i(x)
// of a first test at a node is finite and >= 0; each row read in full (p_i and q_i at a node's
// first rejection, the bonus row) has finite entries >= 0 that sum to 1 within kRowSumTolerance.
// The host API throws specdec::Error naming the node and the problem.

#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <vector>

#include "specdec/common.hpp"
#include "specdec/sampling/philox.hpp"
#include "specdec/sampling/verify.hpp"

namespace specdec::sampling {

/// How the children of a node were proposed (see the top of this file).
enum class TreeProposal : std::uint8_t {
  sampled_with_replacement,     ///< children i.i.d. from the parent's q row
  sampled_without_replacement,  ///< successive draws from the q row without earlier siblings
  point_mass,                   ///< deterministic proposals; no q
};

/// The outcome of verifying one tree.
struct TreeVerifyResult {
  std::vector<std::size_t> path;  ///< accepted nodes after the root, in depth order
  token_t next;                   ///< the residual sample or the bonus token
};

// ------------------------------------------------------------------ status (no exceptions)

/// A structural error of the tree, reported by the raw-pointer functions (which do not throw).
enum class TreeError : std::uint8_t {
  none,
  empty,               ///< n == 0: there is no root
  root_parent,         ///< parents[0] != -1 (value = parents[0])
  parent_not_earlier,  ///< where = node i >= 1: parents[i] is not in [0, i) (value = parents[i])
  token_out_of_range,  ///< where = node i >= 1: tokens[i] is not in [0, V) (value = tokens[i])
  duplicate_sibling,   ///< where = node i: the token of its earlier sibling `other` (value)
  missing_buffer,  ///< q is null for a sampled proposal, or scratch is null for a branching tree
};

/// The outcome of the raw-pointer functions: the end of the accepted path, next, and the status.
struct TreeVerifyOutcome {
  std::size_t node = 0;   ///< the last accepted node (0, the root, when none was accepted)
  std::size_t depth = 0;  ///< how many nodes were accepted (the path's length)
  token_t next = -1;
  TreeError tree_error = TreeError::none;
  VerifyError error = VerifyError::none;  ///< a bad value or row; where = the row's node
  std::size_t where = 0;                  ///< the node (or row) the error refers to
  std::size_t other = 0;  ///< p/q_value_bad: the child whose token was tested; duplicate_sibling:
                          ///< the earlier sibling
  double value = 0;       ///< the offending value (a parent, a token id, a probability, a sum)
  std::size_t entry = 0;  ///< p_row_bad from a greedy scan: the first bad entry
};

namespace detail {

/// The acceptance rule. Production code always uses `exact`; the others are deliberately wrong
/// variants that only the tests pass, to check that the exactness tests can see each mistake.
enum class TreeRule : std::uint8_t {
  exact,
  stale_residual,          ///< w and Z are not updated after a rejection
  unnormalised_remainder,  ///< without replacement: r_c = q_i, not renormalised
  point_mass_keeps_token,  ///< point mass: Z <- Z - w(x), but w(x) is not zeroed
};

SPECDEC_HD inline TreeVerifyOutcome tree_fail(TreeError error, std::size_t where, double value,
                                              std::size_t other = 0) {
  TreeVerifyOutcome out;
  out.tree_error = error;
  out.where = where;
  out.value = value;
  out.other = other;
  return out;
}

SPECDEC_HD inline TreeVerifyOutcome value_fail(VerifyError error, std::size_t row,
                                               std::size_t child, double value) {
  TreeVerifyOutcome out;
  out.error = error;
  out.where = row;
  out.other = child;
  out.value = value;
  return out;
}

/// Copies a row sampler's error or token into `out` (which keeps its path).
SPECDEC_HD inline TreeVerifyOutcome with_sample(TreeVerifyOutcome out, const VerifyOutcome& s) {
  out.next = s.next;
  out.error = s.error;
  if (s.error != VerifyError::none) {
    out.next = -1;
    out.where = s.where;
    out.value = s.value;
    out.entry = s.entry;
  }
  return out;
}

/// The structure: n >= 1, parents[0] == -1, 0 <= parents[i] < i, tokens[i] in [0, V) for
/// i >= 1, and with `distinct_siblings` no two children of a node with the same token.
SPECDEC_HD inline bool check_tree(const token_t* tokens, const std::int32_t* parents, std::size_t n,
                                  std::size_t vocab, bool distinct_siblings,
                                  TreeVerifyOutcome& out) {
  if (n == 0) {
    out = tree_fail(TreeError::empty, 0, 0);
    return false;
  }
  if (parents[0] != -1) {
    out = tree_fail(TreeError::root_parent, 0, static_cast<double>(parents[0]));
    return false;
  }
  for (std::size_t i = 1; i < n; ++i) {
    if (parents[i] < 0 || static_cast<std::size_t>(parents[i]) >= i) {
      out = tree_fail(TreeError::parent_not_earlier, i, static_cast<double>(parents[i]));
      return false;
    }
    if (tokens[i] < 0 || static_cast<std::size_t>(tokens[i]) >= vocab) {
      out = tree_fail(TreeError::token_out_of_range, i, static_cast<double>(tokens[i]));
      return false;
    }
    if (!distinct_siblings) continue;
    for (std::size_t j = 1; j < i; ++j) {
      if (parents[j] == parents[i] && tokens[j] == tokens[i]) {
        out = tree_fail(TreeError::duplicate_sibling, i, static_cast<double>(tokens[i]), j);
        return false;
      }
    }
  }
  return true;
}

/// Whether some node has two or more children. A tree in topological order where every node has
/// at most one child is the chain 0 - 1 - ... - (n-1), so this is: some parents[i] != i - 1.
SPECDEC_HD inline bool tree_branches(const std::int32_t* parents, std::size_t n) {
  for (std::size_t i = 1; i < n; ++i) {
    if (static_cast<std::size_t>(parents[i]) != i - 1) return true;
  }
  return false;
}

/// The first child of `node` with an index above `after` (children come after their parent),
/// or n when there is none.
SPECDEC_HD inline std::size_t next_child(const std::int32_t* parents, std::size_t n,
                                         std::size_t node, std::size_t after) {
  for (std::size_t c = after + 1; c < n; ++c) {
    if (static_cast<std::size_t>(parents[c]) == node) return c;
  }
  return n;
}

}  // namespace detail

// ------------------------------------------------------------------ raw-pointer core

/// Tree verification over raw pointers (the layout at the top of this file): p n x V; q n x V
/// (null for point_mass); tokens, parents n; scratch V entries, written (needed only when some
/// node has two or more children; may be null otherwise). uniform(j) returns the uniform for
/// offset j of this call (the convention at the top of this file; a float or a double), and is
/// called only for the offsets that are used, in increasing order. `rows` samples the row that
/// ends the round (verify.hpp's SerialRowSampler on the host; a CUDA block's sampler in the
/// kernel, which runs this loop in every thread of the block: every decision depends only on
/// values all threads read, and each thread writes the scratch row's same values itself). Rule
/// is for the tests only.
template <detail::TreeRule Rule = detail::TreeRule::exact, class Real, class Uniform, class Rows>
SPECDEC_HD inline TreeVerifyOutcome verify_tree_loop(const Real* p, const Real* q,
                                                     const token_t* tokens,
                                                     const std::int32_t* parents, std::size_t n,
                                                     std::size_t vocab, TreeProposal proposal,
                                                     const Uniform& uniform, Real* scratch,
                                                     const Rows& rows) {
  using detail::TreeRule;
  const bool sampled = proposal != TreeProposal::point_mass;
  const bool renormalise = proposal == TreeProposal::sampled_without_replacement &&
                           Rule != TreeRule::unnormalised_remainder;
  TreeVerifyOutcome out;
  if (!detail::check_tree(tokens, parents, n, vocab,
                          proposal == TreeProposal::sampled_without_replacement, out)) {
    return out;
  }
  if ((sampled && q == nullptr) || (scratch == nullptr && detail::tree_branches(parents, n))) {
    return detail::tree_fail(TreeError::missing_buffer, 0, 0);
  }
  const std::size_t final_offset = n - 1;
  for (;;) {
    const std::size_t node = out.node;
    const Real* p_i = p + node * vocab;
    const Real* q_i = sampled ? q + node * vocab : nullptr;
    std::size_t rejected = 0;  // children of `node` tried and rejected so far
    double z = 1.0;            // Z: the total of w (w is p_i until the first rejection)
    double remainder = 1.0;    // without replacement: q_i's mass not taken by earlier siblings
    std::size_t accepted = n;
    for (std::size_t c = detail::next_child(parents, n, node, node); c < n;) {
      const auto x = static_cast<std::size_t>(tokens[c]);
      const std::size_t following = detail::next_child(parents, n, node, c);
      bool accept = false;
      double s = z;  // Z / (the mass r_c renormalises by), the factor of r_c in the test
      if (rejected == 0) {
        // w = p_i, Z = 1: verify_chain's test, bit for bit.
        const Real p_x = p_i[x];
        if (!detail::finite(p_x) || !(p_x >= Real(0))) {
          return detail::value_fail(VerifyError::p_value_bad, node, c, static_cast<double>(p_x));
        }
        Real q_x = Real(1);
        if (sampled) {
          q_x = q_i[x];
          if (!detail::finite(q_x) || !(q_x >= Real(0))) {
            return detail::value_fail(VerifyError::q_value_bad, node, c, static_cast<double>(q_x));
          }
        }
        accept = accept_draft(uniform(c - 1), p_x, q_x);
      } else {
        // w is materialised in scratch; p_i and q_i were checked in full at the first rejection.
        if (renormalise) s = remainder > 0 ? z / remainder : 0.0;
        const double r_x = sampled ? static_cast<double>(q_i[x]) : 1.0;
        accept = static_cast<double>(uniform(c - 1)) * s * r_x < static_cast<double>(scratch[x]);
      }
      if (accept) {
        accepted = c;
        break;
      }
      ++rejected;
      if (rejected == 1 && following == n) {
        // The only child tried here was rejected: the chain's residual samplers, bit for bit.
        const VerifyOutcome last = sampled ? rows.residual(p_i, q_i, uniform(final_offset), node)
                                           : rows.exclude_one(p_i, x, uniform(final_offset), node);
        return detail::with_sample(out, last);
      }
      if (rejected == 1) {
        // Materialise w = max(0, p_i - r_c) (Z = 1), after checking the rows in full.
        if (scratch == nullptr) return detail::tree_fail(TreeError::missing_buffer, 0, 0);
        detail::RowStats p_stats;
        detail::RowStats q_stats;
        VerifyOutcome bad;
        rows.row_stats(p_i, q_i, p_stats, q_stats);
        if (!detail::check_row(p_stats, true, node, bad) ||
            (sampled && !detail::check_row(q_stats, false, node, bad))) {
          return detail::with_sample(out, bad);
        }
        // max(0, p_i - q_i) with x at 0 (already 0: a rejection means p_i(x) <= u q_i(x) <
        // q_i(x)), or p_i without x for a point mass.
        const bool stale = Rule == TreeRule::stale_residual;
        const bool zero_x = !stale && (sampled || Rule != TreeRule::point_mass_keeps_token);
        rows.fill(scratch, [&](std::size_t j) {
          if (zero_x && j == x) return Real(0);
          return sampled && !stale ? detail::positive_part(p_i[j] - q_i[j]) : p_i[j];
        });
        if (Rule == TreeRule::point_mass_keeps_token && !sampled) {
          z = p_stats.sum - static_cast<double>(p_i[x]);
        } else if (!stale) {
          z = rows.total(scratch);
        }
      } else if (Rule == TreeRule::point_mass_keeps_token && !sampled) {
        z -= static_cast<double>(scratch[x]);
      } else if (Rule != TreeRule::stale_residual) {
        // w <- max(0, w - Z * r_c), each entry in double; Z <- the total of the new row.
        // The rejected token's weight is now 0 exactly: w(x) <= u * s * r(x) < s * r(x). Setting
        // it keeps that true whatever the rounding of the update (and is the point-mass update).
        if (sampled) {
          rows.fill(scratch, [&](std::size_t j) {
            return j == x ? Real(0)
                          : static_cast<Real>(detail::positive_part(
                                static_cast<double>(scratch[j]) - s * static_cast<double>(q_i[j])));
          });
        } else {
          rows.set(scratch, x, Real(0));
        }
        z = rows.total(scratch);
      }
      if (sampled) remainder -= static_cast<double>(q_i[x]);
      c = following;
    }
    if (accepted < n) {
      out.node = accepted;
      ++out.depth;
      continue;
    }
    const auto u = uniform(final_offset);
    if (rejected == 0) return detail::with_sample(out, rows.plain(p_i, u, node));  // a leaf
    // Two or more children rejected: sample the materialised residual w / Z.
    if (!(z > 0)) return detail::with_sample(out, rows.plain(p_i, u, node));
    out.next = rows.sample_weights(scratch, z, static_cast<double>(u));
    return out;
  }
}

/// verify_tree_loop with the serial row sampler (the host's).
template <detail::TreeRule Rule = detail::TreeRule::exact, class Real, class Uniform>
SPECDEC_HD inline TreeVerifyOutcome verify_tree_row(const Real* p, const Real* q,
                                                    const token_t* tokens,
                                                    const std::int32_t* parents, std::size_t n,
                                                    std::size_t vocab, TreeProposal proposal,
                                                    const Uniform& uniform, Real* scratch) {
  return verify_tree_loop<Rule>(p, q, tokens, parents, n, vocab, proposal, uniform, scratch,
                                SerialRowSampler<Real>{vocab});
}

/// The greedy tree loop over rows (n x V; tokens, parents n): at each node the first child whose
/// token is the row's argmax is accepted; next = the argmax where none is, or at the leaf
/// reached. Uses no uniforms. `scan` reads one row (verify.hpp's GreedyScan; only the rows of
/// the nodes the walk visits are scanned); a row with a bad entry fails with p_row_bad.
template <class Real, class Scan>
SPECDEC_HD inline TreeVerifyOutcome verify_tree_greedy_loop(const Real* p, const token_t* tokens,
                                                            const std::int32_t* parents,
                                                            std::size_t n, std::size_t vocab,
                                                            const Scan& scan) {
  TreeVerifyOutcome out;
  if (!detail::check_tree(tokens, parents, n, vocab, false, out)) return out;
  for (;;) {
    const std::size_t node = out.node;
    const GreedyScan row = scan(p + node * vocab);
    if (row.bad < vocab) {
      out = detail::value_fail(VerifyError::p_row_bad, node, 0, row.bad_value);
      out.entry = row.bad;
      return out;
    }
    const auto best = static_cast<token_t>(row.argmax);
    std::size_t c = detail::next_child(parents, n, node, node);
    while (c < n && tokens[c] != best) c = detail::next_child(parents, n, node, c);
    if (c == n) {
      out.next = best;
      return out;
    }
    out.node = c;
    ++out.depth;
  }
}

/// Greedy tree verification over distributions (p n x V): verify_tree_greedy_loop with the
/// serial scan; rows read are checked for NaN/inf/negative entries.
template <class Real>
SPECDEC_HD inline TreeVerifyOutcome verify_tree_greedy_row(const Real* p, const token_t* tokens,
                                                           const std::int32_t* parents,
                                                           std::size_t n, std::size_t vocab) {
  return verify_tree_greedy_loop(p, tokens, parents, n, vocab,
                                 SerialGreedyScan<Real>{vocab, false});
}

// ------------------------------------------------------------------ host API (throws)

/// Throws specdec::Error describing `outcome`'s error, if any; `what` names the caller.
inline void throw_if_error(const TreeVerifyOutcome& outcome, const char* what) {
  if (outcome.tree_error == TreeError::none && outcome.error == VerifyError::none) return;
  const std::string head = std::string(what) + ": ";
  const std::string node = std::to_string(outcome.where);
  const auto integer = [](double v) { return std::to_string(static_cast<long long>(v)); };
  switch (outcome.tree_error) {
    case TreeError::none:
      break;
    case TreeError::empty:
      throw Error(head + "the tree has no nodes (node 0, the root, is required)");
    case TreeError::root_parent:
      throw Error(head + "parents[0] = " + integer(outcome.value) +
                  ", but node 0 is the root and its parent must be -1");
    case TreeError::parent_not_earlier:
      throw Error(head + "parents[" + node + "] = " + integer(outcome.value) +
                  " is not an earlier node: node " + node + " needs 0 <= parent < " + node +
                  " (topological order)");
    case TreeError::token_out_of_range:
      throw Error(head + "tokens[" + node + "] = " + integer(outcome.value) + " (node " + node +
                  ") is not a token id of the vocabulary");
    case TreeError::duplicate_sibling:
      throw Error(head + "node " + node + " has the same token " + integer(outcome.value) +
                  " as its earlier sibling node " + std::to_string(outcome.other) +
                  ": sampled_without_replacement needs distinct sibling tokens");
    case TreeError::missing_buffer:
      throw Error(head + "a buffer is missing (q for a sampled proposal, or the scratch row of " +
                  "a tree with a node of two or more children)");
  }
  const std::string value = std::to_string(outcome.value);
  const std::string child = std::to_string(outcome.other);
  switch (outcome.error) {
    case VerifyError::none:
      return;
    case VerifyError::draft_out_of_range:
      break;  // not reported by the tree functions (token_out_of_range instead)
    case VerifyError::p_value_bad:
      throw Error(head + "p row of node " + node + " at the token of its child node " + child +
                  " is " + value + " (not a probability: NaN, infinite or negative)");
    case VerifyError::q_value_bad:
      throw Error(head + "q row of node " + node + " at the token of its child node " + child +
                  " is " + value + " (not a probability: NaN, infinite or negative)");
    case VerifyError::p_row_bad:
      throw Error(head + "p row of node " + node + " has a NaN, infinite or negative entry");
    case VerifyError::q_row_bad:
      throw Error(head + "q row of node " + node + " has a NaN, infinite or negative entry");
    case VerifyError::p_row_sum:
      throw Error(head + "p row of node " + node + " sums to " + value +
                  ", not 1 (is it a processed distribution, not logits?)");
    case VerifyError::q_row_sum:
      throw Error(head + "q row of node " + node + " sums to " + value +
                  ", not 1 (is it a processed distribution, not logits?)");
  }
  throw Error(head + "unknown error");
}

namespace detail {

/// The accepted path of an outcome: the ancestors of outcome.node below the root, root first.
inline std::vector<std::size_t> tree_path(const TreeVerifyOutcome& outcome,
                                          std::span<const std::int32_t> parents) {
  std::vector<std::size_t> path(outcome.depth);
  std::size_t node = outcome.node;
  for (std::size_t d = outcome.depth; d-- > 0;) {
    path[d] = node;
    node = static_cast<std::size_t>(parents[node]);
  }
  return path;
}

/// The host checks shared by the entry points: tokens and parents have n >= 1 entries each, V
/// fits token_t, p (and q when `with_q`) hold n rows of V, q is empty otherwise.
template <class Real>
void check_tree_buffers(std::span<const Real> p, std::span<const Real> q, bool with_q,
                        std::size_t n_parents, std::size_t n, std::size_t vocab, const char* what) {
  if (n != n_parents) {
    throw Error(std::string(what) + ": tokens has " + std::to_string(n) + " entries but parents " +
                "has " + std::to_string(n_parents) + " (one of each per node)");
  }
  if (n == 0)
    throw Error(std::string(what) + ": the tree has no nodes (node 0, the root, is required)");
  check_vocab(vocab, what);
  const auto check = [&](std::size_t size, const char* name) {
    if (size % vocab != 0 || size / vocab != n) {
      throw Error(std::string(what) + ": " + name + " has " + std::to_string(size) +
                  " entries, expected n = " + std::to_string(n) +
                  " rows (one per node) of V = " + std::to_string(vocab));
    }
  };
  check(p.size(), "p (target distributions)");
  if (with_q) {
    check(q.size(), "q (draft distributions)");
  } else if (!q.empty()) {
    throw Error(std::string(what) + ": q has " + std::to_string(q.size()) +
                " entries, but point_mass proposals have no draft rows (pass an empty q)");
  }
}

/// V = p.size() / n for the entry points without an explicit vocabulary size.
inline std::size_t tree_vocab(std::size_t p_size, std::size_t n, const char* what) {
  if (n == 0)
    throw Error(std::string(what) + ": the tree has no nodes (node 0, the root, is required)");
  if (p_size == 0 || p_size % n != 0) {
    throw Error(std::string(what) + ": p has " + std::to_string(p_size) +
                " entries, not a positive multiple of n = " + std::to_string(n) +
                " (one row of V entries per node)");
  }
  return p_size / n;
}

}  // namespace detail

/// Checks a tree's structure (n >= 1, parents[0] == -1, 0 <= parents[i] < i, tokens[i] in [0, V)
/// for i >= 1; for sampled_without_replacement also distinct sibling tokens). Throws
/// specdec::Error naming the node and the problem.
inline void validate_tree(std::span<const token_t> tokens, std::span<const std::int32_t> parents,
                          std::size_t vocab,
                          TreeProposal proposal = TreeProposal::sampled_with_replacement) {
  constexpr const char* what = "validate_tree";
  if (tokens.size() != parents.size()) {
    throw Error(std::string(what) + ": tokens has " + std::to_string(tokens.size()) +
                " entries but parents has " + std::to_string(parents.size()) +
                " (one of each per node)");
  }
  detail::check_vocab(vocab, what);
  TreeVerifyOutcome out;
  (void)detail::check_tree(tokens.data(), parents.data(), tokens.size(), vocab,
                           proposal == TreeProposal::sampled_without_replacement, out);
  throw_if_error(out, what);
}

/// Verifies the tree (tokens, parents; n nodes) against the target rows p (n x V) and, for
/// sampled proposals, the draft rows q (n x V; empty for point_mass). Uses the uniforms
/// rng.counter() + 0 ... n-1 (node j's test: + j - 1; the final sample: + n - 1) and advances rng
/// by n.
template <class Real>
TreeVerifyResult verify_tree(std::span<const Real> p, std::span<const Real> q,
                             std::span<const token_t> tokens, std::span<const std::int32_t> parents,
                             std::size_t vocab, TreeProposal proposal, PhiloxStream& rng) {
  constexpr const char* what = "verify_tree";
  const std::size_t n = tokens.size();
  const bool sampled = proposal != TreeProposal::point_mass;
  detail::check_tree_buffers(p, q, sampled, parents.size(), n, vocab, what);
  std::vector<Real> scratch(detail::tree_branches(parents.data(), n) ? vocab : 0);
  const PhiloxUniforms uniforms{rng.seed(), rng.stream(), rng.counter()};
  const TreeVerifyOutcome out =
      verify_tree_row(p.data(), sampled ? q.data() : nullptr, tokens.data(), parents.data(), n,
                      vocab, proposal, uniforms, scratch.empty() ? nullptr : scratch.data());
  throw_if_error(out, what);
  rng.skip(n);
  return {detail::tree_path(out, parents), out.next};
}

/// The same with V = p.size() / n.
template <class Real>
TreeVerifyResult verify_tree(std::span<const Real> p, std::span<const Real> q,
                             std::span<const token_t> tokens, std::span<const std::int32_t> parents,
                             TreeProposal proposal, PhiloxStream& rng) {
  return verify_tree<Real>(p, q, tokens, parents,
                           detail::tree_vocab(p.size(), tokens.size(), "verify_tree"), proposal,
                           rng);
}

/// Greedy tree verification (temperature 0): no randomness, see verify_tree_greedy_row.
template <class Real>
TreeVerifyResult verify_tree_greedy(std::span<const Real> p, std::span<const token_t> tokens,
                                    std::span<const std::int32_t> parents, std::size_t vocab) {
  constexpr const char* what = "verify_tree_greedy";
  const std::size_t n = tokens.size();
  detail::check_tree_buffers<Real>(p, {}, false, parents.size(), n, vocab, what);
  const TreeVerifyOutcome out =
      verify_tree_greedy_row(p.data(), tokens.data(), parents.data(), n, vocab);
  throw_if_error(out, what);
  return {detail::tree_path(out, parents), out.next};
}

/// The same with V = p.size() / n.
template <class Real>
TreeVerifyResult verify_tree_greedy(std::span<const Real> p, std::span<const token_t> tokens,
                                    std::span<const std::int32_t> parents) {
  return verify_tree_greedy<Real>(
      p, tokens, parents, detail::tree_vocab(p.size(), tokens.size(), "verify_tree_greedy"));
}

}  // namespace specdec::sampling
