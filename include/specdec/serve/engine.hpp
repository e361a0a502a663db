#pragma once
// The serving engine (`specdec serve`, or any front-end of one's own): P slots (one
// SpeculativeSession each, with its own target and draft models over the weights loaded once), a
// bounded queue, and one thread that runs the rounds of all busy slots together (BatchedRounds:
// batched draft steps, one batched target forward). The models are not thread-safe; only the
// engine thread touches them.
//
// make_engine<LM>() is a template over the model type, so one engine serves on the CPU backend
// (cpu::Transformer: batched forwards) and on the CUDA backend (cuda::Transformer: one device
// round per slot, the slots' rounds one after another within an engine round; the device sampler
// keeps each slot's drafted tokens on the device). Every drafter kind of DecodeSetup is served:
// the slots' sessions come from the library's make_session (specdec/decoder/setup.hpp), which
// also checks the draft's vocabulary against the target's.
//
// HTTP threads talk to it through Jobs: submit() a Job (or be told the queue is full or the
// server is draining); the engine thread streams the Job's text into it as rounds emit it, and
// finishes it with the GenerationResult (or an error). A Job whose client went away is
// cancel()led by its HTTP thread; the engine cancels its session before the next round, which
// frees the slot.

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstddef>
#include <deque>
#include <exception>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <thread>
#include <type_traits>
#include <utility>
#include <variant>
#include <vector>

#include "specdec/decoder/batched.hpp"
#include "specdec/decoder/generation.hpp"
#include "specdec/decoder/setup.hpp"
#include "specdec/model/tokenizer.hpp"
#include "specdec/serve/api.hpp"
#include "specdec/serve/metrics.hpp"

namespace specdec::serve {

using Clock = std::chrono::steady_clock;

/// One completion request inside the server.
class Job {
 public:
  Job(std::vector<token_t> prompt, GenerationConfig config)
      : prompt(std::move(prompt)), config(std::move(config)) {}

  const std::vector<token_t> prompt;
  const GenerationConfig config;
  const Clock::time_point submitted = Clock::now();

  // ---- the HTTP side
  /// A piece of text (one per token that released text) and, when the request asked for them,
  /// the log-probabilities of the tokens emitted since the previous piece, this one's included.
  struct Piece {
    std::string text;
    std::vector<sampling::TokenLogprob> logprobs;
  };
  /// What arrived since the last call: pieces, and whether the job is finished (then result()
  /// / error() are final, and `trailing` holds the log-probabilities of tokens that released no
  /// text: the stop string's, a held-back end).
  struct Update {
    std::vector<Piece> pieces;
    bool finished = false;
    std::vector<sampling::TokenLogprob> trailing;
  };
  /// Waits up to `timeout` for text or the end, and takes it.
  Update wait(std::chrono::milliseconds timeout);
  /// Waits for the end (the pieces are in result().text).
  void wait_finished();
  /// The client is gone: the engine drops the request before its next round.
  void cancel() { cancelled_.store(true); }
  [[nodiscard]] bool cancelled() const { return cancelled_.load(); }
  /// Final once finished: the generation, or the reason it failed (empty when it did not).
  [[nodiscard]] const GenerationResult& result() const { return result_; }
  [[nodiscard]] const std::string& error() const { return error_; }

  // ---- the engine side
  void on_token(const TokenEvent& event);
  void finish(GenerationResult result);
  void fail(std::string message);
  /// Times for the metrics: started (left the queue), first token, finished.
  std::optional<Clock::time_point> started, first_token, finished_at;

 private:
  std::mutex mutex_;
  std::condition_variable cv_;
  std::vector<Piece> pieces_;
  std::vector<sampling::TokenLogprob> pending_;  // of tokens whose text is not released yet
  bool finished_ = false;
  GenerationResult result_;
  std::string error_;
  std::atomic<bool> cancelled_{false};
};

class Engine {
 public:
  struct Options {
    std::size_t slots = 1;  ///< --parallel: sequences decoded together
    std::size_t queue = 8;  ///< --queue: requests that may wait for a slot
    /// --no-batching (for measurements): the busy slots' rounds run one after the other, each
    /// with its own forwards, instead of as one batched round. The tokens are the same.
    bool batching = true;
  };
  enum class Admission { accepted, queue_full, draining };

