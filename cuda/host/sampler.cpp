// cuda::DeviceSampler (see include/specdec/cuda/sampler.hpp): the host side of a device round.
//
// Device memory of one sampler (V = vocabulary, K = max_k):
//   round    kernels::SamplerRound: both streams' (params, seed, stream, counter) and the next
//            draft slot; written by the host once per round (begin_round), read by the kernels
//            (a captured graph replays frozen arguments, so nothing that changes is an argument)
//   q        [K][V]      processed draft rows (kept from drafting to verification)
//   p        [K + 1][V]  processed target rows
//   report   one allocation, copied to the host in one piece at the end of a round:
//              outcome       VerifyOutcome (accepted n, next y, error)
//              accepted      [1]       (the verify kernels' B-sequence layout)
//              tokens        [K + 1]   the round's tokens: [0] the sequence's last token (host
//                                      upload), [1 + s] drafted token of slot s (draft kernel)
//              emitted       [K + 1]
//              draft_bad     [K]       first NaN / infinite logit of each draft row, or -1
//              draft_value   [K]       its value
//              target_bad    [K + 1]   the same for the target rows (sampled verification)
//              target_value  [K + 1]
// The target input is tokens[0 .. k], read by the target's forward from device memory.
// Token trees (verify_tree) have their own buffers, grown to the largest tree: the tree's tokens
// and parents, its n processed rows, a scratch row and the outcome with each row's bad logit.
//
// Streams: the sampler works on the target's stream. A draft model on another stream first waits
// for the round's uploads (an event), and the target's stream waits for the drafts (another)
// before the verification.
#include "specdec/cuda/sampler.hpp"

#include <cuda_runtime.h>
#include <fmt/format.h>

#include <algorithm>
#include <atomic>
#include <cstring>

#include "common/check.hpp"
#include "host/device_buffer.hpp"
#include "kernels/sampling.hpp"
#include "specdec/cuda/transformer.hpp"
#include "specdec/model/token_tree.hpp"

namespace specdec::cuda {

namespace {

/// Byte offsets of the report's parts (each 8-byte aligned).
struct ReportLayout {
  std::size_t outcome = 0, accepted, tokens, emitted, draft_bad, draft_value, target_bad,
              target_value, bytes;
  explicit ReportLayout(std::size_t max_k) {
    std::size_t at = 0;
    auto take = [&](std::size_t size) {
      const std::size_t here = at;
      at += (size + 7) / 8 * 8;
      return here;
    };
    outcome = take(sizeof(sampling::VerifyOutcome));
    accepted = take(sizeof(std::int32_t));
    tokens = take((max_k + 1) * sizeof(token_t));
    emitted = take((max_k + 1) * sizeof(token_t));
    draft_bad = take(std::max<std::size_t>(max_k, 1) * sizeof(int));
    draft_value = take(std::max<std::size_t>(max_k, 1) * sizeof(float));
    target_bad = take((max_k + 1) * sizeof(int));
    target_value = take((max_k + 1) * sizeof(float));
    bytes = at;
  }
};

/// Keys of the work a sampler appends to model steps: unique per sampler (its buffers).
enum class Work : std::uint64_t {
  draft = 1,
  verify_greedy = 2,
  verify_sampled = 3,
  verify_point = 4
};

std::atomic<std::uint64_t> next_sampler_id{1};

}  // namespace

struct DeviceSampler::Impl {
  std::size_t vocab = 0;
  std::size_t max_k = 0;
  cudaStream_t stream = nullptr;
  int threads = 256;
  std::uint64_t id = next_sampler_id++;
  ReportLayout layout{0};

  DeviceArray<kernels::SamplerRound> round;  // [1]
  DeviceArray<float> q, p;                   // [max_k][V], [max_k + 1][V]
  DeviceArray<std::byte> report;             // ReportLayout
  PinnedArray<kernels::SamplerRound> staging_round;
  PinnedArray<token_t> staging_tokens;  // [max_k + 1]
  PinnedArray<std::byte> host_report;   // ReportLayout
  cudaEvent_t uploaded = nullptr;       // the round's uploads, on `stream`
  cudaEvent_t drafted = nullptr;        // the drafts, on the draft model's stream

