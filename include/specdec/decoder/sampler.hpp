#pragma once
// HostSampler, the RoundSampler of models whose logits are on the host. The round vocabulary
// (RoundSampler, TargetInput, RoundVerdict, the capability concepts) is the sampling layer's:
// specdec/sampling/round.hpp, with the draft/verify protocol every sampler follows.
//
// The sampler owns everything it keeps of a round (the drafted tokens and the draft's rows q),
// so the decoders pass raw logits and never see distributions. Two implementations:
//   HostSampler        (here) host logits, the sampling core (include/specdec/sampling/);
//   cuda::DeviceSampler (include/specdec/cuda/sampler.hpp) device logits, the sampling kernels,
//                      the drafted tokens kept in device memory and fed to the models from there.
// Which one a decoder uses follows at compile time from where its target's logits live
// (logits_memory_v, model/causal_lm.hpp): SamplerFor<memory>::type. Both make the same decisions
// on the same distributions with the same Philox uniforms (the streams in sampling/round.hpp,
// docs/decoder.md).

#include <algorithm>
#include <chrono>
#include <cmath>
#include <concepts>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "specdec/common.hpp"
#include "specdec/model/causal_lm.hpp"
#include "specdec/model/token_tree.hpp"
#include "specdec/sampling/logprobs.hpp"
#include "specdec/sampling/penalties.hpp"
#include "specdec/sampling/philox.hpp"
#include "specdec/sampling/process.hpp"
#include "specdec/sampling/round.hpp"
#include "specdec/sampling/tree_verify.hpp"
#include "specdec/sampling/verify.hpp"

namespace specdec {

// ------------------------------------------------------------------------------ HostSampler

/// The RoundSampler of models with host logits: logits are processed by sampling::process_logits
/// and decided by verify_chain / verify_chain_onehot / verify_chain_greedy (sampling core).
///
/// Storage: the round's tokens [last, x_1 .. x_k] and the draft's processed rows q (k x V), kept
/// from draft() until verify(); the target's processed rows p ((k + 1) x V) during verify().
/// Only what a round needs is computed: greedy rounds take argmaxes of the logits and write no
/// distribution; an accepted token needs only p(x) and q(x); only the rejected row or the bonus
/// row is processed in full (verify()).
///
/// Penalties and logit bias (sampling/penalties.hpp, set_penalties): every row, the draft's and
/// the target's, is first adjusted for the context of its own position, the round's history
/// (set_history) plus the drafted tokens before that position; p and q are the adjusted models'
/// distributions, so the round stays exact.
class HostSampler {
 public:
  static constexpr Memory memory = Memory::host;

  /// A sampler for rows of `vocab` logits (max_k: the usual draft length, to reserve storage).
  HostSampler(std::size_t vocab, std::size_t max_k) : vocab_(vocab) {
    if (vocab == 0) throw Error("HostSampler: vocabulary size is 0");
    q_.reserve(max_k * vocab);
    p_.reserve((max_k + 1) * vocab);
  }
  /// A sampler for the rows of `target` (and of a draft model with the same vocabulary).
  template <CausalLM M>
  HostSampler(const M& target, std::size_t max_k) : HostSampler(target.vocab_size(), max_k) {}

  void begin(const sampling::SamplingParams& params, std::uint64_t seed) {
    set_params(params);
    target_rng_ = sampling::PhiloxStream(seed, kTargetStream);
    draft_rng_ = sampling::PhiloxStream(seed, kDraftStream);
  }
  void set_params(const sampling::SamplingParams& params) {
    sampling::validate(params);
    params_ = params;
  }

  /// Penalties and logit bias from now on (validated against the vocabulary). While they are
  /// active(), each round needs set_history() before its first draft or verify.
  void set_penalties(const sampling::Penalties& penalties) {
    sampling::validate(penalties, vocab_);
    penalties_ = penalties;
    if (penalties_.active() && applier_.vocab() != vocab_)
      applier_ = sampling::PenaltyApplier(vocab_);
    history_.clear();
  }
  [[nodiscard]] const sampling::Penalties& penalties() const { return penalties_; }

