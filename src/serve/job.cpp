// The Job side of the serving engine (specdec/serve/engine.hpp): what HTTP threads and the engine
// thread exchange.
#include "specdec/serve/engine.hpp"

#include <utility>

namespace specdec::serve {

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

}  // namespace specdec::serve
