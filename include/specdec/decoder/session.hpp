#pragma once
// SpeculativeSession<Draft, Target>: one sequence (a conversation) decoded round by round, in the
// spirit of llama.cpp's common_speculative (begin / draft / accept) and of vLLM's step.
//
//   start(prompt, config)    a new sequence: both caches reset, the prompt minus its last token
//                            prefilled
//   append(tokens, config)   the next turn of the same sequence: the caches keep what they hold,
//                            only the new tokens are prefilled
//   step()                   one round -> its RoundRecord (the tokens are streamed through
//                            Callbacks::on_token as they are emitted); done() after a stop
//   run()                    step() until done(), polling Callbacks::should_stop before each
//                            round -> the GenerationResult of the turn
//
// A round has three phases, public so that a driver can run several sequences in lockstep (and a
// later batched target can verify all of them in one forward):
//   1. propose()       choose k, let the drafter draft; returns the target's input for the round
//                      (the sequence's last token and x_1 .. x_k, on the host or on the device);
//   2. the caller runs the target forward over that input (k + 1 rows of logits);
//   3. accept(rows)    verify, roll the caches back to the accepted prefix, emit x_1 .. x_n, y.
// step() is propose(), the target forward and accept(); with a device sampler it fuses the
// forward and the verification into one captured CUDA graph.
//
// The sampler (SamplerFor, sampling/round.hpp) is picked by where the target's logits live:
// HostSampler for host logits, cuda::DeviceSampler for device logits. A draft model whose logits
// live elsewhere than the target's is a compile error.
//
// Bookkeeping (docs/decoder.md, "One round"): at the start of every round the target's cache
// holds exactly the sequence minus its last token, and the draft model's cache a prefix of it.

#include <algorithm>
#include <chrono>
#include <concepts>
#include <cstddef>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <type_traits>
#include <utility>
#include <vector>

#include "specdec/common.hpp"
#include "specdec/decoder/drafters.hpp"
#include "specdec/decoder/generation.hpp"
#include "specdec/decoder/sampler.hpp"
#include "specdec/decoder/telemetry.hpp"
#include "specdec/model/causal_lm.hpp"
#include "specdec/model/tokenizer.hpp"