  /// Log-probabilities of the emitted tokens from now on (RoundVerdict::logprobs), each with the
  /// `top_n` most likely tokens of its row. They come from the target's distribution of the
  /// round: the processed row (penalties included) that sampled decoding draws from; for
  /// greedy decoding, whose processed row is one-hot, the softmax of the (penalised) logits.
  void set_logprobs(bool on, std::size_t top_n = 0) {
    logprobs_on_ = on;
    top_n_ = top_n;
  }

  /// The tokens of the penalties' scope before this round (PenaltyScope: the whole sequence or
  /// the turn's completion), ending with the sequence's last token when it is in the scope. Only
  /// the last Penalties::last_n are kept (copied). Call after begin_round().
  void set_history(std::span<const token_t> scope_tokens) {
    const std::span<const token_t> kept =
        sampling::PenaltyApplier::window_of(penalties_, scope_tokens);
    history_.assign(kept.begin(), kept.end());
  }

  void begin_round(token_t last) {
    tokens_.assign(1, last);
    q_.clear();
    history_.clear();
  }

  /// Feeds `feed` to the draft model and draws x_1 from its last row.
  template <CausalLM M>
  void draft(M& model, std::span<const token_t> feed, std::size_t position) {
    draft_rows(model.forward(feed), feed.size(), position);
  }

  /// Feeds the last drafted token to the draft model and draws the next one from its row.
  template <CausalLM M>
  void draft_next(M& model, std::size_t position) {
    const std::span<const token_t> feed = last_drafted();
    draft_rows(model.forward(feed), feed.size(), position);
  }

  /// The two halves of draft() / draft_next(), for a driver that runs the draft model's forward
  /// itself (batched with other sequences' forwards): `logits` are the draft model's rows for
  /// the `fed` tokens it was fed; the next drafted token is drawn from the last row.
  void draft_rows(const LogitsView& logits, std::size_t fed, std::size_t position) {
    detail::check_logits(logits, fed, vocab_, "draft model");
    draw(logits.row(logits.rows - 1), position);
  }
  /// The last drafted token, as draft_next() feeds it to the draft model.
  [[nodiscard]] std::span<const token_t> last_drafted() const {
    if (tokens_.size() < 2) throw Error("HostSampler::draft_next: nothing drafted yet");
    return std::span<const token_t>(tokens_).last(1);
  }

  void propose(std::span<const token_t> tokens) {
    detail::check_proposal(tokens, vocab_);
    tokens_.insert(tokens_.end(), tokens.begin(), tokens.end());
  }

  [[nodiscard]] TargetInput target_input(std::size_t k) const {
    check_k(k);
    return TargetInput{std::span<const token_t>(tokens_).first(k + 1), {}};
  }

  /// Verifies x_1 .. x_k against the k + 1 target rows (k = 0: one plain target step).
  /// Uniforms: the target stream, k + 1 counters (none when greedy).
  ///
  /// Only what the round needs is computed. Greedy: each row's argmax (and finiteness). Else:
  /// for each drafted token p(x_i) alone (a ProcessedRow: the row's max and normaliser, no row
  /// written), which decides the acceptances; then the one row the verification reads in full
  /// (the rejected row, or the bonus row k) is materialised into p_, and the sampling core's
  /// verify_chain / verify_chain_onehot decides the round on p_ as always: it reads exactly
  /// p_i(x_i) for the accepted rows and that full row, which hold the values of a full
  /// processing bit for bit (ProcessedRow::prob). Rows after a rejection are read only for the
  /// record's p(x_i), and the bonus row only when every token was accepted.
  RoundVerdict verify(const LogitsView& target, std::size_t k, Proposal proposal,
                      std::size_t position) {
    check_k(k);
    detail::check_logits(target, k + 1, vocab_, "target model");
    const auto t0 = std::chrono::steady_clock::now();
    const std::span<const token_t> drafted = std::span<const token_t>(tokens_).subspan(1, k);
    p_drafted_.resize(k);
    q_drafted_.resize(k);
    sampling::VerifyResult verdict{};
    if (params_.greedy()) {
      verdict = verify_greedy(target, drafted, position);
    } else {
      verdict = verify_sampled(target, drafted, proposal, position);
    }
    if (logprobs_on_) emitted_logprobs(target, drafted, verdict);
    seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return RoundVerdict{verdict.accepted,
                        verdict.next,
                        drafted,
                        p_drafted_,
                        q_drafted_,
                        logprobs_on_ ? std::span<const sampling::TokenLogprob>(logprobs_)
                                     : std::span<const sampling::TokenLogprob>()};
  }