  // Host state of the sequence and of the round.
  sampling::SamplingParams params{};
  std::uint64_t seed = 0;
  std::uint64_t draft_counter = 0;   // the draft stream's counter at slot 0 of this round
  std::uint64_t target_counter = 0;  // the target stream's counter of this round's verify
  std::size_t drafted_slots = 0;     // drafted by the sampler this round
  std::size_t draws = 0;             // uniforms the drafts of this round drew (greedy: none)
  std::size_t proposed = 0;          // tokens given by propose() this round
  cudaStream_t draft_stream = nullptr;
  bool in_round = false;                // begin_round() happened, collect() not yet
  std::vector<std::size_t> positions;   // [max_k]: sequence position of each draft row
  std::vector<token_t> drafted_tokens;  // host copy of x_1 .. x_k after verification
  bool p_valid = false;

  // Token trees (verify_tree): buffers for trees of up to tree_capacity nodes.
  std::size_t tree_capacity = 0;
  DeviceArray<std::int32_t> tree_shape;  // [2][tree_capacity]: tokens, then parents
  DeviceArray<float> tree_p;             // [tree_capacity][V] processed rows (sampled)
  DeviceArray<float> tree_scratch;       // [V]
  DeviceArray<sampling::TreeVerifyOutcome> tree_outcome;       // [1]
  DeviceArray<int> tree_bad;                                   // [tree_capacity]
  DeviceArray<float> tree_value;                               // [tree_capacity]
  PinnedArray<std::int32_t> staging_tree;                      // [2][tree_capacity]
  PinnedArray<sampling::TreeVerifyOutcome> host_tree_outcome;  // [1]
  PinnedArray<int> host_tree_bad;                              // [tree_capacity]
  PinnedArray<float> host_tree_value;                          // [tree_capacity]
  std::vector<std::size_t> tree_path;
  std::vector<std::size_t> tree_depth;

  void reserve_tree(std::size_t n) {
    if (n <= tree_capacity) return;
    SPECDEC_CUDA_CHECK(cudaStreamSynchronize(stream));  // the old buffers may still be in use
    tree_capacity = n;
    tree_shape = DeviceArray<std::int32_t>(2 * n);
    tree_p = DeviceArray<float>(n * vocab);
    tree_scratch = DeviceArray<float>(vocab);
    tree_outcome = DeviceArray<sampling::TreeVerifyOutcome>(1);
    tree_bad = DeviceArray<int>(n);
    tree_value = DeviceArray<float>(n);
    staging_tree = PinnedArray<std::int32_t>(2 * n);
    host_tree_outcome = PinnedArray<sampling::TreeVerifyOutcome>(1);
    host_tree_bad = PinnedArray<int>(n);
    host_tree_value = PinnedArray<float>(n);
  }

  ~Impl() {
    if (uploaded != nullptr) cudaEventDestroy(uploaded);
    if (drafted != nullptr) cudaEventDestroy(drafted);
  }

  template <class T>
  T* part(std::size_t offset) const {
    return reinterpret_cast<T*>(report.get() + offset);
  }
  template <class T>
  const T* host_part(std::size_t offset) const {
    return reinterpret_cast<const T*>(host_report.get() + offset);
  }
  token_t* tokens() const { return part<token_t>(layout.tokens); }
  kernels::RoundArgs* target_args() const { return &round.get()->target; }

  [[nodiscard]] std::uint64_t key(Work work) const {
    return id << 8 | static_cast<std::uint64_t>(work);
  }

  /// The draft sampling kernel for the last row of a forward of n tokens.
  StepEpilogue draft_epilogue(std::size_t n) {
    StepEpilogue e;
    e.key = key(Work::draft);
    e.enqueue = [this, n](void* s, const float* logits) {
      kernels::draft_sample(logits + (n - 1) * vocab, static_cast<int>(vocab), round.get(), q.get(),
                            tokens() + 1, part<int>(layout.draft_bad),
                            part<float>(layout.draft_value), static_cast<cudaStream_t>(s), threads);
    };
    return e;
  }

  [[nodiscard]] Work verify_work(std::size_t k, Proposal proposal) const {
    if (params.greedy()) return Work::verify_greedy;
    return proposal == Proposal::sampled && k > 0 ? Work::verify_sampled : Work::verify_point;
  }