  virtual ~Engine() = default;
  /// Admits a job: into the queue (a slot takes it at the next round), or refused.
  virtual Admission submit(std::shared_ptr<Job> job) = 0;
  /// From now on submit() refuses; the engine thread ends once every admitted job finished.
  virtual void drain() = 0;
  /// drain(), and every admitted job is cancelled (queued ones at once, running ones at the
  /// next round).
  virtual void cancel_all() = 0;
  /// Waits for the engine thread to end (after drain()).
  virtual void join() = 0;

  struct Load {
    std::size_t slots = 0, busy = 0, queued = 0;
    bool draining = false;
  };
  [[nodiscard]] virtual Load load() const = 0;
};

/// How a server makes each slot's models: every slot has its own target (and draft) model, with
/// its own KV cache, over weights loaded once. make_draft is empty when the setup drafts without
/// a model. The tokenizers (the target's for text, stop strings and EOS; the draft's for the
/// vocabulary check) must outlive the engine.
template <class LM>
struct SlotModels {
  std::function<std::unique_ptr<LM>()> make_target;
  std::function<std::unique_ptr<LM>()> make_draft;
  const Tokenizer* tokenizer = nullptr;
  const Tokenizer* draft_tokenizer = nullptr;
};

/// Builds the slots (each slot's models and session: KV caches are allocated here) and starts
/// the engine thread. Throws specdec::Error when the setup needs a draft model and there is
/// none, when the pair's vocabularies differ, or when a slot's models cannot be made.
template <class LM>
std::unique_ptr<Engine> make_engine(const SlotModels<LM>& models, const DecodeSetup& setup,
                                    const Engine::Options& options, Metrics& metrics);

// ================================================================================ implementation

namespace detail {

inline double seconds_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// ------------------------------------------------------------------------ slots

/// One slot: its models (a target and, with a draft model, a draft model over the shared
/// weights), its session (with its drafter), and the job it is working on.
template <class Session, class LM>
struct Slot {
  std::unique_ptr<LM> target, draft;
  std::unique_ptr<OwnedSession<Session>> owned;
  Session* session = nullptr;  ///< owned->session()
  std::shared_ptr<Job> job;
};

inline constexpr const char* kSessionName = "specdec serve";

template <class Session, class LM>
void make_slot(Slot<Session, LM>& slot, const SlotModels<LM>& m, const DecodeSetup& setup) {
  slot.target = m.make_target();
  if (setup.uses_draft_model()) slot.draft = m.make_draft();
  slot.owned = make_session<Session>(
      setup, SessionModels<LM>{slot.target.get(), slot.draft.get(), m.tokenizer, m.draft_tokenizer},
      kSessionName);
  slot.session = &slot.owned->session();
}

// ------------------------------------------------------------------------ the engine

template <class Session, class LM>
class EngineOf final : public Engine {
 public:
  using SlotType = Slot<Session, LM>;

  EngineOf(const SlotModels<LM>& models, const DecodeSetup& setup, const Options& options,
           Metrics& metrics)
      : options_(options), metrics_(metrics), slots_(options.slots) {
    DecodeSetup slot_setup = setup;
    if (setup.uses_suffix()) {
      // Suffix decoding: every slot's drafter also looks up the earlier responses of all slots.
      shared_suffix_ = std::make_unique<SharedSuffixIndex>(setup.suffix_index);
      slot_setup.shared_suffix = shared_suffix_.get();
    }
    for (SlotType& slot : slots_) make_slot(slot, models, slot_setup);
    thread_ = std::thread([this] { run(); });
  }
  ~EngineOf() override {
    cancel_all();
    join();
  }

  Admission submit(std::shared_ptr<Job> job) override {
    {
      const std::lock_guard lock(mutex_);
      if (draining_) return Admission::draining;
      if (queue_.size() + busy_ >= options_.slots + options_.queue) return Admission::queue_full;
      queue_.push_back(std::move(job));
      publish_load();
    }
    cv_.notify_all();
    return Admission::accepted;
  }

  void drain() override {
    {
      const std::lock_guard lock(mutex_);
      draining_ = true;
      publish_load();
    }
    cv_.notify_all();
  }

  void cancel_all() override {
    std::deque<std::shared_ptr<Job>> queued;
    {
      const std::lock_guard lock(mutex_);
      draining_ = true;
      queued.swap(queue_);
      for (SlotType& slot : slots_)
        if (slot.job) slot.job->cancel();
      publish_load();
    }
    for (const auto& job : queued) conclude_cancelled(nullptr, job);
    cv_.notify_all();
  }