  /// Verifies a token tree of point-mass proposals (a TreeDrafter's; TreeSampler): tokens[0] is
  /// the sequence's last token (parents[0] = -1), node i > 0 a proposed token after node
  /// parents[i]; target row i holds the logits after the path to node i (forward_tree). Greedy:
  /// the argmax walk of sampling::verify_tree_greedy_loop, scanning only the rows it visits.
  /// Sampled: every row processed into p_, then sampling::verify_tree with point masses (the
  /// target stream, n counters). Penalties and logit bias adjust each node's row for its own
  /// context: the round's history (set_history) and the tokens on the path to the node, as a
  /// chain's rows are adjusted for the drafted tokens before them.
  TreeVerdict verify_tree(const LogitsView& target, std::span<const token_t> tokens,
                          std::span<const std::int32_t> parents, std::size_t position) {
    return verify_tree(target, tokens, parents, position, sampling::TreeProposal::point_mass, {});
  }

  /// The same for a tree whose children were drawn by `proposal` (SampledTreeSampler): q (n x V,
  /// the tree's order) holds row i = the processed draft row node i's children were drawn from
  /// (draw_candidates); rows of nodes without children are not read. Empty for point masses.
  /// Greedy decoding ignores q: the argmax walk is exact for any proposal.
  TreeVerdict verify_tree(const LogitsView& target, std::span<const token_t> tokens,
                          std::span<const std::int32_t> parents, std::size_t position,
                          sampling::TreeProposal proposal, std::span<const float> q) {
    const std::size_t n = tokens.size();
    detail::check_logits(target, n, vocab_, "target model");
    sampling::validate_tree(tokens, parents, vocab_, proposal);
    const bool sampled = proposal != sampling::TreeProposal::point_mass;
    if (sampled != !q.empty() || (sampled && q.size() != n * vocab_))
      throw Error("HostSampler::verify_tree: " + std::to_string(q.size()) +
                  " draft probabilities for a tree of " + std::to_string(n) + " nodes and " +
                  (sampled ? "sampled" : "point-mass") + " proposals (need " +
                  std::to_string(sampled ? n * vocab_ : 0) + ")");
    const auto t0 = std::chrono::steady_clock::now();
    tree_depths(parents, depth_);  // a node's position is position + its depth (error messages)
    token_t next = -1;
    if (params_.greedy()) {
      const float* rows = target.row(0).data();
      const auto scan = [&](const float* row) {
        const std::size_t node = static_cast<std::size_t>(row - rows) / vocab_;
        return sampling::GreedyScan{
            argmax_of(tree_row(std::span<const float>(row, vocab_), tokens, parents, node),
                      "target model", position + depth_[node]),
            vocab_, 0.0};
      };
      const sampling::TreeVerifyOutcome out =
          sampling::verify_tree_greedy_loop(rows, tokens.data(), parents.data(), n, vocab_, scan);
      sampling::throw_if_error(out, "HostSampler::verify_tree");
      tree_path_ = sampling::detail::tree_path(out, parents);
      next = out.next;
    } else {
      p_.resize(n * vocab_);
      for (std::size_t i = 0; i < n; ++i)
        process(tree_row(target.row(i), tokens, parents, i),
                std::span<float>(p_.data() + i * vocab_, vocab_), "target model",
                position + depth_[i]);
      sampling::TreeVerifyResult r = sampling::verify_tree<float>(
          std::span<const float>(p_), q, tokens, parents, vocab_, proposal, target_rng_);
      tree_path_ = std::move(r.path);
      next = r.next;
    }
    const bool leaf = tree_leaf(parents, tree_path_.empty() ? 0 : tree_path_.back());
    if (logprobs_on_) {
      // The emitted tokens: the path's, then next; each from its parent's row (the root's first).
      // tokens_ becomes the path, as a chain's drafted tokens: the context adjusted() gives the
      // r-th emitted token's row is then its path's.
      emitted_.clear();
      emitted_rows_.assign(1, 0);
      tokens_.assign(1, tokens[0]);
      for (const std::size_t node : tree_path_) {
        emitted_.push_back(tokens[node]);
        emitted_rows_.push_back(node);
        tokens_.push_back(tokens[node]);
      }
      emitted_.push_back(next);
      logprobs_of(target, emitted_, emitted_rows_);
    }
    seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return TreeVerdict{tree_path_, next, leaf,
                       logprobs_on_ ? std::span<const sampling::TokenLogprob>(logprobs_)
                                    : std::span<const sampling::TokenLogprob>()};
  }

