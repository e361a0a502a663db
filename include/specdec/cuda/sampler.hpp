#pragma once
// cuda::DeviceSampler: the RoundSampler (sampling/round.hpp) of models whose logits live in
// device memory (cuda::Transformer). A round runs on the device end to end:
//   draft    each draft step is the draft model's forward with the draft sampling kernel
//            appended (a StepEpilogue), captured together into one CUDA graph per step shape;
//            the drafted token is written to device memory and the next step reads it from there;
//   verify   the target's forward over [last token, x_1 .. x_k] (read from device memory) with
//            the processing of its k + 1 rows and the fused verification appended, again one
//            graph per shape (greedy: the verification reads the raw logits' argmax);
//   result   one copy to the host per round: the accepted count, the next token and the drafted
//            tokens (for the round's record), with any NaN / infinity the kernels found.
// Decisions follow the sampling core's conventions exactly (docs/math.md): the same Philox
// streams and counters as HostSampler (kTargetStream, kDraftStream), and given the same processed
// distributions the same decisions bit for bit (docs/cuda.md, section 7). The distributions are
// computed on the device and differ from the host's process_logits by rounding.
//
// No CUDA header: streams travel as void* (cudaStream_t).

#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "specdec/common.hpp"
#include "specdec/model/causal_lm.hpp"
#include "specdec/sampling/process.hpp"
#include "specdec/sampling/round.hpp"

namespace specdec::cuda {

class Transformer;

class DeviceSampler {
 public:
  static constexpr Memory memory = Memory::device;

  /// A sampler for sequences whose target is `target` (its vocabulary, stream and
  /// Options::sampling_threads), drafting up to max_k tokens per round.
  DeviceSampler(const Transformer& target, std::size_t max_k);
  /// The same for rows of `vocab` logits, work enqueued on `stream` (a cudaStream_t), `threads`
  /// per block of the sampling kernels.
  DeviceSampler(std::size_t vocab, std::size_t max_k, void* stream, int threads = 256);
  ~DeviceSampler();
  DeviceSampler(DeviceSampler&&) noexcept;
  DeviceSampler& operator=(DeviceSampler&&) noexcept;
  DeviceSampler(const DeviceSampler&) = delete;
  DeviceSampler& operator=(const DeviceSampler&) = delete;

  // ---- RoundSampler (see sampling/round.hpp)
  void begin(const sampling::SamplingParams& params, std::uint64_t seed);
  void set_params(const sampling::SamplingParams& params);
  void begin_round(token_t last);
  /// Feeds `feed` (host tokens) to the draft model and draws x_1 from its last row, on the device.
  void draft(Transformer& model, std::span<const token_t> feed, std::size_t position);
  /// Feeds the last drafted token (from device memory) and draws the next one.
  void draft_next(Transformer& model, std::size_t position);
  void propose(std::span<const token_t> tokens);
  /// [last token, x_1 .. x_k] in device memory.
  TargetInput target_input(std::size_t k);
  /// Verifies against k + 1 rows of device logits the caller computed (e.g. a batched forward).
  RoundVerdict verify(const LogitsView& target, std::size_t k, Proposal proposal,
                      std::size_t position);
  /// The target's forward over target_input(k) with the verification captured into its graph.
  RoundVerdict verify_forward(Transformer& target, std::size_t k, Proposal proposal,
                              std::size_t position);
  /// Verifies a token tree of point-mass proposals (a TreeDrafter's; TreeSampler) against the
  /// target's device rows for it (Transformer::forward_tree): tokens[0] is the sequence's last
  /// token (parents[0] = -1). Greedy: the argmax walk over the raw logits; sampled: the n rows
  /// processed and the core's tree rule (sampling/tree_verify.hpp) on the device, on the target
  /// stream at n counters, exactly the host sampler's decisions given the same distributions.
  /// One copy of the outcome to the host. The path's span is valid until the next call.
  TreeVerdict verify_tree(const LogitsView& target, std::span<const token_t> tokens,
                          std::span<const std::int32_t> parents, std::size_t position);
  /// The device's work is asynchronous: its time is not split off (the wait for the round's
  /// result counts as verify time).
  double take_seconds() { return 0.0; }

  // ---- diagnostics (they wait for the device)
  /// q_0 .. q_(k-1) of the last round's drafts; p_0 .. p_k of its verify (empty after a greedy
  /// verify, which reads the logits directly).
  [[nodiscard]] std::vector<float> q_rows(std::size_t k) const;
  [[nodiscard]] std::vector<float> p_rows(std::size_t k) const;
  [[nodiscard]] std::size_t max_k() const noexcept;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace specdec::cuda

namespace specdec {

template <>
struct SamplerFor<Memory::device> {
  using type = cuda::DeviceSampler;
};

static_assert(RoundSampler<cuda::DeviceSampler>);
static_assert(TreeSampler<cuda::DeviceSampler>);

}  // namespace specdec