  void join() override {
    if (thread_.joinable()) thread_.join();
  }

  [[nodiscard]] Load load() const override {
    const std::lock_guard lock(mutex_);
    return Load{options_.slots, busy_, queue_.size(), draining_};
  }

 private:
  /// The engine thread: take queued jobs into free slots, run one round of every busy slot,
  /// finish the jobs that are done; sleep while there is nothing to do; end when draining and
  /// nothing is left.
  void run() {
    std::unique_lock lock(mutex_);
    for (;;) {
      std::vector<SlotType*> starting;
      for (SlotType& slot : slots_)
        if (!slot.job && !queue_.empty()) {
          slot.job = std::move(queue_.front());
          queue_.pop_front();
          ++busy_;
          starting.push_back(&slot);
        }
      publish_load();
      if (busy_ == 0) {
        if (draining_) break;
        cv_.wait(lock);
        continue;
      }
      lock.unlock();
      try {
        step(starting);
      } catch (const std::exception& e) {  // a bug: fail what is running, never crash
        fail_all(std::string("internal error: ") + e.what());
      }
      lock.lock();  // the jobs that ended freed their slots (conclude)
    }
  }

  /// Starts the new jobs (prefill), cancels the abandoned ones, runs one round of the rest and
  /// finishes what is done.
  void step(const std::vector<SlotType*>& starting) {
    for (SlotType* slot : starting) begin(*slot);
    for (SlotType& slot : slots_)
      if (slot.job && !slot.job->finished_at && slot.job->cancelled()) slot.session->cancel();

    active_.clear();
    active_slots_.clear();
    for (SlotType& slot : slots_)
      if (slot.job && !slot.job->finished_at && !slot.session->done()) {
        active_.push_back(slot.session);
        active_slots_.push_back(&slot);
      }
    if constexpr (kBatched) {
      // One batched round of every busy slot (or, with --no-batching, one round of each in turn).
      const std::size_t groups = options_.batching ? (active_.empty() ? 0 : 1) : active_.size();
      for (std::size_t g = 0; g < groups; ++g) {
        const std::span<Session* const> sessions =
            options_.batching ? std::span<Session* const>(active_)
                              : std::span<Session* const>(active_).subspan(g, 1);
        const Clock::time_point t0 = Clock::now();
        const BatchedRound report = rounds_.round(sessions);
        metrics_.round(report.sequences, report.draft_steps, report.draft_seconds,
                       report.verify_seconds, seconds_between(t0, Clock::now()));
        for (const BatchedRound::Failure& f : report.failures) {
          SlotType& slot = *active_slots_[options_.batching ? f.index : g];
          try {
            std::rethrow_exception(f.error);
          } catch (const std::exception& e) {
            conclude_failed(slot, e.what());
          }
        }
      }
    } else {
      // Device logits: one device round per slot (the session's own step(), its drafts and
      // verification on the device), the slots one after another.
      for (std::size_t g = 0; g < active_.size(); ++g) {
        Session& session = *active_[g];
        const Clock::time_point t0 = Clock::now();
        try {
          const RoundRecord& r = session.step();
          metrics_.round(1, kModelDrafts ? r.drafted.size() : 0, r.draft_seconds, r.verify_seconds,
                         seconds_between(t0, Clock::now()));
        } catch (const std::exception& e) {
          try {
            session.cancel();
          } catch (...) {  // the original error is the one to report
          }
          conclude_failed(*active_slots_[g], e.what());
        }
      }
    }
    for (SlotType& slot : slots_)
      if (slot.job && !slot.job->finished_at && slot.session->done())
        conclude(slot, slot.session->take_result());
  }

  /// The job's prefill: session.start(). A refusal (which the HTTP layer's checks should have
  /// caught) fails the job alone.
  void begin(SlotType& slot) {
    const std::shared_ptr<Job> job = slot.job;  // concluding it frees the slot
    job->started = Clock::now();
    if (job->cancelled()) {
      conclude_cancelled(&slot, job);
      return;
    }
    Callbacks callbacks;
    callbacks.on_token = [j = job.get()](const TokenEvent& e) { j->on_token(e); };
    try {
      slot.session->start(job->prompt, job->config, callbacks);
    } catch (const std::exception& e) {
      conclude_failed(slot, e.what());
    }
    metrics_.prefill(seconds_between(*job->started, Clock::now()));
  }