  /// Tree drafting with sampled candidates (SampledTreeSampler), at temperature > 0: processes a
  /// draft model's row of logits, for the node whose path from the round's root is `path` (the
  /// penalties' context: the round's history and the path), into q (V floats, kept by the caller
  /// for verify_tree), and draws up to drawn.size() distinct tokens from it without replacement
  /// (each draw from q with the earlier draws removed; the draft stream, one uniform a draw).
  /// ranked[c] is set to the (c + 1)-th largest probability of q, a score for the c-th candidate
  /// that does not depend on which token was drawn (so that a drafter choosing nodes by it keeps
  /// the draws' law; docs/math.md 3.7). Returns how many were drawn: fewer when q has fewer
  /// tokens of nonzero probability. `position`: the node's position, for the errors.
  std::size_t draw_candidates(std::span<const float> logits, std::span<const token_t> path,
                              std::size_t position, std::span<float> q, std::span<token_t> drawn,
                              std::span<float> ranked) {
    if (params_.greedy())
      throw Error("HostSampler::draw_candidates: greedy decoding proposes point masses");
    if (logits.size() != vocab_ || q.size() != vocab_ || ranked.size() < drawn.size())
      throw Error("HostSampler::draw_candidates: a row of " + std::to_string(logits.size()) +
                  " logits into " + std::to_string(q.size()) + " probabilities, with " +
                  std::to_string(ranked.size()) + " scores for " + std::to_string(drawn.size()) +
                  " candidates (the vocabulary has " + std::to_string(vocab_) + ")");
    const auto t0 = std::chrono::steady_clock::now();
    const std::span<const float> row =
        penalties_.active() ? penalised(logits, path.begin(), path.end()) : logits;
    process(row, q, "draft model", position);
    const std::size_t count = drawn.size();
    // The largest probabilities, a small sorted list (count is a few).
    std::fill(ranked.begin(), ranked.begin() + static_cast<std::ptrdiff_t>(count), 0.0f);
    for (const float v : q) {
      if (count == 0 || v <= ranked[count - 1]) continue;
      std::size_t at = count - 1;
      for (; at > 0 && ranked[at - 1] < v; --at) ranked[at] = ranked[at - 1];
      ranked[at] = v;
    }
    // Without replacement: a drawn token's entry is zeroed for the next draws (sample_from
    // normalises by the remaining total), then restored: q stays the row the first was drawn
    // from. The (c + 1)-th draw needs c + 1 tokens of nonzero probability, i.e. ranked[c] > 0.
    std::size_t n = 0;
    removed_.clear();
    for (; n < count && ranked[n] > 0; ++n) {
      drawn[n] = sampling::sample_from<float>(std::span<const float>(q), draft_rng_.next());
      const auto x = static_cast<std::size_t>(drawn[n]);
      removed_.push_back(q[x]);
      q[x] = 0.0f;
    }
    for (std::size_t c = 0; c < n; ++c) q[static_cast<std::size_t>(drawn[c])] = removed_[c];
    seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    return n;
  }

  double take_seconds() { return std::exchange(seconds_, 0.0); }