  /// Enqueues the verification of k drafted tokens against the k + 1 rows at `logits`.
  void enqueue_verify(Work work, std::size_t k, const float* logits, cudaStream_t s) {
    const int V = static_cast<int>(vocab);
    const int K = static_cast<int>(k);
    auto* accepted = part<std::int32_t>(layout.accepted);
    auto* emitted = part<token_t>(layout.emitted);
    auto* outcome = part<sampling::VerifyOutcome>(layout.outcome);
    if (work == Work::verify_greedy) {
      kernels::verify_chain_greedy(logits, true, tokens() + 1, 1, K, V, accepted, emitted, outcome,
                                   s, threads);
      return;
    }
    kernels::process_logits(logits, K + 1, V, target_args(), p.get(), part<int>(layout.target_bad),
                            part<float>(layout.target_value), s, threads);
    kernels::verify_chain(p.get(), work == Work::verify_sampled ? q.get() : nullptr, tokens() + 1,
                          1, K, V, target_args(), accepted, emitted, outcome, s, threads);
  }

  void check_round(std::size_t k, Proposal proposal) const {
    const std::size_t have = proposal == Proposal::sampled ? drafted_slots : proposed;
    if (k > have)
      throw Error(fmt::format("DeviceSampler: a round of {} drafted tokens, but {} were {}", k,
                              have, proposal == Proposal::sampled ? "drafted" : "proposed"));
  }

  /// The target's stream waits for the drafts made on another stream.
  void join_draft() {
    if (draft_stream == nullptr || draft_stream == stream) return;
    SPECDEC_CUDA_CHECK(cudaEventRecord(drafted, draft_stream));
    SPECDEC_CUDA_CHECK(cudaStreamWaitEvent(stream, drafted, 0));
    draft_stream = nullptr;
  }

