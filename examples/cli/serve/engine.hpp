#pragma once
// The engine of `specdec serve`: P slots (one SpeculativeSession each, with its own target and
// draft cpu::Transformers over the weights loaded once), a bounded queue, and one thread that
// runs the rounds of all busy slots together (BatchedRounds: batched draft steps, one batched
// target forward). The models are not thread-safe; only the engine thread touches them.
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
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "../common.hpp"
#include "metrics.hpp"
#include "specdec/decoder/generation.hpp"

namespace specdec::cli::serve {

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

/// The models of a server, loaded once: the target, and the draft model when the setup drafts
/// with one. `target_options` / `draft_options` are each slot's backend options.
struct ServedModels {
  CpuModel* target = nullptr;
  CpuModel* draft = nullptr;
  cpu::Options target_options, draft_options;
};

/// Builds the slots (their KV caches are allocated here: the sizes are checked against the
/// memory available first, naming -c and --parallel) and starts the engine thread.
std::unique_ptr<Engine> make_engine(const ServedModels& models, const DecodeSetup& setup,
                                    const Engine::Options& options, Metrics& metrics);

}  // namespace specdec::cli::serve