  /// The distributions of the last round: q (the draft rows kept; not written when greedy) and
  /// p (the target rows; only the entries the last verification read are current).
  [[nodiscard]] std::span<const float> q_rows() const { return q_; }
  [[nodiscard]] std::span<const float> p_rows() const { return p_; }
  [[nodiscard]] const sampling::SamplingParams& params() const { return params_; }

 private:
  /// Draws x from a draft row (the draft stream; greedy: the argmax of the logits, and the
  /// one-hot q is not written). Sampled: the processed row is kept in q_ for the residual.
  void draw(std::span<const float> logits, std::size_t position) {
    const auto t0 = std::chrono::steady_clock::now();
    const std::size_t slot = tokens_.size() - 1;
    const std::span<const float> row = adjusted(logits, slot);
    q_.resize((slot + 1) * vocab_);
    token_t x = 0;
    if (params_.greedy()) {
      x = static_cast<token_t>(argmax_of(row, "draft model", position));
    } else {
      const std::span<float> q(q_.data() + slot * vocab_, vocab_);
      process(row, q, "draft model", position);
      x = sampling::sample_from<float>(q, draft_rng_.next());
    }
    tokens_.push_back(x);
    seconds_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  }

  /// The first maximum of a row of logits; a NaN or infinity is reported naming the model and
  /// the position.
  static std::size_t argmax_of(std::span<const float> row, std::string_view model,
                               std::size_t position) {
    const sampling::detail::LogitScan scan = sampling::detail::scan_logits(row.data(), row.size());
    if (scan.bad < row.size()) detail::throw_bad_logit(model, position, scan.bad, row[scan.bad]);
    return scan.argmax;
  }

  /// Greedy: p_i is the one-hot at the argmax of row i, so p(x_i) = [x_i == argmax] and
  /// q(x_i) = 1 (a greedy draft drew the argmax; a point mass is 1). The decision is the sampling
  /// core's greedy loop on the argmaxes found here.
  sampling::VerifyResult verify_greedy(const LogitsView& target, std::span<const token_t> drafted,
                                       std::size_t position) {
    const std::size_t k = drafted.size();
    argmax_.resize(k + 1);
    for (std::size_t r = 0; r <= k; ++r)
      argmax_[r] = argmax_of(adjusted(target.row(r), r), "target model", position + r);
    for (std::size_t i = 0; i < k; ++i) {
      p_drafted_[i] = static_cast<std::size_t>(drafted[i]) == argmax_[i] ? 1.0f : 0.0f;
      q_drafted_[i] = 1.0f;
    }
    const float* rows = target.row(0).data();
    const auto scan = [&](const float* row) {
      return sampling::GreedyScan{argmax_[static_cast<std::size_t>(row - rows) / vocab_], vocab_,
                                  0.0};
    };
    const sampling::VerifyOutcome out =
        sampling::verify_greedy_loop(rows, drafted.data(), k, vocab_, scan);
    sampling::throw_if_error(out, "HostSampler::verify");
    return {out.accepted, out.next};
  }

