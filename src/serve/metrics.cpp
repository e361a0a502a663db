#include "specdec/serve/metrics.hpp"

#include <fmt/format.h>

namespace specdec::serve {

namespace {

/// A sample value as Prometheus reads it (integers without a fraction, "+Inf").
std::string value_text(double v) { return fmt::format("{}", v); }

void header(std::string& out, std::string_view name, std::string_view type, std::string_view help) {
  out += fmt::format("# HELP {} {}\n# TYPE {} {}\n", name, help, name, type);
}

void sample(std::string& out, std::string_view name, double value, std::string_view labels = {}) {
  out += fmt::format("{}{}{}{} {}\n", name, labels.empty() ? "" : "{", labels,
                     labels.empty() ? "" : "}", value_text(value));
}

std::vector<double> seconds_buckets() {
  return {0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30, 60, 120};
}

std::vector<double> batch_buckets(std::size_t slots) {
  std::vector<double> b;
  for (std::size_t i = 1; i <= slots; ++i) b.push_back(static_cast<double>(i));
  return b;
}

}  // namespace

Histogram::Histogram(std::vector<double> bounds)
    : bounds_(std::move(bounds)), counts_(bounds_.size() + 1, 0) {}

void Histogram::observe(double value) {
  std::size_t i = 0;
  while (i < bounds_.size() && value > bounds_[i]) ++i;
  ++counts_[i];
  sum_ += value;
  ++count_;
}

void Histogram::render(std::string& out, std::string_view name) const {
  std::size_t cumulative = 0;
  for (std::size_t i = 0; i < bounds_.size(); ++i) {
    cumulative += counts_[i];
    out += fmt::format("{}_bucket{{le=\"{}\"}} {}\n", name, value_text(bounds_[i]), cumulative);
  }
  out += fmt::format("{}_bucket{{le=\"+Inf\"}} {}\n", name, count_);
  out += fmt::format("{}_sum {}\n{}_count {}\n", name, value_text(sum_), name, count_);
}

Metrics::Metrics(std::size_t slots, std::size_t queue_capacity)
    : slots_(slots),
      queue_capacity_(queue_capacity),
      duration_(seconds_buckets()),
      first_token_(seconds_buckets()),
      queue_wait_(seconds_buckets()),
      batch_(batch_buckets(slots)) {}

void Metrics::http_request(std::string_view endpoint, int status) {
  const std::lock_guard lock(mutex_);
  ++http_[{std::string(endpoint), status}];
}

void Metrics::request_finished(const RequestRecord& r) {
  const std::lock_guard lock(mutex_);
  ++finished_[r.finish_reason];
  prompt_tokens_ += r.prompt_tokens;
  generated_tokens_ += r.generated_tokens;
  sequence_rounds_ += r.rounds;
  drafted_ += r.drafted;
  accepted_ += r.accepted;
  duration_.observe(r.total_seconds);
  queue_wait_.observe(r.queue_seconds);
  if (r.first_token_seconds >= 0) first_token_.observe(r.first_token_seconds);
}

void Metrics::round(std::size_t sequences, std::size_t draft_forwards, double draft_seconds,
                    double verify_seconds, double wall_seconds) {
  const std::lock_guard lock(mutex_);
  ++engine_rounds_;
  draft_forwards_ += draft_forwards;
  draft_seconds_ += draft_seconds;
  verify_seconds_ += verify_seconds;
  const double other = wall_seconds - draft_seconds - verify_seconds;
  other_seconds_ += other > 0 ? other : 0;
  batch_.observe(static_cast<double>(sequences));
}

void Metrics::prefill(double seconds) {
  const std::lock_guard lock(mutex_);
  prefill_seconds_ += seconds;
}

void Metrics::set_load(std::size_t busy, std::size_t queued, bool draining) {
  const std::lock_guard lock(mutex_);
  busy_ = busy;
  queued_ = queued;
  draining_ = draining;
}

std::string Metrics::render() const {
  const std::lock_guard lock(mutex_);
  std::string out;
  header(out, "specdec_http_requests_total", "counter",
         "HTTP requests answered, by endpoint and status code.");
  for (const auto& [key, count] : http_)
    sample(out, "specdec_http_requests_total", static_cast<double>(count),
           fmt::format("endpoint=\"{}\",code=\"{}\"", key.first, key.second));
  header(out, "specdec_requests_total", "counter",
         "Completion requests finished, by finish reason (stop, length, cancelled, error).");
  for (const char* reason : {"stop", "length", "cancelled", "error"}) {
    const auto it = finished_.find(reason);
    sample(out, "specdec_requests_total",
           it == finished_.end() ? 0.0 : static_cast<double>(it->second),
           fmt::format("finish_reason=\"{}\"", reason));
  }
  header(out, "specdec_prompt_tokens_total", "counter", "Prompt tokens of finished requests.");
  sample(out, "specdec_prompt_tokens_total", static_cast<double>(prompt_tokens_));
  header(out, "specdec_generation_tokens_total", "counter",
         "Tokens generated for finished requests.");
  sample(out, "specdec_generation_tokens_total", static_cast<double>(generated_tokens_));
  header(out, "specdec_rounds_total", "counter",
         "Speculative rounds of finished requests (one target verification of one sequence).");
  sample(out, "specdec_rounds_total", static_cast<double>(sequence_rounds_));
  header(out, "specdec_drafted_tokens_total", "counter", "Tokens drafted for finished requests.");
  sample(out, "specdec_drafted_tokens_total", static_cast<double>(drafted_));
  header(out, "specdec_accepted_tokens_total", "counter",
         "Drafted tokens the target accepted, for finished requests.");
  sample(out, "specdec_accepted_tokens_total", static_cast<double>(accepted_));
  header(out, "specdec_acceptance_rate", "gauge",
         "Accepted / drafted tokens over the finished requests (0 before any draft).");
  sample(out, "specdec_acceptance_rate",
         drafted_ ? static_cast<double>(accepted_) / static_cast<double>(drafted_) : 0.0);
  header(out, "specdec_tokens_per_round", "gauge",
         "Generated tokens per speculative round over the finished requests.");
  sample(out, "specdec_tokens_per_round",
         sequence_rounds_
             ? static_cast<double>(generated_tokens_) / static_cast<double>(sequence_rounds_)
             : 0.0);
  header(out, "specdec_engine_rounds_total", "counter",
         "Engine rounds: one batched target forward verifying every active sequence.");
  sample(out, "specdec_engine_rounds_total", static_cast<double>(engine_rounds_));
  header(out, "specdec_draft_forwards_total", "counter",
         "Batched draft model forwards (one draft step of every drafting sequence).");
  sample(out, "specdec_draft_forwards_total", static_cast<double>(draft_forwards_));
  header(out, "specdec_engine_seconds_total", "counter",
         "Engine thread wall time by phase: prompt prefill, batched draft forwards, batched "
         "target forwards, and the rest of the rounds (sampling, verification, bookkeeping).");
  sample(out, "specdec_engine_seconds_total", prefill_seconds_, "phase=\"prefill\"");
  sample(out, "specdec_engine_seconds_total", draft_seconds_, "phase=\"draft\"");
  sample(out, "specdec_engine_seconds_total", verify_seconds_, "phase=\"verify\"");
  sample(out, "specdec_engine_seconds_total", other_seconds_, "phase=\"other\"");
  header(out, "specdec_slots", "gauge", "Slots (sequences decoded together), by state.");
  sample(out, "specdec_slots", static_cast<double>(busy_), "state=\"busy\"");
  sample(out, "specdec_slots", static_cast<double>(slots_ - busy_), "state=\"idle\"");
  header(out, "specdec_queue_length", "gauge", "Requests waiting for a slot.");
  sample(out, "specdec_queue_length", static_cast<double>(queued_));
  header(out, "specdec_queue_capacity", "gauge",
         "Requests that may wait for a slot (more are refused with 429).");
  sample(out, "specdec_queue_capacity", static_cast<double>(queue_capacity_));
  header(out, "specdec_draining", "gauge",
         "1 while the server drains after SIGINT/SIGTERM (new requests get 503).");
  sample(out, "specdec_draining", draining_ ? 1.0 : 0.0);
  header(out, "specdec_batch_sequences", "histogram", "Sequences per engine round.");
  batch_.render(out, "specdec_batch_sequences");
  header(out, "specdec_request_duration_seconds", "histogram",
         "Time from a request's arrival to its last token.");
  duration_.render(out, "specdec_request_duration_seconds");
  header(out, "specdec_time_to_first_token_seconds", "histogram",
         "Time from a request's arrival to its first generated token.");
  first_token_.render(out, "specdec_time_to_first_token_seconds");
  header(out, "specdec_queue_wait_seconds", "histogram", "Time a request waited for a slot.");
  queue_wait_.render(out, "specdec_queue_wait_seconds");
  return out;
}

}  // namespace specdec::serve
