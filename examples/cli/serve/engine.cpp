#include "engine.hpp"

#include <atomic>
#include <exception>
#include <span>
#include <thread>
#include <utility>

#include <fmt/format.h>

#include "api.hpp"
#include "specdec/decoder/batched.hpp"
#include "specdec/decoder/session.hpp"

namespace specdec::cli::serve {

// ------------------------------------------------------------------------ Job

Job::Update Job::wait(std::chrono::milliseconds timeout) {
  std::unique_lock lock(mutex_);
  cv_.wait_for(lock, timeout, [&] { return !pieces_.empty() || finished_; });
  Update u;
  u.pieces.swap(pieces_);
  u.finished = finished_;
  if (finished_) u.trailing.swap(pending_);
  return u;
}

void Job::wait_finished() {
  std::unique_lock lock(mutex_);
  cv_.wait(lock, [&] { return finished_; });
}

void Job::on_token(const TokenEvent& event) {
  if (!first_token && event.token >= 0) first_token = Clock::now();
  {
    const std::lock_guard lock(mutex_);
    if (event.logprob != nullptr) pending_.push_back(*event.logprob);
    if (event.text.empty()) return;  // held back (a possible stop string) or no text
    pieces_.push_back({std::string(event.text), std::exchange(pending_, {})});
  }
  cv_.notify_all();
}

void Job::finish(GenerationResult result) {
  finished_at = Clock::now();
  {
    const std::lock_guard lock(mutex_);
    result_ = std::move(result);
    finished_ = true;
  }
  cv_.notify_all();
}

void Job::fail(std::string message) {
  finished_at = Clock::now();
  {
    const std::lock_guard lock(mutex_);
    error_ = std::move(message);
    result_.stop_reason = StopReason::cancelled;
    finished_ = true;
  }
  cv_.notify_all();
}

namespace {

double seconds_between(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// ------------------------------------------------------------------------ slots

/// One slot: its models (a target and, with a draft model, a draft Transformer over the shared
/// weights), its session, and the job it is working on.
template <class Session>
struct Slot {
  std::unique_ptr<cpu::Transformer> target, draft;
  std::unique_ptr<NGramDrafter> ngram;
  std::unique_ptr<Session> session;
  std::shared_ptr<Job> job;
};

using ModelSession = SpeculativeSession<cpu::Transformer, cpu::Transformer>;
using NGramSession = SpeculativeSession<NGramDrafter, cpu::Transformer>;
using PlainSession = SpeculativeSession<NoDrafter, cpu::Transformer>;

constexpr const char* kSessionName = "specdec serve";

template <class Session>
void make_session(Slot<Session>& slot, const ServedModels& m, const DecodeSetup& setup) {
  slot.target = std::make_unique<cpu::Transformer>(m.target->file, m.target_options);
  const Tokenizer* tokenizer = m.target->file.tokenizer.get();
  if constexpr (std::is_same_v<Session, ModelSession>) {
    slot.draft = std::make_unique<cpu::Transformer>(m.draft->file, m.draft_options);
    slot.session =
        std::make_unique<Session>(*slot.draft, *slot.target, setup.speculative_options(), tokenizer,
                                  m.draft->file.tokenizer.get(), kSessionName);
  } else if constexpr (std::is_same_v<Session, NGramSession>) {
    slot.ngram = std::make_unique<NGramDrafter>(setup.ngram_options());
    slot.session = std::make_unique<Session>(*slot.ngram, *slot.target, setup.speculative_options(),
                                             tokenizer, nullptr, kSessionName);
  } else {
    slot.session = std::make_unique<Session>(*slot.target, tokenizer, kSessionName);
  }
}

// ------------------------------------------------------------------------ the engine

template <class Session>
class EngineOf final : public Engine {
 public:
  EngineOf(const ServedModels& models, const DecodeSetup& setup, const Options& options,
           Metrics& metrics)
      : options_(options), metrics_(metrics), slots_(options.slots) {
    for (Slot<Session>& slot : slots_) make_session(slot, models, setup);
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
      for (Slot<Session>& slot : slots_)
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
      std::vector<Slot<Session>*> starting;
      for (Slot<Session>& slot : slots_)
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
        fail_all(fmt::format("internal error: {}", e.what()));
      }
      lock.lock();  // the jobs that ended freed their slots (conclude)
    }
  }