  /// Sampled (temperature > 0), see verify().
  sampling::VerifyResult verify_sampled(const LogitsView& target, std::span<const token_t> drafted,
                                        Proposal proposal, std::size_t position) {
    const std::size_t k = drafted.size();
    const bool have_q = proposal == Proposal::sampled && k > 0;
    if (have_q && q_.size() < k * vocab_)
      throw Error("HostSampler::verify: " + std::to_string(k) + " sampled drafts, but only " +
                  std::to_string(q_.size() / vocab_) + " draft rows were kept");
    p_.resize((k + 1) * vocab_);
    work_.resize(vocab_);
    // p(x_i), q(x_i) of every drafted token (the record), and the first rejection n: the
    // acceptance test of the core with the uniforms verify_chain will draw.
    const sampling::PhiloxUniforms uniforms{target_rng_.seed(), target_rng_.stream(),
                                            target_rng_.counter()};
    std::size_t rejected = k;
    for (std::size_t i = 0; i < k; ++i) {
      const auto x = static_cast<std::size_t>(drafted[i]);
      const auto row = plan(adjusted(target.row(i), i), "target model", position + i);
      const float p_x = row.prob(x);
      const float q_x = have_q ? q_[i * vocab_ + x] : 1.0f;  // a point mass otherwise
      p_drafted_[i] = p_x;
      q_drafted_[i] = q_x;
      p_[i * vocab_ + x] = p_x;
      if (rejected == k && !sampling::accept_draft(uniforms(i), p_x, q_x)) {
        rejected = i;
        row.materialise(std::span<float>(p_.data() + i * vocab_, vocab_));
      }
    }
    if (rejected == k) {
      plan(adjusted(target.row(k), k), "target model", position + k)
          .materialise(std::span<float>(p_.data() + k * vocab_, vocab_));
    }
    const std::span<const float> p(p_);
    const sampling::VerifyResult verdict =
        have_q ? sampling::verify_chain<float>(p, std::span<const float>(q_).first(k * vocab_),
                                               drafted, vocab_, target_rng_)
               : sampling::verify_chain_onehot<float>(p, drafted, vocab_, target_rng_);
    if (verdict.accepted != rejected)  // the same test on the same values: cannot differ
      throw Error("HostSampler::verify: internal error, the acceptance decisions disagree");
    return verdict;
  }

  /// logprobs_ = the TokenLogprob of x_1 .. x_n and y (n = verdict.accepted), from target rows
  /// 0 .. n (the rows were checked by the verification).
  void emitted_logprobs(const LogitsView& target, std::span<const token_t> drafted,
                        const sampling::VerifyResult& verdict) {
    emitted_.assign(drafted.begin(),
                    drafted.begin() + static_cast<std::ptrdiff_t>(verdict.accepted));
    emitted_.push_back(verdict.next);
    emitted_rows_.resize(emitted_.size());
    for (std::size_t r = 0; r < emitted_rows_.size(); ++r) emitted_rows_[r] = r;
    logprobs_of(target, emitted_, emitted_rows_);
  }

  /// logprobs_ = the TokenLogprob of each emitted[i], from target row rows[i] (adjusted for the
  /// i tokens before it: a chain's rows; a tree has no penalties).
  void logprobs_of(const LogitsView& target, std::span<const token_t> emitted,
                   std::span<const std::size_t> rows) {
    logprobs_.clear();
    work_.resize(vocab_);
    const sampling::SamplingParams& params =
        params_.greedy() ? sampling::SamplingParams{} : params_;  // greedy: the plain softmax
    for (std::size_t r = 0; r < emitted.size(); ++r) {
      const token_t token = emitted[r];
      const std::span<const float> row = adjusted(target.row(rows[r]), r);
      const auto plan = sampling::ProcessedRow<float>::plan(
          row, params, sampling::detail::scan_logits(row.data(), row.size()).argmax,
          std::span<float>(work_));
      logprobs_.push_back(sampling::token_logprob(
          row, token, top_n_, [&](std::size_t i) { return plan.prob(i); }, top_buffer_));
    }
  }

  /// The ProcessedRow of a target row; a NaN or infinity is reported naming the model and the
  /// position.
  sampling::ProcessedRow<float> plan(std::span<const float> row, std::string_view model,
                                     std::size_t position) {
    try {
      return sampling::plan_processing<float>(row, params_, std::span<float>(work_));
    } catch (const Error&) {
      detail::check_finite_logits(row, model, position);
      throw;
    }
  }

  /// process_logits, whose own check of the logits (it throws on a NaN or infinity) is
  /// rethrown naming the model and the position: no second pass over the row when all is well.
  void process(std::span<const float> row, std::span<float> out, std::string_view model,
               std::size_t position) const {
    try {
      sampling::process_logits<float>(row, params_, out);
    } catch (const Error&) {
      detail::check_finite_logits(row, model, position);
      throw;
    }
  }

  /// The row of a position `drafted` tokens into the round (0: the position of the round's
  /// last token), adjusted for its context when penalties are active: history_ + x_1 .. x_drafted.
  /// Valid until the next call. Without penalties, the row itself.
  std::span<const float> adjusted(std::span<const float> row, std::size_t drafted) {
    if (!penalties_.active()) return row;
    return penalised(row, tokens_.begin() + 1,
                     tokens_.begin() + 1 + static_cast<std::ptrdiff_t>(drafted));
  }