  void fail_all(const std::string& message) {
    for (SlotType& slot : slots_)
      if (slot.job && !slot.job->finished_at) {
        try {
          slot.session->cancel();
        } catch (...) {  // the job fails either way
        }
        conclude_failed(slot, message);
      }
  }

  // A job ends through one of these three: its numbers go into the metrics and its slot is
  // freed first, and only then is the job released to its HTTP handler, so that a client that
  // reads /metrics or /health right after its answer finds its request counted and the slot
  // idle (the other order raced: tests saw 11 of 12 requests counted, and 1 of 2 slots idle).
  void conclude(SlotType& slot, GenerationResult result) {
    const std::shared_ptr<Job> job = slot.job;
    if (shared_suffix_) shared_suffix_->add(result.tokens);  // for the next requests' drafts
    record(*job, &result);
    free_slot(&slot);
    job->finish(std::move(result));
  }
  void conclude_failed(SlotType& slot, std::string message) {
    const std::shared_ptr<Job> job = slot.job;
    record(*job, nullptr, "error");
    free_slot(&slot);
    job->fail(std::move(message));
  }
  /// slot: nullptr for a job that was still queued.
  void conclude_cancelled(SlotType* slot, const std::shared_ptr<Job>& job) {
    GenerationResult cancelled;
    cancelled.stop_reason = StopReason::cancelled;
    record(*job, nullptr, "cancelled");
    free_slot(slot);
    job->finish(std::move(cancelled));
  }
  void free_slot(SlotType* slot) {
    if (slot == nullptr) return;
    const std::lock_guard lock(mutex_);
    slot->job = nullptr;
    --busy_;
    publish_load();
  }

  /// The ending job's numbers for the metrics (result: nullptr when it failed or never ran; then
  /// `reason` is the finish reason).
  void record(const Job& job, const GenerationResult* result, std::string_view reason = {}) {
    RequestRecord r;
    const Clock::time_point end = Clock::now();  // conclude records before the job finishes
    r.total_seconds = seconds_between(job.submitted, end);
    r.queue_seconds = seconds_between(job.submitted, job.started.value_or(end));
    if (job.first_token) r.first_token_seconds = seconds_between(job.submitted, *job.first_token);
    r.prompt_tokens = job.prompt.size();
    if (result != nullptr) {
      r.finish_reason = std::string(finish_reason(result->stop_reason));
      r.generated_tokens = result->stats.tokens_emitted;
      r.rounds = result->stats.rounds;
      r.drafted = result->stats.drafted;
      r.accepted = result->stats.accepted;
    } else {
      r.finish_reason = std::string(reason);
    }
    metrics_.request_finished(r);
  }

  void publish_load() { metrics_.set_load(busy_, queue_.size(), draining_); }

  Options options_;
  Metrics& metrics_;
  /// Suffix decoding: the index of earlier responses the slots' drafters share (before slots_:
  /// it outlives them).
  std::unique_ptr<SharedSuffixIndex> shared_suffix_;
  std::vector<SlotType> slots_;
  /// Host logits: the slots' rounds batched (BatchedRounds); device logits: a round per slot.
  static constexpr bool kBatched = Session::Sampler::memory == Memory::host;
  /// Whether a round's drafted tokens are draft model forwards (one each), for the metrics.
  static constexpr bool kModelDrafts = requires(Session & s) { s.drafter().model(); };
  std::conditional_t<kBatched, BatchedRounds<Session>, std::monostate> rounds_;
  std::vector<Session*> active_;
  std::vector<SlotType*> active_slots_;

  mutable std::mutex mutex_;  // queue_, busy_, draining_, which slot holds which job
  std::condition_variable cv_;
  std::deque<std::shared_ptr<Job>> queue_;
  std::size_t busy_ = 0;
  bool draining_ = false;
  std::thread thread_;
};

}  // namespace detail

template <class LM>
std::unique_ptr<Engine> make_engine(const SlotModels<LM>& models, const DecodeSetup& setup,
                                    const Engine::Options& options, Metrics& metrics) {
  if (setup.uses_draft_model() && !models.make_draft)
    throw Error("serve: the setup '" + setup.label() + "' needs a draft model");
  return with_session_type<LM>(
      setup.drafter, [&]<class Session>(std::type_identity<Session>) -> std::unique_ptr<Engine> {
        return std::make_unique<detail::EngineOf<Session, LM>>(models, setup, options, metrics);
      });
}

}  // namespace specdec::serve