  /// Waits for the round's report and turns it into the verdict (or the error it reports).
  RoundVerdict collect(Work work, std::size_t k, std::size_t position) {
    SPECDEC_CUDA_CHECK(cudaMemcpyAsync(host_report.get(), report.get(), layout.bytes,
                                       cudaMemcpyDeviceToHost, stream));
    SPECDEC_CUDA_CHECK(cudaStreamSynchronize(stream));
    in_round = false;
    p_valid = work != Work::verify_greedy;
    // A NaN / infinity in a row the kernels processed, in the order the host would meet it.
    const int* draft_bad = host_part<int>(layout.draft_bad);
    const float* draft_value = host_part<float>(layout.draft_value);
    for (std::size_t s = 0; s < drafted_slots; ++s) {
      if (draft_bad[s] >= 0)
        specdec::detail::throw_bad_logit("draft model", positions[s],
                                         static_cast<std::size_t>(draft_bad[s]), draft_value[s]);
    }
    if (work != Work::verify_greedy) {
      const int* target_bad = host_part<int>(layout.target_bad);
      const float* target_value = host_part<float>(layout.target_value);
      for (std::size_t r = 0; r <= k; ++r) {
        if (target_bad[r] >= 0)
          specdec::detail::throw_bad_logit("target model", position + r,
                                           static_cast<std::size_t>(target_bad[r]),
                                           target_value[r]);
      }
    }
    sampling::VerifyOutcome outcome;
    std::memcpy(&outcome, host_report.get() + layout.outcome, sizeof outcome);
    if (work == Work::verify_greedy && outcome.error == sampling::VerifyError::p_row_bad)
      specdec::detail::throw_bad_logit("target model", position + outcome.where, outcome.entry,
                                       outcome.value);
    sampling::throw_if_error(outcome, "DeviceSampler::verify");
    if (work != Work::verify_greedy) target_counter += k + 1;
    const token_t* tokens_host = host_part<token_t>(layout.tokens);
    drafted_tokens.assign(tokens_host + 1, tokens_host + 1 + k);
    return RoundVerdict{
        outcome.accepted, outcome.next, drafted_tokens, {}, {}, {}};  // no p(x), q(x)
  }
};

DeviceSampler::DeviceSampler(const Transformer& target, std::size_t max_k)
    : DeviceSampler(
          target.vocab_size(), max_k, target.stream(),
          target.options().sampling_threads > 0 ? target.options().sampling_threads : 256) {}

DeviceSampler::DeviceSampler(std::size_t vocab, std::size_t max_k, void* stream, int threads)
    : impl_(std::make_unique<Impl>()) {
  if (vocab == 0) throw Error("DeviceSampler: vocabulary size is 0");
  if (threads < 32 || threads % 32 != 0 || threads > 1024)
    throw Error(
        fmt::format("DeviceSampler: {} threads per block (a multiple of 32 up to 1024)", threads));
  Impl& m = *impl_;
  m.vocab = vocab;
  m.max_k = max_k;
  m.stream = static_cast<cudaStream_t>(stream);
  m.threads = threads;
  m.layout = ReportLayout(max_k);
  m.round = DeviceArray<kernels::SamplerRound>(1);
  m.q = DeviceArray<float>(std::max<std::size_t>(max_k, 1) * vocab);
  m.p = DeviceArray<float>((max_k + 1) * vocab);
  m.report = DeviceArray<std::byte>(m.layout.bytes);
  m.staging_round = PinnedArray<kernels::SamplerRound>(1);
  m.staging_tokens = PinnedArray<token_t>(max_k + 1);
  m.host_report = PinnedArray<std::byte>(m.layout.bytes);
  m.positions.assign(max_k, 0);
  SPECDEC_CUDA_CHECK(cudaEventCreateWithFlags(&m.uploaded, cudaEventDisableTiming));
  SPECDEC_CUDA_CHECK(cudaEventCreateWithFlags(&m.drafted, cudaEventDisableTiming));
}

DeviceSampler::~DeviceSampler() = default;
DeviceSampler::DeviceSampler(DeviceSampler&&) noexcept = default;
DeviceSampler& DeviceSampler::operator=(DeviceSampler&&) noexcept = default;

std::size_t DeviceSampler::max_k() const noexcept { return impl_->max_k; }

void DeviceSampler::begin(const sampling::SamplingParams& params, std::uint64_t seed) {
  set_params(params);
  impl_->seed = seed;
  impl_->draft_counter = 0;
  impl_->target_counter = 0;
  impl_->drafted_slots = 0;
  impl_->draws = 0;
}

void DeviceSampler::set_params(const sampling::SamplingParams& params) {
  sampling::validate(params);
  impl_->params = params;
}

void DeviceSampler::begin_round(token_t last) {
  Impl& m = *impl_;
  if (m.in_round) {
    // The last round was dropped before its result (a cancelled round): its copies from the
    // staging buffers and its drafts may still be running.
    if (m.draft_stream != nullptr) SPECDEC_CUDA_CHECK(cudaStreamSynchronize(m.draft_stream));
    SPECDEC_CUDA_CHECK(cudaStreamSynchronize(m.stream));
  }
  m.in_round = true;
  // The previous round's draws move the draft stream on.
  m.draft_counter += m.draws;
  m.draws = 0;
  m.drafted_slots = 0;
  m.proposed = 0;
  m.draft_stream = nullptr;
  // The staging buffers are free: the previous round ended with a wait for the device.
  kernels::SamplerRound& r = *m.staging_round.get();
  r.draft = kernels::RoundArgs{m.params, m.seed, kDraftStream, m.draft_counter};
  r.target = kernels::RoundArgs{m.params, m.seed, kTargetStream, m.target_counter};
  r.slot = 0;
  m.staging_tokens.get()[0] = last;
  SPECDEC_CUDA_CHECK(cudaMemcpyAsync(m.round.get(), m.staging_round.get(),
                                     sizeof(kernels::SamplerRound), cudaMemcpyHostToDevice,
                                     m.stream));
  SPECDEC_CUDA_CHECK(cudaMemcpyAsync(m.tokens(), m.staging_tokens.get(), sizeof(token_t),
                                     cudaMemcpyHostToDevice, m.stream));
}

void DeviceSampler::draft(Transformer& model, std::span<const token_t> feed, std::size_t position) {
  Impl& m = *impl_;
  if (m.drafted_slots != 0 || m.proposed != 0)
    throw Error("DeviceSampler::draft: the round already has drafted tokens (draft_next?)");
  if (m.max_k == 0) throw Error("DeviceSampler::draft: this sampler drafts no tokens (max_k 0)");
  if (model.vocab_size() != m.vocab)
    throw Error(fmt::format("DeviceSampler::draft: the draft model has {} tokens, the sampler {}",
                            model.vocab_size(), m.vocab));
  const auto draft_stream = static_cast<cudaStream_t>(model.stream());
  if (draft_stream != m.stream) {  // the draft model's stream waits for the round's uploads
    SPECDEC_CUDA_CHECK(cudaEventRecord(m.uploaded, m.stream));
    SPECDEC_CUDA_CHECK(cudaStreamWaitEvent(draft_stream, m.uploaded, 0));
  }
  m.draft_stream = draft_stream;
  const StepEpilogue epilogue = m.draft_epilogue(feed.size());
  (void)model.forward(feed, &epilogue);
  m.positions[m.drafted_slots++] = position;
  if (!m.params.greedy()) ++m.draws;
}

void DeviceSampler::draft_next(Transformer& model, std::size_t position) {
  Impl& m = *impl_;
  if (m.drafted_slots == 0) throw Error("DeviceSampler::draft_next: nothing drafted yet");
  if (m.drafted_slots >= m.max_k)
    throw Error(
        fmt::format("DeviceSampler::draft_next: max_k = {} tokens drafted already", m.max_k));
  if (static_cast<cudaStream_t>(model.stream()) != m.draft_stream)
    throw Error("DeviceSampler::draft_next: another model than the one draft() fed");
  const StepEpilogue epilogue = m.draft_epilogue(1);
  (void)model.forward(DeviceTokens{m.tokens() + m.drafted_slots, 1}, &epilogue);
  m.positions[m.drafted_slots++] = position;
  if (!m.params.greedy()) ++m.draws;
}

void DeviceSampler::propose(std::span<const token_t> tokens) {
  Impl& m = *impl_;
  if (tokens.empty()) return;
  if (m.drafted_slots != 0 || m.proposed != 0)
    throw Error("DeviceSampler::propose: the round already has drafted tokens");
  if (tokens.size() > m.max_k)
    throw Error(
        fmt::format("DeviceSampler::propose: {} tokens, max_k is {}", tokens.size(), m.max_k));
  specdec::detail::check_proposal(tokens, m.vocab);
  std::copy(tokens.begin(), tokens.end(), m.staging_tokens.get() + 1);
  SPECDEC_CUDA_CHECK(cudaMemcpyAsync(m.tokens() + 1, m.staging_tokens.get() + 1,
                                     tokens.size() * sizeof(token_t), cudaMemcpyHostToDevice,
                                     m.stream));
  m.proposed = tokens.size();
}

TargetInput DeviceSampler::target_input(std::size_t k) {
  Impl& m = *impl_;
  if (k > std::max(m.drafted_slots, m.proposed))
    throw Error(fmt::format("DeviceSampler::target_input: {} tokens asked, {} drafted", k,
                            std::max(m.drafted_slots, m.proposed)));
  m.join_draft();
  return TargetInput{{}, DeviceTokens{m.tokens(), k + 1}};
}

RoundVerdict DeviceSampler::verify(const LogitsView& target, std::size_t k, Proposal proposal,
                                   std::size_t position) {
  Impl& m = *impl_;
  m.check_round(k, proposal);
  if (target.where != Memory::device || target.data == nullptr)
    throw Error("DeviceSampler::verify: the target's logits must be in device memory");
  if (target.vocab != m.vocab || target.rows != k + 1)
    throw Error(fmt::format("DeviceSampler::verify: logits are {} x {}, expected {} x {}",
                            target.rows, target.vocab, k + 1, m.vocab));
  m.join_draft();
  const Work work = m.verify_work(k, proposal);
  m.enqueue_verify(work, k, target.data, m.stream);
  return m.collect(work, k, position);
}

RoundVerdict DeviceSampler::verify_forward(Transformer& target, std::size_t k, Proposal proposal,
                                           std::size_t position) {
  Impl& m = *impl_;
  m.check_round(k, proposal);
  if (static_cast<cudaStream_t>(target.stream()) != m.stream)
    throw Error("DeviceSampler::verify_forward: the target is not the model of this sampler");
  m.join_draft();
  const Work work = m.verify_work(k, proposal);
  StepEpilogue epilogue;
  epilogue.key = m.key(work);
  epilogue.enqueue = [&m, work, k](void* s, const float* logits) {
    m.enqueue_verify(work, k, logits, static_cast<cudaStream_t>(s));
  };
  (void)target.forward(DeviceTokens{m.tokens(), k + 1}, &epilogue);
  return m.collect(work, k, position);
}

TreeVerdict DeviceSampler::verify_tree(const LogitsView& target, std::span<const token_t> tokens,
                                       std::span<const std::int32_t> parents,
                                       std::size_t position) {
  Impl& m = *impl_;
  const std::size_t n = tokens.size();
  if (target.where != Memory::device || target.data == nullptr)
    throw Error("DeviceSampler::verify_tree: the target's logits must be in device memory");
  if (target.vocab != m.vocab || target.rows != n)
    throw Error(fmt::format("DeviceSampler::verify_tree: logits are {} x {}, expected {} x {}",
                            target.rows, target.vocab, n, m.vocab));
  sampling::validate_tree(tokens, parents, m.vocab, sampling::TreeProposal::point_mass);
  m.reserve_tree(n);
  // The previous tree's copies from the staging buffer ended with its wait for the outcome.
  std::copy(tokens.begin(), tokens.end(), m.staging_tree.get());
  std::copy(parents.begin(), parents.end(), m.staging_tree.get() + n);
  SPECDEC_CUDA_CHECK(cudaMemcpyAsync(m.tree_shape.get(), m.staging_tree.get(),
                                     2 * n * sizeof(std::int32_t), cudaMemcpyHostToDevice,
                                     m.stream));
  m.join_draft();
  const int N = static_cast<int>(n);
  const int V = static_cast<int>(m.vocab);
  const bool greedy = m.params.greedy();
  if (!greedy)
    kernels::process_logits(target.data, N, V, m.target_args(), m.tree_p.get(), m.tree_bad.get(),
                            m.tree_value.get(), m.stream, m.threads);
  kernels::verify_tree(greedy ? target.data : m.tree_p.get(), greedy, m.tree_shape.get(),
                       m.tree_shape.get() + n, N, V, m.target_args(), m.tree_scratch.get(),
                       m.tree_outcome.get(), m.stream, m.threads);
  SPECDEC_CUDA_CHECK(cudaMemcpyAsync(m.host_tree_outcome.get(), m.tree_outcome.get(),
                                     sizeof(sampling::TreeVerifyOutcome), cudaMemcpyDeviceToHost,
                                     m.stream));
  if (!greedy) {
    SPECDEC_CUDA_CHECK(cudaMemcpyAsync(m.host_tree_bad.get(), m.tree_bad.get(), n * sizeof(int),
                                       cudaMemcpyDeviceToHost, m.stream));
    SPECDEC_CUDA_CHECK(cudaMemcpyAsync(m.host_tree_value.get(), m.tree_value.get(),
                                       n * sizeof(float), cudaMemcpyDeviceToHost, m.stream));
  }
  SPECDEC_CUDA_CHECK(cudaStreamSynchronize(m.stream));
  m.in_round = false;
  m.p_valid = false;  // p_rows() describes chains

  // A node's position is position + its depth (the errors name it).
  tree_depths(parents, m.tree_depth);
  if (!greedy) {
    for (std::size_t r = 0; r < n; ++r)
      if (m.host_tree_bad.get()[r] >= 0)
        specdec::detail::throw_bad_logit("target model", position + m.tree_depth[r],
                                         static_cast<std::size_t>(m.host_tree_bad.get()[r]),
                                         m.host_tree_value.get()[r]);
  }
  const sampling::TreeVerifyOutcome outcome = *m.host_tree_outcome.get();
  if (greedy && outcome.error == sampling::VerifyError::p_row_bad && outcome.where < n)
    specdec::detail::throw_bad_logit("target model", position + m.tree_depth[outcome.where],
                                     outcome.entry, outcome.value);
  sampling::throw_if_error(outcome, "DeviceSampler::verify_tree");
  if (!greedy) m.target_counter += n;
  m.tree_path = sampling::detail::tree_path(outcome, parents);
  const bool leaf = tree_leaf(parents, m.tree_path.empty() ? 0 : m.tree_path.back());
  return TreeVerdict{m.tree_path, outcome.next, leaf, {}};
}

std::vector<float> DeviceSampler::q_rows(std::size_t k) const {
  const Impl& m = *impl_;
  std::vector<float> out(std::min(k, m.max_k) * m.vocab);
  if (!out.empty()) {
    SPECDEC_CUDA_CHECK(cudaStreamSynchronize(m.stream));
    SPECDEC_CUDA_CHECK(
        cudaMemcpy(out.data(), m.q.get(), out.size() * sizeof(float), cudaMemcpyDeviceToHost));
  }
  return out;
}

std::vector<float> DeviceSampler::p_rows(std::size_t k) const {
  const Impl& m = *impl_;
  if (!m.p_valid) return {};
  std::vector<float> out(std::min(k + 1, m.max_k + 1) * m.vocab);
  SPECDEC_CUDA_CHECK(cudaStreamSynchronize(m.stream));
  SPECDEC_CUDA_CHECK(
      cudaMemcpy(out.data(), m.p.get(), out.size() * sizeof(float), cudaMemcpyDeviceToHost));
  return out;
}

}  // namespace specdec::cuda