  /// Row `node` of a token tree (verify_tree), adjusted for its context when penalties are
  /// active: history_ + the tokens on the path from the root to the node (the root, the
  /// sequence's last token, is not repeated: history_ ends with it). Valid until the next call.
  std::span<const float> tree_row(std::span<const float> row, std::span<const token_t> tokens,
                                  std::span<const std::int32_t> parents, std::size_t node) {
    if (!penalties_.active()) return row;
    path_tokens_.clear();
    for (std::size_t a = node; a != 0; a = static_cast<std::size_t>(parents[a]))
      path_tokens_.push_back(tokens[a]);
    return penalised(row, path_tokens_.rbegin(), path_tokens_.rend());
  }

  /// `row` with the penalties applied for the context history_ followed by the tokens
  /// [first, last) (adjusted() and tree_row(): a chain's drafted tokens, a tree node's path).
  /// Valid until the next call.
  template <class TokenIt>
  std::span<const float> penalised(std::span<const float> row, TokenIt first, TokenIt last) {
    window_.assign(history_.begin(), history_.end());
    window_.insert(window_.end(), first, last);
    adjusted_.resize(vocab_);
    applier_.apply(penalties_, sampling::PenaltyApplier::window_of(penalties_, window_), row,
                   adjusted_);
    return adjusted_;
  }

  void check_k(std::size_t k) const {
    if (tokens_.empty() || k + 1 > tokens_.size())
      throw Error("HostSampler: a round of " + std::to_string(k) + " drafted tokens, but " +
                  std::to_string(tokens_.empty() ? 0 : tokens_.size() - 1) + " were drafted");
  }

  std::size_t vocab_;
  sampling::SamplingParams params_{};
  sampling::PhiloxStream target_rng_{0, kTargetStream};
  sampling::PhiloxStream draft_rng_{0, kDraftStream};
  std::vector<token_t> tokens_;  // [1 + k]: the sequence's last token, x_1 .. x_k
  std::vector<float> q_;         // [k][V]: processed draft rows (Proposal::sampled)
  std::vector<float> p_;         // [k + 1][V]: processed target rows of the last verify
  std::vector<float> p_drafted_, q_drafted_;  // [k]: p(x_i), q(x_i) of the last verify
  std::vector<std::size_t> argmax_;           // [k + 1]: argmax of each target row (greedy)
  std::vector<float> work_;                   // [V]: scratch of the target rows' plans (top-p)
  sampling::Penalties penalties_{};
  sampling::PenaltyApplier applier_;
  std::vector<token_t> history_;      // [<= last_n]: the penalties' scope before the round
  std::vector<token_t> window_;       // [<= last_n + k]: a row's context (scratch)
  std::vector<float> adjusted_;       // [V]: the adjusted row (penalties active)
  std::vector<token_t> path_tokens_;  // a tree node's path, node first (tree_row scratch)
  bool logprobs_on_ = false;
  std::size_t top_n_ = 0;
  std::vector<sampling::TokenLogprob> logprobs_;  // [n + 1]: of the last verify's emitted tokens
  std::vector<float> top_buffer_;                 // scratch of the top-n selection
  std::vector<token_t> emitted_;                  // [n + 1]: the tokens logprobs_ describe
  std::vector<std::size_t> emitted_rows_;         // [n + 1]: the target row of each
  std::vector<std::size_t> depth_;                // [tree nodes]: a tree's depths
  std::vector<std::size_t> tree_path_;            // the accepted path of the last tree
  std::vector<float> removed_;                    // draw_candidates: the drawn tokens' q
  double seconds_ = 0;
};

template <>
struct SamplerFor<Memory::host> {
  using type = HostSampler;
};

static_assert(RoundSampler<HostSampler>);
static_assert(TreeSampler<HostSampler>);
static_assert(SampledTreeSampler<HostSampler>);
static_assert(SteppedDraftSampler<HostSampler>);

}  // namespace specdec
