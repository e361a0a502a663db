#pragma once
// The server's counters, gauges and histograms, and GET /metrics: the Prometheus text
// exposition format (# HELP / # TYPE lines, one sample per line; histograms as cumulative
// _bucket{le=...} samples with _sum and _count). Thread-safe: the engine thread and the HTTP
// threads update it, a scrape reads it.

#include <cstddef>
#include <map>
#include <mutex>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace specdec::serve {

/// A Prometheus histogram: cumulative counts of observations <= each bound.
class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds);
  void observe(double value);
  /// Appends its samples (buckets, sum, count) named `name` to `out`.
  void render(std::string& out, std::string_view name) const;

 private:
  std::vector<double> bounds_;
  std::vector<std::size_t> counts_;  // [bounds + 1]: per bucket (not cumulative), then +Inf
  double sum_ = 0;
  std::size_t count_ = 0;
};

/// What the engine reports about a finished request.
struct RequestRecord {
  std::string finish_reason;  ///< "stop", "length", "cancelled", "error"
  std::size_t prompt_tokens = 0, generated_tokens = 0;
  std::size_t rounds = 0, drafted = 0, accepted = 0;
  double queue_seconds = 0;         ///< submitted -> started (prefill begins)
  double first_token_seconds = -1;  ///< submitted -> first token (< 0: none)
  double total_seconds = 0;         ///< submitted -> finished
};

class Metrics {
 public:
  Metrics(std::size_t slots, std::size_t queue_capacity);

  /// One HTTP request answered (every route, every status).
  void http_request(std::string_view endpoint, int status);
  void request_finished(const RequestRecord& r);
  /// One engine round: the sequences in it, the batched forwards and the round's wall time
  /// split into draft forwards, target forwards and the rest (sampling, bookkeeping).
  void round(std::size_t sequences, std::size_t draft_forwards, double draft_seconds,
             double verify_seconds, double wall_seconds);
  void prefill(double seconds);
  /// Current load: busy slots, queued requests, and whether the server is draining.
  void set_load(std::size_t busy, std::size_t queued, bool draining);

  /// The exposition text.
  [[nodiscard]] std::string render() const;

 private:
  mutable std::mutex mutex_;
  std::size_t slots_, queue_capacity_;
  std::size_t busy_ = 0, queued_ = 0;
  bool draining_ = false;
  std::map<std::pair<std::string, int>, std::size_t> http_;  // (endpoint, status) -> count
  std::map<std::string, std::size_t> finished_;              // finish_reason -> count
  std::size_t prompt_tokens_ = 0, generated_tokens_ = 0;
  std::size_t sequence_rounds_ = 0, drafted_ = 0, accepted_ = 0;
  std::size_t engine_rounds_ = 0, draft_forwards_ = 0;
  double prefill_seconds_ = 0, draft_seconds_ = 0, verify_seconds_ = 0, other_seconds_ = 0;
  Histogram duration_, first_token_, queue_wait_, batch_;
};

}  // namespace specdec::serve