  /// Starts the new jobs (prefill), cancels the abandoned ones, runs one round of the rest and
  /// finishes what is done.
  void step(const std::vector<Slot<Session>*>& starting) {
    for (Slot<Session>* slot : starting) begin(*slot);
    for (Slot<Session>& slot : slots_)
      if (slot.job && !slot.job->finished_at && slot.job->cancelled()) slot.session->cancel();

    active_.clear();
    active_slots_.clear();
    for (Slot<Session>& slot : slots_)
      if (slot.job && !slot.job->finished_at && !slot.session->done()) {
        active_.push_back(slot.session.get());
        active_slots_.push_back(&slot);
      }
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
        Slot<Session>& slot = *active_slots_[options_.batching ? f.index : g];
        try {
          std::rethrow_exception(f.error);
        } catch (const std::exception& e) {
          conclude_failed(slot, e.what());
        }
      }
    }
    for (Slot<Session>& slot : slots_)
      if (slot.job && !slot.job->finished_at && slot.session->done())
        conclude(slot, slot.session->take_result());
  }

  /// The job's prefill: session.start(). A refusal (which the HTTP layer's checks should have
  /// caught) fails the job alone.
  void begin(Slot<Session>& slot) {
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
    for (Slot<Session>& slot : slots_)
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
  void conclude(Slot<Session>& slot, GenerationResult result) {
    const std::shared_ptr<Job> job = slot.job;
    record(*job, &result);
    free_slot(&slot);
    job->finish(std::move(result));
  }
  void conclude_failed(Slot<Session>& slot, std::string message) {
    const std::shared_ptr<Job> job = slot.job;
    record(*job, nullptr, "error");
    free_slot(&slot);
    job->fail(std::move(message));
  }
  /// slot: nullptr for a job that was still queued.
  void conclude_cancelled(Slot<Session>* slot, const std::shared_ptr<Job>& job) {
    GenerationResult cancelled;
    cancelled.stop_reason = StopReason::cancelled;
    record(*job, nullptr, "cancelled");
    free_slot(slot);
    job->finish(std::move(cancelled));
  }
  void free_slot(Slot<Session>* slot) {
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
  std::vector<Slot<Session>> slots_;
  BatchedRounds<Session> rounds_;
  std::vector<Session*> active_;
  std::vector<Slot<Session>*> active_slots_;

  mutable std::mutex mutex_;  // queue_, busy_, draining_, which slot holds which job
  std::condition_variable cv_;
  std::deque<std::shared_ptr<Job>> queue_;
  std::size_t busy_ = 0;
  bool draining_ = false;
  std::thread thread_;
};

/// Refuses slots whose KV caches do not fit together, before allocating any.
void check_memory(const ServedModels& m, std::size_t slots) {
  auto bytes = [](const CpuModel& model, const cpu::Options& o) {
    return cpu::Transformer::estimate_memory(model.file.config, o).total();
  };
  const std::size_t per_slot =
      bytes(*m.target, m.target_options) + (m.draft ? bytes(*m.draft, m.draft_options) : 0);
  const std::size_t total = per_slot * slots;
  if (const auto available = cpu::available_memory(); available && total > available->bytes)
    throw Error(fmt::format(
        "{} slots need {} of KV cache ({} each: target {} positions{}) but {} allows {}: give "
        "fewer slots (--parallel) or a shorter context (-c N)",
        slots, cpu::format_bytes(total), cpu::format_bytes(per_slot),
        m.target_options.context_length,
        m.draft ? fmt::format(", draft {} positions", m.draft_options.context_length) : "",
        available->limit, cpu::format_bytes(available->bytes)));
}

}  // namespace

std::unique_ptr<Engine> make_engine(const ServedModels& models, const DecodeSetup& setup,
                                    const Engine::Options& options, Metrics& metrics) {
  check_memory(models, options.slots);
  switch (setup.drafter) {
    case DecodeSetup::Drafter::model:
      return std::make_unique<EngineOf<ModelSession>>(models, setup, options, metrics);
    case DecodeSetup::Drafter::ngram:
      return std::make_unique<EngineOf<NGramSession>>(models, setup, options, metrics);
    case DecodeSetup::Drafter::none:
      return std::make_unique<EngineOf<PlainSession>>(models, setup, options, metrics);
    case DecodeSetup::Drafter::lookup_model:
      throw Error("serve: the n-gram + draft model drafter is not served yet (use one of them)");
  }
  throw Error("unknown drafter");
}

}  // namespace specdec::cli::serve