namespace specdec {

/// How many tokens to draft per round.
struct SpeculativeOptions {
  std::size_t k = 4;      ///< fixed draft length (ignored when adaptive)
  bool adaptive = false;  ///< choose k each round with AdaptiveDraftLength
  /// A proposal of fewer tokens is not verified: the round is a plain target step (llama.cpp's
  /// --draft-min; exactness is unaffected, any subset of rounds may skip its draft).
  std::size_t min_draft = 0;
  AdaptiveDraftLength::Options adaptive_options{};
  /// Tree rounds: > 0 makes each round verify a token tree of at most this many proposed nodes
  /// (the drafter's draft_tree, in one target forward_tree) instead of a chain of k tokens. Needs
  /// a TreeDrafter (SuffixDrafter), a TreeCausalLM target (the CPU backend, up to 255 nodes; the
  /// CUDA backend, up to 15) and a sampler that verifies trees (TreeSampler: the host's and the
  /// device's); 0: chains.
  std::size_t max_tree_nodes = 0;
  /// Tree rounds: C(n) = T(n + 1) / T(1), the cost of a target forward over a tree of n nodes
  /// (and the sequence's last token) in target steps, n = 0 .. max_tree_nodes (measured:
  /// cost_model.hpp's round_costs with no draft step). Each round keeps the best-first prefix of
  /// the drafter's nodes that maximises (1 + the sum of their scores) / C(n): the scores estimate
  /// the probability that a node's path is accepted, so that is the expected tokens of the round
  /// per unit of cost. Empty: the guess C(n) = 1 + tree_node_cost * n.
  std::vector<double> tree_cost{};
  double tree_node_cost = 0.15;  ///< the guess's cost of one more node, in target steps
  /// Tree rounds: the cost of one draft forward in target steps (D / T(1), measured); the
  /// drafting of a round (its forward_passes()) is spent whatever the tree keeps, but it is part
  /// of the round's time, so the rate to maximise is (1 + sum of scores) / (C(n) + passes * this).
  /// 0: the drafting is left out (a model-free drafter).
  double tree_draft_cost = 0;
};

namespace detail {

/// The drafter a session over Draft holds: a reference to a Drafter, a ModelDrafter around a
/// model, or (NoDrafter) the empty drafter itself.
template <class Draft>
struct DrafterHolder {
  explicit DrafterHolder(Draft& d) : drafter(&d) {}
  Draft& get() { return *drafter; }
  const Draft& get() const { return *drafter; }
  Draft* drafter;
};
template <class Draft>
requires(!Drafter<Draft> && CausalLM<Draft>) struct DrafterHolder<Draft> {
  explicit DrafterHolder(Draft& d) : drafter(d) {}
  ModelDrafter<Draft>& get() { return drafter; }
  const ModelDrafter<Draft>& get() const { return drafter; }
  ModelDrafter<Draft> drafter;
};
template <>
struct DrafterHolder<NoDrafter> {
  DrafterHolder() = default;
  explicit DrafterHolder(NoDrafter&) {}
  NoDrafter& get() { return drafter; }
  const NoDrafter& get() const { return drafter; }
  NoDrafter drafter;
};

}  // namespace detail

template <class Draft, CausalLM Target>
requires(Drafter<Draft> || CausalLM<Draft>) class SpeculativeSession {
 public:
  using Holder = detail::DrafterHolder<Draft>;
  using DrafterType = std::remove_cvref_t<decltype(std::declval<Holder&>().get())>;
  using Sampler = sampler_for_t<Target>;

  static_assert(Drafter<Draft> || logits_memory_v<Draft> == logits_memory_v<Target>,
                "SpeculativeDecoder<Draft, Target>: the draft model's logits and the target's live "
                "in different memories (one on the host, one on a device: logits_memory_v). One "
                "sampler, chosen by where the target's logits live, samples both models' rows: run "
                "the draft and the target on the same backend.");
  static_assert(RoundSampler<Sampler>);
  static_assert(DrafterFor<DrafterType, Sampler>,
                "SpeculativeDecoder<Draft, Target>: the drafter cannot hand its tokens to the "
                "sampler of this target (DrafterFor<Drafter, Sampler>)");

  /// The draft and target (and tokenizers, optional) must outlive the session. `tokenizer` is
  /// the target's: used for the streamed text, stop strings and the EOS id. When the draft's
  /// tokenizer is given as well it must have the same vocabulary size. Throws specdec::Error
  /// when the draft's and target's vocabulary sizes differ. `name` prefixes the errors.
  SpeculativeSession(Draft& draft, Target& target, SpeculativeOptions options = {},
                     const Tokenizer* tokenizer = nullptr,
                     const Tokenizer* draft_tokenizer = nullptr,
                     const char* name = "SpeculativeDecoder")
      : drafter_(draft),
        target_(&target),
        options_(std::move(options)),
        tokenizer_(tokenizer),
        name_(name),
        sampler_max_k_(wanted_max_k()),
        sampler_(target, sampler_max_k_) {
    if (static_cast<const void*>(&draft) == static_cast<const void*>(&target))
      throw Error(std::string(name_) +
                  ": the draft and the target are the same object (their KV caches would clash); "
                  "construct a second model on the same weights instead");
    const std::size_t draft_vocab = drafter_.get().vocab_size();
    if (draft_vocab != 0 && draft_vocab != target_->vocab_size())
      throw Error(std::string(name_) + ": the draft's vocabulary has " +
                  std::to_string(draft_vocab) + " tokens but the target's has " +
                  std::to_string(target_->vocab_size()) + ": the pair must share one vocabulary");
    if (tokenizer && draft_tokenizer && tokenizer->vocab_size() != draft_tokenizer->vocab_size())
      throw Error(std::string(name_) + ": the draft's tokenizer has " +
                  std::to_string(draft_tokenizer->vocab_size()) + " tokens but the target's has " +
                  std::to_string(tokenizer->vocab_size()) + ": the pair must share one tokenizer");
    check_tokenizer();
    validate(options_);
  }

  SpeculativeSession(const SpeculativeSession&) = delete;  // the emitter points into it
  SpeculativeSession& operator=(const SpeculativeSession&) = delete;

  /// A session without a drafter: every round is one target step (AutoregressiveDecoder).
  explicit SpeculativeSession(
      Target& target, const Tokenizer* tokenizer = nullptr,
      const char* name = "AutoregressiveDecoder") requires std::same_as<Draft, NoDrafter>
      : target_(&target),
        tokenizer_(tokenizer),
        name_(name),
        sampler_max_k_(0),
        sampler_(target, 0) {
    check_tokenizer();
  }

  // ---------------------------------------------------------------- a generation

  /// Starts a new sequence: `prompt` (token ids, BOS included if the model wants one) is
  /// prefilled into both models (minus its last token, the first token of the first verify).
  /// The callbacks are kept for this generation. Throws specdec::Error on a bad request.
  void start(std::span<const token_t> prompt, const GenerationConfig& config,
             const Callbacks& callbacks = {}) {
    check_idle("start");
    sampling::validate(config.sampling);
    detail::check_request(prompt, target_->context_length(), target_->vocab_size(), config,
                          tokenizer_);
    if (sampler_max_k_ < wanted_max_k()) {
      sampler_max_k_ = wanted_max_k();
      sampler_ = Sampler(*target_, sampler_max_k_);
    }
    sampler_.begin(config.sampling, config.seed);
    configure_sampler(config);
    adaptive_.reset();
    if (options_.adaptive)
      adaptive_ = std::make_unique<AdaptiveDraftLength>(options_.adaptive_options);
    sequence_.assign(prompt.begin(), prompt.end());
    begin_turn(prompt, config, callbacks);
    {
      ScopedTimer timer(result_.stats.prefill_seconds);
      target_->rollback(0);
      prefill_target();
      drafter_.get().start(prompt);
      wait_for_models();
    }
    begin_decode();
  }

  /// Continues the sequence with `tokens` (e.g. the next user turn) once the previous generation
  /// is done: the caches keep the sequence so far, only the new tokens are prefilled (the
  /// previous generation's last token too, which no model has consumed yet). The Philox streams
  /// go on (GenerationConfig::seed is only read by start()), so every turn draws fresh uniforms.
  void append(std::span<const token_t> tokens, const GenerationConfig& config,
              const Callbacks& callbacks = {}) {
    check_idle("append");
    if (sequence_.empty())
      throw Error(std::string(name_) + ": append() continues a sequence: call start() first");
    if (!done_)
      throw Error(std::string(name_) +
                  ": append() while a generation is running: step it to the end or cancel() it");
    sampling::validate(config.sampling);
    detail::check_request(tokens, target_->context_length(), target_->vocab_size(), config,
                          tokenizer_, sequence_.size());
    sampler_.set_params(config.sampling);
    configure_sampler(config);
    sequence_.insert(sequence_.end(), tokens.begin(), tokens.end());
    begin_turn(tokens, config, callbacks);
    {
      ScopedTimer timer(result_.stats.prefill_seconds);
      prefill_target();
      drafter_.get().extend(sequence_);
      wait_for_models();
    }
    begin_decode();
  }

  /// True once the current generation stopped (or before the first start()).
  [[nodiscard]] bool done() const { return done_; }

  /// One round: propose(), the target forward, accept(). Returns the round's record (valid
  /// until the next round).
  const RoundRecord& step() {
    const TargetInput& input = propose();
    if constexpr (FusedVerifySampler<Sampler, Target>) {
      if (!tree_round()) {
        // The device path: the target's forward and the verification run as one captured
        // graph; the wait for the round's outcome lands in verify_seconds. (A tree round runs
        // forward_tree, then the device's tree verification, below: not fused yet.)
        RoundVerdict verdict;
        {
          ScopedTimer timer(round_.verify_seconds);
          verdict = sampler_.verify_forward(*target_, draft_.count, draft_.proposal, length_ - 1);
        }
        round_.sampling_seconds += sampler_.take_seconds();
        return finish_round(verdict);
      }
    }
    LogitsView rows;
    {
      ScopedTimer timer(round_.verify_seconds);
      rows = forward(input);
    }
    return accept(rows);
  }

  /// Stops the current generation with StopReason::cancelled (a round in progress is dropped).
  void cancel() {
    if (done_) return;
    if (phase_ != Phase::idle) {
      // Back to the state at the start of the round: the drafter keeps the sequence, the target
      // the sequence minus its last token (it may have run the verify forward already).
      drafter_.get().keep(length_);
      if (target_->cached() + 1 > length_) target_->rollback(length_ - 1);
      phase_ = Phase::idle;
    }
    conclude(StopReason::cancelled);
  }

  /// step() until done(), polling Callbacks::should_stop before each round; returns the result.
  GenerationResult run() {
    while (!done_) {
      if (callbacks_.should_stop && callbacks_.should_stop()) {
        cancel();
        break;
      }
      step();
    }
    return take_result();
  }

  /// The current generation's result (complete once done()).
  [[nodiscard]] const GenerationResult& result() const { return result_; }
  /// Moves the result out (what run() returns).
  GenerationResult take_result() { return std::exchange(result_, GenerationResult{}); }

  // ---------------------------------------------------------------- the phases of a round

  /// Phase 1: chooses this round's k (the rule's, clamped to the token budget and both contexts)
  /// and lets the drafter draft. Returns the target's input: [last token of the sequence,
  /// x_1 .. x_k'] on the host (input.host), or in device memory (input.device) with a device
  /// sampler. Valid until accept(). It is begin_propose(), the draft steps (each a forward of the
  /// draft model) and end_propose().
  const TargetInput& propose() {
    begin_propose();
    if constexpr (kSteppedDraft) {
      for (std::span<const token_t> feed = draft_input(); !feed.empty(); feed = draft_input()) {
        double seconds = 0;
        LogitsView rows;
        {
          ScopedTimer timer(seconds);
          rows = drafter_.get().model().forward(feed);
        }
        draft_output(rows, seconds);
      }
    }
    return end_propose();
  }

  /// Whether the drafter drafts in steps that a driver may run itself (a ModelDrafter with a
  /// host sampler): then phase 1 is begin_propose(), draft_input() / draft_output() until
  /// draft_input() is empty, end_propose(), and the driver can batch the draft model's forwards
  /// of several sequences (BatchedRounds, decoder/batched.hpp) as it batches the target's.
  static constexpr bool kSteppedDraft = SteppedDrafter<DrafterType, Sampler>;

  /// Whether this session can run tree rounds (SpeculativeOptions::max_tree_nodes): the drafter
  /// proposes trees, the target scores them in one forward and the sampler verifies them.
  static constexpr bool kTreeCapable =
      TreeDrafter<DrafterType> && TreeCausalLM<Target> && TreeSampler<Sampler>;
  /// Whether the current round verifies a tree (its target forward is forward_tree over
  /// tree_tokens() / tree_parents(), which forward() runs).
  [[nodiscard]] bool tree_round() const { return options_.max_tree_nodes > 0 && draft_.count > 0; }
  /// The current tree round's target tree: node 0 the sequence's last token (parent -1), node i
  /// the drafter's node i - 1.
  [[nodiscard]] std::span<const token_t> tree_tokens() const { return tree_tokens_; }
  [[nodiscard]] std::span<const std::int32_t> tree_parents() const { return tree_parents_; }

  /// Phase 1, first part: chooses k and begins the round. A drafter that does not draft in
  /// steps (n-gram lookup, a device sampler's model drafter) drafts here, at once.
  void begin_propose() {
    if (done_)
      throw Error(std::string(name_) + ": the generation is over (start() or append() first)");
    if (phase_ != Phase::idle)
      throw Error(std::string(name_) + ": propose() twice: accept() the round first");
    const std::size_t length = sequence_.size();
    if (target_->cached() + 1 != length)
      throw Error(std::string(name_) + ": the target's cache (" +
                  std::to_string(target_->cached()) + " positions) is out of step with the " +
                  "sequence (" + std::to_string(length) + " tokens): was the model used " +
                  "elsewhere meanwhile?");
    auto& drafter = drafter_.get();
    // The draft length: the rule's k, cut so that the round cannot emit more than the budget (it
    // emits at most k + 1 tokens), cannot overflow the target's context (the verify ends at
    // position length + k - 1 and y lands at position length + k), nor the draft's.
    const std::size_t wanted = adaptive_ ? adaptive_->next() : options_.k;
    const std::size_t k =
        std::min({wanted, sampler_max_k_, emitter_->remaining() - 1,
                  target_->context_length() - length - 1, drafter.max_draft(length)});

    round_ = RoundRecord{};
    round_.position = length;
    round_.draft_length = k;
    length_ = length;
    draft_ = DraftResult{};
    draft_step_ = draft_steps_ = 0;
    phase_ = Phase::drafting;  // from here on, cancel() rolls the drafter back
    sampler_.begin_round(sequence_.back());
    if constexpr (PenaltySampler<Sampler>) {
      if (config_.penalties.active()) {
        // The penalties' scope before the round: the whole sequence, or the turn's completion.
        const std::size_t from =
            config_.penalties.scope == sampling::PenaltyScope::completion ? completion_begin_ : 0;
        sampler_.set_history(std::span<const token_t>(sequence_).subspan(from));
      }
    }
    if constexpr (kTreeCapable) {
      if (options_.max_tree_nodes > 0) {
        // A tree of at most max_tree_nodes nodes whose slots fit in the target's context (the
        // tree's n + 1 nodes sit after the length - 1 cached positions), and no deeper than the
        // budget can emit (a path of d nodes emits d + 1 tokens).
        round_.draft_length = std::min({options_.max_tree_nodes, target_->context_length() - length,
                                        drafter.max_draft(length)});
        double seconds = 0;
        std::size_t forwards = 0;  // the drafter's model forwards
        {
          ScopedTimer timer(seconds);
          const std::span<const token_t> sequence(sequence_);
          const DraftTree& tree = [&]() -> const DraftTree& {
            // A drafter that can draw from the sampler's distributions gets it (sampled trees).
            if constexpr (requires { drafter.draft_tree(sequence, std::size_t{}, sampler_); })
              return drafter.draft_tree(sequence, round_.draft_length, sampler_);
            else
              return drafter.draft_tree(sequence, round_.draft_length);
          }();
          if constexpr (requires { drafter.forward_passes(); }) forwards = drafter.forward_passes();
          target_tree(tree, round_.draft_length, emitter_->remaining() - 1, forwards);
        }
        round_.draft_seconds = seconds;
        draft_ =
            DraftResult{tree_tokens_.size() - 1,
                        tree_proposal_ == sampling::TreeProposal::point_mass ? Proposal::point_mass
                                                                             : Proposal::sampled,
                        forwards};
        return;
      }
    }
    if constexpr (kSteppedDraft) {
      if (k == 0) return;
      drafter.check_draft(std::span<const token_t>(sequence_), k);
      draft_steps_ = k;
      draft_ = DraftResult{k, Proposal::sampled, k};
    } else {
      double seconds = 0;
      {
        ScopedTimer timer(seconds);
        draft_ = drafter.draft(std::span<const token_t>(sequence_), k, sampler_);
      }
      const double sampling = sampler_.take_seconds();
      round_.draft_seconds = seconds - sampling;
      round_.sampling_seconds += sampling;
      if (draft_.count > k)
        throw Error(std::string(name_) + ": the drafter proposed " + std::to_string(draft_.count) +
                    " tokens, more than the " + std::to_string(k) + " asked for");
    }
  }

  /// The tokens the draft model must be fed for the next draft step; empty once the draft is
  /// complete (at once for a drafter that does not draft in steps).
  std::span<const token_t> draft_input() {
    if (phase_ != Phase::drafting)
      throw Error(std::string(name_) + ": draft_input() outside a round's draft (begin_propose())");
    if constexpr (kSteppedDraft) {
      if (draft_step_ < draft_steps_) {
        const std::span<const token_t> feed =
            drafter_.get().step_input(std::span<const token_t>(sequence_), draft_step_, sampler_);
        draft_fed_ = feed.size();
        return feed;
      }
    }
    return {};
  }

  /// The draft model's rows for draft_input()'s tokens: draws the next drafted token.
  /// `forward_seconds`, the time of the forward that computed them, is counted as draft time.
  void draft_output(const LogitsView& rows, double forward_seconds = 0) {
    if (phase_ != Phase::drafting || draft_step_ >= draft_steps_ || draft_fed_ == 0)
      throw Error(std::string(name_) + ": draft_output() without a draft_input() to answer");
    if constexpr (kSteppedDraft) {
      drafter_.get().step_output(std::span<const token_t>(sequence_), draft_step_, rows, draft_fed_,
                                 sampler_);
    }
    draft_fed_ = 0;
    ++draft_step_;
    round_.draft_seconds += forward_seconds;
    round_.sampling_seconds += sampler_.take_seconds();
  }

  /// Phase 1, last part: the target's input (as propose() returns it), once the draft is
  /// complete.
  const TargetInput& end_propose() {
    if (phase_ != Phase::drafting)
      throw Error(std::string(name_) + ": end_propose() without begin_propose()");
    if (draft_step_ < draft_steps_)
      throw Error(std::string(name_) + ": end_propose() after " + std::to_string(draft_step_) +
                  " of the draft's " + std::to_string(draft_steps_) + " steps");
    if (draft_.count < options_.min_draft) draft_.count = 0;  // too short to be worth a verify
    input_ = tree_round() ? TargetInput{tree_tokens_, {}} : sampler_.target_input(draft_.count);
    phase_ = Phase::proposed;
    return input_;
  }

  /// Phase 3: the k' + 1 target rows for propose()'s input -> verification, roll-back, emission
  /// (on_token, on_round). Returns the round's record. `forward_seconds`: the time of the
  /// caller's target forward (of a batched forward, all of it: the sequence waited for it),
  /// counted as verify time.
  const RoundRecord& accept(const LogitsView& target_rows, double forward_seconds = 0) {
    if (phase_ != Phase::proposed)
      throw Error(std::string(name_) + ": accept() without a proposed round");
    round_.verify_seconds += forward_seconds;
    if constexpr (kTreeCapable) {
      if (tree_round()) return accept_tree(target_rows);
    }
    RoundVerdict verdict;
    {
      ScopedTimer timer(round_.sampling_seconds);
      verdict = sampler_.verify(target_rows, draft_.count, draft_.proposal, length_ - 1);
    }
    (void)sampler_.take_seconds();  // counted by the timer
    return finish_round(verdict);
  }

  /// The target forward of phase 2 for a single sequence (forward_tree in a tree round).
  LogitsView forward(const TargetInput& input) {
    if constexpr (kTreeCapable) {
      if (tree_round()) return target_->forward_tree(tree_tokens_, tree_parents_);
    }
    if constexpr (Sampler::memory == Memory::device) {
      return target_->forward(input.device);
    } else {
      return target_->forward(input.host);
    }
  }

  // ---------------------------------------------------------------- state

  /// The sequence so far: prompt(s) and generated tokens (EOS excluded).
  [[nodiscard]] const std::vector<token_t>& sequence() const { return sequence_; }
  [[nodiscard]] const SpeculativeOptions& options() const { return options_; }
  /// New options; a larger draft length takes effect at the next start().
  void set_options(const SpeculativeOptions& options) {
    validate(options);
    options_ = options;
  }
  [[nodiscard]] const Tokenizer* tokenizer() const { return tokenizer_; }
  [[nodiscard]] DrafterType& drafter() { return drafter_.get(); }
  [[nodiscard]] Target& target() { return *target_; }
  [[nodiscard]] Sampler& sampler() { return sampler_; }

 private:
  enum class Phase { idle, drafting, proposed };

  [[nodiscard]] std::size_t wanted_max_k() const {
    if constexpr (std::same_as<Draft, NoDrafter>) {
      return 0;
    } else {
      return options_.adaptive ? options_.adaptive_options.max_k : options_.k;
    }
  }

  void validate(const SpeculativeOptions& options) const {
    if (options.max_tree_nodes > 0 && !kTreeCapable)
      throw Error(std::string(name_) +
                  ": tree rounds (max_tree_nodes > 0) need a drafter that proposes trees "
                  "(SuffixDrafter), a target that scores them (TreeCausalLM: the CPU and CUDA "
                  "backends) and a sampler that verifies them");
    if constexpr (requires { Target::max_tree_nodes; }) {
      // The tree the target scores holds the drafted nodes and the sequence's last token.
      if (options.max_tree_nodes + 1 > Target::max_tree_nodes)
        throw Error(
            std::string(name_) + ": max_tree_nodes is " + std::to_string(options.max_tree_nodes) +
            ", but the target scores trees of at most " + std::to_string(Target::max_tree_nodes) +
            " nodes, the sequence's last token included: at most " +
            std::to_string(Target::max_tree_nodes - 1) + " drafted nodes");
    }
    for (const double c : options.tree_cost)
      if (!(c > 0) || c > 1e9)
        throw Error(std::string(name_) + ": tree_cost holds " + std::to_string(c) +
                    ": each C(n) must be a positive cost in target steps");
    if (!(options.tree_node_cost >= 0) || options.tree_node_cost > 1e9)
      throw Error(std::string(name_) + ": tree_node_cost must be >= 0");
    if (!(options.tree_draft_cost >= 0) || options.tree_draft_cost > 1e9)
      throw Error(std::string(name_) + ": tree_draft_cost must be >= 0");
    if (options.max_tree_nodes > 0 && options.adaptive)
      throw Error(std::string(name_) +
                  ": tree rounds choose their size from max_tree_nodes; "
                  "the adaptive draft length applies to chains");
    if (!options.adaptive && options.k == 0)
      throw Error(std::string(name_) + ": the draft length k must be >= 1");
    if (options.adaptive) (void)AdaptiveDraftLength(options.adaptive_options);  // validates
    const std::size_t max_k = options.adaptive ? options.adaptive_options.max_k : options.k;
    if (options.min_draft > max_k)
      throw Error(std::string(name_) + ": min_draft " + std::to_string(options.min_draft) +
                  " exceeds the largest draft length " + std::to_string(max_k));
  }

  void check_tokenizer() const {
    if (tokenizer_ && tokenizer_->vocab_size() > target_->vocab_size())
      throw Error(std::string(name_) + ": the tokenizer has " +
                  std::to_string(tokenizer_->vocab_size()) + " tokens, the target only " +
                  std::to_string(target_->vocab_size()));
  }

  /// Hands the request's penalties and log-probability settings to the sampler (a sampler
  /// without them refuses them).
  void configure_sampler(const GenerationConfig& config) {
    if constexpr (PenaltySampler<Sampler>) {
      sampler_.set_penalties(config.penalties);
    } else if (config.penalties.active()) {
      throw Error(std::string(name_) +
                  ": repetition penalties and logit bias are applied by the host sampler only; "
                  "the device sampler (CUDA backend) does not apply them yet: run on the CPU "
                  "backend or leave them off");
    }
    if constexpr (LogprobSampler<Sampler>) {
      sampler_.set_logprobs(config.logprobs, config.top_logprobs);
    } else if (config.logprobs) {
      throw Error(std::string(name_) +
                  ": log-probabilities are reported by the host sampler only; the device "
                  "sampler (CUDA backend) does not report them yet: run on the CPU backend");
    }
  }

  void check_idle(const char* what) const {
    if (phase_ != Phase::idle)
      throw Error(std::string(name_) + ": " + what + "() in the middle of a round");
  }

  /// A new generation over the sequence, which now ends with `prompt` (its new tokens).
  void begin_turn(std::span<const token_t> prompt, const GenerationConfig& config,
                  const Callbacks& callbacks) {
    config_ = config;
    callbacks_ = callbacks;
    result_ = GenerationResult{};
    result_.stats.prompt_tokens = prompt.size();
    emitter_.emplace(prompt, config_, tokenizer_, callbacks_.on_token, sequence_, result_);
    completion_begin_ = sequence_.size();
    done_ = false;
  }

  /// Feeds the target what it does not hold of the sequence minus its last token.
  void prefill_target() {
    const std::size_t want = sequence_.size() - 1;
    const std::size_t cached = target_->cached();
    if (cached > want) target_->rollback(want);
    if (cached >= want) return;
    const LogitsView logits =
        target_->forward(std::span<const token_t>(sequence_).subspan(cached, want - cached));
    detail::check_logits(logits, want - cached, target_->vocab_size(), "target (prefill)",
                         logits_memory_v<Target>);
  }

  /// The models' completion points (specdec::synchronize): a device model's prefill is enqueued,
  /// and without the wait its time would be counted in the first round instead of the prefill.
  void wait_for_models() {
    specdec::synchronize(*target_);
    if constexpr (requires(DrafterType & d) { d.model(); })
      specdec::synchronize(drafter_.get().model());
  }

  void begin_decode() {
    decode_start_ = ScopedTimer::clock::now();
    if (emitter_->stopped()) {
      conclude(StopReason::max_tokens);  // a budget of 0
    } else if (sequence_.size() >= target_->context_length()) {
      conclude(StopReason::context_full);  // not one more token fits
    }
  }

  /// The target's tree for the drafter's `tree`: node 0 the sequence's last token, then the
  /// drafter's nodes of depth < max_depth (at most max_nodes of them), parents renumbered, cut
  /// by the cost model; the drafting took `draft_passes` draft forwards. A sampled tree's rows
  /// of q are gathered in the target tree's order (tree_q_).
  void target_tree(const DraftTree& tree, std::size_t max_nodes, std::size_t max_depth,
                   std::size_t draft_passes) {
    if (tree.parents.size() != tree.size())
      throw Error(std::string(name_) + ": the drafter's tree has " + std::to_string(tree.size()) +
                  " tokens but " + std::to_string(tree.parents.size()) + " parents");
    tree_proposal_ = tree.proposal;
    if (tree.sampled()) {
      if constexpr (!SampledTreeSampler<Sampler>) {
        throw Error(std::string(name_) +
                    ": the drafter proposed a tree of sampled candidates, but this sampler "
                    "verifies point masses only");
      }
      if (tree.vocab != target_->vocab_size() || tree.q_rows.size() != tree.size() + 1)
        throw Error(std::string(name_) + ": the drafter's sampled tree has rows of " +
                    std::to_string(tree.vocab) + " probabilities and " +
                    std::to_string(tree.q_rows.size()) + " row indices for " +
                    std::to_string(tree.size()) + " nodes (the target's vocabulary has " +
                    std::to_string(target_->vocab_size()) + ")");
    }
    tree_tokens_.assign(1, sequence_.back());
    tree_parents_.assign(1, -1);
    tree_depth_.assign(1, 0);
    tree_score_.assign(1, 1.0);
    tree_from_.assign(1, -1);
    tree_index_.assign(tree.size(), -1);  // drafter node -> target node (-1: pruned)
    for (std::size_t i = 0; i < tree.size() && tree_tokens_.size() <= max_nodes; ++i) {
      const std::int32_t parent = tree.parents[i];
      if (parent < -1 || parent >= static_cast<std::int64_t>(i))
        throw Error(std::string(name_) + ": the drafter's node " + std::to_string(i) +
                    " has parent " + std::to_string(parent) + " (must be -1 or an earlier node)");
      const std::int32_t at = parent < 0 ? 0 : tree_index_[static_cast<std::size_t>(parent)];
      if (at < 0) continue;  // under a pruned node
      const std::size_t depth = tree_depth_[static_cast<std::size_t>(at)] + 1;
      if (depth > max_depth) continue;
      tree_index_[i] = static_cast<std::int32_t>(tree_tokens_.size());
      tree_from_.push_back(static_cast<std::int32_t>(i));
      tree_tokens_.push_back(tree.tokens[i]);
      tree_parents_.push_back(at);
      tree_depth_.push_back(depth);
      tree_score_.push_back(i < tree.scores.size() ? tree.scores[i] : 1.0);
    }
    // The cost model: keep the first n nodes (a prefix keeps every node's parent) for the n that
    // maximises the expected tokens per unit of cost, (1 + sum of scores) / (C(n) + drafting).
    // For sampled candidates, the first n where one more node stops paying instead: the best n
    // overall depends on the scores of the nodes after n, among them a node's own descendants,
    // whose scores follow from its drawn token (its q row); whether a node is kept would then
    // depend on its own draw, and the draws would lose q's law (docs/math.md 3.7). The first
    // local maximum decides a node's fate from the nodes before it, which never include its
    // descendants or its later siblings (best-first order).
    std::size_t best = 0;
    double best_rate = 0, expected = 1;
    const double drafting = static_cast<double>(draft_passes) * options_.tree_draft_cost;
    for (std::size_t n = 0; n < tree_tokens_.size(); ++n) {
      if (n > 0) expected += tree_score_[n];
      const double cost = drafting + (n < options_.tree_cost.size()
                                          ? options_.tree_cost[n]
                                          : 1.0 + options_.tree_node_cost * static_cast<double>(n));
      if (expected / cost > best_rate) {
        best_rate = expected / cost;
        best = n;
      } else if (tree.sampled() && n > 0) {
        break;
      }
    }
    tree_tokens_.resize(best + 1);
    tree_parents_.resize(best + 1);
    tree_depth_.resize(best + 1);
    tree_from_.resize(best + 1);
    detail::check_proposal(std::span<const token_t>(tree_tokens_).subspan(1),
                           target_->vocab_size());
    if (tree.sampled()) gather_q_rows(tree);
  }

  /// tree_q_ (n x V, the target tree's order) = the drafter's q rows of the target tree's nodes
  /// that have children (the others are not read). Checks that each such node has its row.
  void gather_q_rows(const DraftTree& tree) {
    const std::size_t n = tree_tokens_.size(), vocab = tree.vocab;
    tree_q_.resize(n * vocab);
    has_children_.assign(n, 0);
    for (std::size_t t = 1; t < n; ++t)
      has_children_[static_cast<std::size_t>(tree_parents_[t])] = 1;
    for (std::size_t t = 0; t < n; ++t) {
      if (has_children_[t] == 0) continue;
      const std::span<const float> row = tree.q_row(tree_from_[t]);
      if (row.empty())
        throw Error(std::string(name_) + ": the drafter's sampled tree has no q row for " +
                    (tree_from_[t] < 0 ? std::string("the context (its first children)")
                                       : "node " + std::to_string(tree_from_[t])) +
                    ", which has children");
      std::copy(row.begin(), row.end(), tree_q_.begin() + static_cast<std::ptrdiff_t>(t * vocab));
    }
  }

  /// Phase 3 of a tree round: verification, the accepted path kept in the target's cache
  /// (accept_path), emission.
  const RoundRecord& accept_tree(const LogitsView& target_rows) {
    TreeVerdict tree;
    {
      ScopedTimer timer(round_.sampling_seconds);
      if constexpr (SampledTreeSampler<Sampler>) {
        // Point masses carry no q (tree_q_ may hold an earlier round's rows).
        const bool sampled = tree_proposal_ != sampling::TreeProposal::point_mass;
        tree = sampler_.verify_tree(
            target_rows, tree_tokens_, tree_parents_, length_ - 1, tree_proposal_,
            sampled ? std::span<const float>(tree_q_) : std::span<const float>());
      } else {
        tree = sampler_.verify_tree(target_rows, tree_tokens_, tree_parents_, length_ - 1);
      }
    }
    (void)sampler_.take_seconds();  // counted by the timer
    tree_path_.assign(1, 0);
    tree_path_.insert(tree_path_.end(), tree.path.begin(), tree.path.end());
    target_->accept_path(tree_path_);
    path_tokens_.clear();
    for (const std::size_t node : tree.path) path_tokens_.push_back(tree_tokens_[node]);
    RoundVerdict verdict{tree.path.size(), tree.next, path_tokens_, {}, {}, tree.logprobs};
    return finish_round(verdict, &tree);
  }

  /// Bookkeeping and emission of a round; `tree`: a tree round's verdict (verdict.drafted then
  /// holds the accepted path's tokens).
  const RoundRecord& finish_round(const RoundVerdict& verdict, const TreeVerdict* tree = nullptr) {
    const std::size_t n = verdict.accepted;
    const std::size_t drafted = draft_.count;
    const std::size_t length = length_;
    if (n > drafted || (tree == nullptr && verdict.drafted.size() != drafted))
      throw Error(std::string(name_) + ": the sampler accepted " + std::to_string(n) + " of " +
                  std::to_string(drafted) + " drafted tokens");
    auto& drafter = drafter_.get();
    // Roll back to the accepted prefix: the target consumed the last token and x_1 .. x_k'; it
    // keeps the sequence plus x_1 .. x_n (y is fed by the next verify).
    if (target_->cached() > length + n) target_->rollback(length + n);
    drafter.keep(length + n);

    GenerationStats& stats = result_.stats;
    ++stats.rounds;
    ++stats.target_passes;
    stats.draft_passes += draft_.forward_passes;
    if (drafted > 0) stats.count_draft(drafted, n);
    if (adaptive_) adaptive_->update(drafted, n);
    stats.draft_seconds += round_.draft_seconds;
    stats.verify_seconds += round_.verify_seconds;
    stats.sampling_seconds += round_.sampling_seconds;

    round_.accepted = n;
    round_.next = verdict.next;
    if (tree != nullptr) {
      // The whole tree (the drafter's nodes that were verified) and the accepted nodes in it.
      round_.drafted.assign(tree_tokens_.begin() + 1, tree_tokens_.end());
      round_.tree_parents.clear();
      for (std::size_t i = 1; i < tree_parents_.size(); ++i)
        round_.tree_parents.push_back(tree_parents_[i] - 1);
      round_.accepted_nodes.clear();
      for (const std::size_t node : tree->path) round_.accepted_nodes.push_back(node - 1);
      round_.rejected = -1;
      round_.bonus = tree->leaf;
    } else {
      round_.drafted.assign(verdict.drafted.begin(), verdict.drafted.end());
      round_.rejected = n < drafted ? verdict.drafted[n] : -1;
      round_.bonus = n == drafted;
    }
    round_.p_drafted.assign(verdict.p_drafted.begin(), verdict.p_drafted.end());
    round_.q_drafted.assign(verdict.q_drafted.begin(), verdict.q_drafted.end());

    // Emit x_1 .. x_n, y; a stop (EOS, budget, stop string) may end the round early. Then no
    // cache may hold tokens beyond the sequence (a later append() continues from it).
    const std::size_t before = result_.tokens.size();
    for (std::size_t i = 0; i <= n; ++i)
      if (!emitter_->emit(i < n ? verdict.drafted[i] : verdict.next,
                          i < verdict.logprobs.size() ? &verdict.logprobs[i] : nullptr))
        break;
    round_.emitted = result_.tokens.size() - before;
    if (target_->cached() > sequence_.size()) target_->rollback(sequence_.size());
    drafter.keep(sequence_.size());
    phase_ = Phase::idle;

    if (callbacks_.on_round) callbacks_.on_round(round_);
    if (config_.record_rounds) result_.rounds.push_back(round_);
    if (emitter_->stopped()) {
      conclude(StopReason::max_tokens);  // keeps the reason already decided
    } else if (sequence_.size() >= target_->context_length()) {
      conclude(StopReason::context_full);
    }
    return round_;
  }

  void conclude(StopReason reason) {
    emitter_->finish(reason);
    GenerationStats& stats = result_.stats;
    stats.decode_seconds +=
        std::chrono::duration<double>(ScopedTimer::clock::now() - decode_start_).count();
    stats.tokens_emitted = result_.tokens.size();
    stats.finalize();
    done_ = true;
  }

  Holder drafter_;
  Target* target_;
  SpeculativeOptions options_{};
  const Tokenizer* tokenizer_ = nullptr;
  const char* name_;
  std::size_t sampler_max_k_;
  Sampler sampler_;
  // A pointer, not std::optional: GCC 12 at -O3 reports a false maybe-uninitialized for an
  // optional holding the rule's vector of round costs.
  std::unique_ptr<AdaptiveDraftLength> adaptive_;

  // The current generation.
  GenerationConfig config_;
  Callbacks callbacks_;
  std::vector<token_t> sequence_;  // prompt(s) + generated tokens
  GenerationResult result_;
  std::optional<detail::Emitter> emitter_;
  bool done_ = true;
  ScopedTimer::clock::time_point decode_start_{};
  std::size_t completion_begin_ = 0;  // sequence_ index of the turn's first generated token

  // The current round.
  Phase phase_ = Phase::idle;
  std::size_t length_ = 0;  // sequence length when it began
  RoundRecord round_;
  DraftResult draft_;
  std::size_t draft_steps_ = 0, draft_step_ = 0;  // stepped drafting: steps in all, done
  std::size_t draft_fed_ = 0;                     // tokens of the last draft_input()
  TargetInput input_;
  // A tree round: the target's tree (node 0 the sequence's last token), each node's depth, the
  // drafter's node -> target node map, the accepted path (with node 0) and its tokens.
  std::vector<token_t> tree_tokens_;
  std::vector<std::int32_t> tree_parents_;
  std::vector<std::size_t> tree_depth_;
  std::vector<double> tree_score_;
  std::vector<std::int32_t> tree_index_;
  std::vector<std::size_t> tree_path_;
  // A tree of sampled candidates: how its children were drawn, and the rows they were drawn from.
  sampling::TreeProposal tree_proposal_ = sampling::TreeProposal::point_mass;
  std::vector<float> tree_q_;               // [tree nodes][V]: rows of nodes with children
  std::vector<std::int32_t> tree_from_;     // [tree nodes]: the drafter's node (-1: the root)
  std::vector<std::uint8_t> has_children_;  // [tree nodes]
  std::vector<token_t> path_tokens_;
};

}  // namespace specdec
