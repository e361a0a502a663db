// cuda::DeviceSampler (see include/specdec/cuda/sampler.hpp): host orchestration of the sampling
// kernels for one sequence, with the small results copied through pinned staging buffers.
#include "specdec/cuda/sampler.hpp"

#include <cuda_runtime.h>
#include <fmt/format.h>

#include <algorithm>

#include "common/check.hpp"
#include "host/device_buffer.hpp"
#include "kernels/sampling.hpp"

namespace specdec::cuda {

namespace {

void check_logits(const LogitsView& v, std::size_t rows, std::size_t vocab, const char* what) {
  if (v.where != Memory::device || v.data == nullptr) {
    throw Error(fmt::format("DeviceSampler::{}: the logits must be in device memory", what));
  }
  if (v.vocab != vocab || v.rows < rows) {
    throw Error(fmt::format("DeviceSampler::{}: logits are {} x {}, need at least {} x {}", what,
                            v.rows, v.vocab, rows, vocab));
  }
}

}  // namespace

struct DeviceSampler::Impl {
  std::size_t vocab = 0;
  std::size_t max_k = 0;
  cudaStream_t stream = nullptr;
  DeviceArray<float> q, p;  // [max_k][V], [max_k + 1][V]
  DeviceArray<token_t> drafted, token, emitted;
  DeviceArray<std::int32_t> accepted;
  DeviceArray<int> bad_logit;
  DeviceArray<sampling::VerifyOutcome> outcome;
  PinnedArray<token_t> staging_tokens;  // [max_k + 1]
  PinnedArray<int> staging_bad;         // [max_k + 1]
  PinnedArray<std::int32_t> staging_accepted;
  PinnedArray<sampling::VerifyOutcome> staging_outcome;
  bool p_valid = false;
};

DeviceSampler::DeviceSampler(std::size_t vocab, std::size_t max_k, void* stream)
    : impl_(std::make_unique<Impl>()) {
  if (vocab == 0 || max_k == 0) throw Error("DeviceSampler: vocab and max_k must be positive");
  Impl& m = *impl_;
  m.vocab = vocab;
  m.max_k = max_k;
  m.stream = static_cast<cudaStream_t>(stream);
  m.q = DeviceArray<float>(max_k * vocab);
  m.p = DeviceArray<float>((max_k + 1) * vocab);
  m.drafted = DeviceArray<token_t>(max_k);
  m.token = DeviceArray<token_t>(1);
  m.emitted = DeviceArray<token_t>(max_k + 1);
  m.accepted = DeviceArray<std::int32_t>(1);
  m.bad_logit = DeviceArray<int>(max_k + 1);
  m.outcome = DeviceArray<sampling::VerifyOutcome>(1);
  m.staging_tokens = PinnedArray<token_t>(max_k + 1);
  m.staging_bad = PinnedArray<int>(max_k + 1);
  m.staging_accepted = PinnedArray<std::int32_t>(1);
  m.staging_outcome = PinnedArray<sampling::VerifyOutcome>(1);
}

DeviceSampler::~DeviceSampler() = default;
DeviceSampler::DeviceSampler(DeviceSampler&&) noexcept = default;
DeviceSampler& DeviceSampler::operator=(DeviceSampler&&) noexcept = default;

token_t DeviceSampler::draft(const LogitsView& logits, std::size_t row, std::size_t slot,
                             const sampling::SamplingParams& params, std::uint64_t seed,
                             std::uint64_t stream, std::uint64_t counter) {
  Impl& m = *impl_;
  sampling::validate(params);
  check_logits(logits, row + 1, m.vocab, "draft");
  if (slot >= m.max_k)
    throw Error(fmt::format("DeviceSampler::draft: slot {} >= max_k {}", slot, m.max_k));
  const int V = static_cast<int>(m.vocab);
  kernels::sample_rows(logits.data + row * m.vocab, 1, V, params, seed, stream, counter,
                       m.q.get() + slot * m.vocab, m.token.get(), m.bad_logit.get(), m.stream);
  SPECDEC_CUDA_CHECK(cudaMemcpyAsync(m.staging_tokens.get(), m.token.get(), sizeof(token_t),
                                     cudaMemcpyDeviceToHost, m.stream));
  SPECDEC_CUDA_CHECK(cudaMemcpyAsync(m.staging_bad.get(), m.bad_logit.get(), sizeof(int),
                                     cudaMemcpyDeviceToHost, m.stream));
  SPECDEC_CUDA_CHECK(cudaStreamSynchronize(m.stream));
  if (m.staging_bad.get()[0] >= 0) {
    throw Error(fmt::format("DeviceSampler::draft: logit {} of row {} is NaN or infinite",
                            m.staging_bad.get()[0], row));
  }
  return m.staging_tokens.get()[0];
}

sampling::VerifyResult DeviceSampler::verify(const LogitsView& target,
                                             std::span<const token_t> drafted,
                                             const sampling::SamplingParams& params,
                                             std::uint64_t seed, std::uint64_t counter) {
  Impl& m = *impl_;
  sampling::validate(params);
  const std::size_t k = drafted.size();
  if (k > m.max_k)
    throw Error(fmt::format("DeviceSampler::verify: {} drafted tokens, max_k is {}", k, m.max_k));
  check_logits(target, k + 1, m.vocab, "verify");
  const int V = static_cast<int>(m.vocab);
  const int K = static_cast<int>(k);
  std::copy(drafted.begin(), drafted.end(), m.staging_tokens.get());
  if (k > 0) {
    SPECDEC_CUDA_CHECK(cudaMemcpyAsync(m.drafted.get(), m.staging_tokens.get(), k * sizeof(token_t),
                                       cudaMemcpyHostToDevice, m.stream));
  }
  m.p_valid = !params.greedy();
  if (params.greedy()) {
    kernels::verify_chain_greedy(target.data, true, m.drafted.get(), 1, K, V, m.accepted.get(),
                                 m.emitted.get(), m.outcome.get(), m.stream);
  } else {
    kernels::process_logits(target.data, K + 1, V, params, m.p.get(), m.bad_logit.get(), m.stream);
    kernels::verify_chain(m.p.get(), m.q.get(), m.drafted.get(), 1, K, V, seed, counter,
                          m.accepted.get(), m.emitted.get(), m.outcome.get(), m.stream);
    SPECDEC_CUDA_CHECK(cudaMemcpyAsync(m.staging_bad.get(), m.bad_logit.get(),
                                       (k + 1) * sizeof(int), cudaMemcpyDeviceToHost, m.stream));
  }
  SPECDEC_CUDA_CHECK(cudaMemcpyAsync(m.staging_outcome.get(), m.outcome.get(),
                                     sizeof(sampling::VerifyOutcome), cudaMemcpyDeviceToHost,
                                     m.stream));
  SPECDEC_CUDA_CHECK(cudaStreamSynchronize(m.stream));
  if (!params.greedy()) {
    for (std::size_t r = 0; r <= k; ++r) {
      if (m.staging_bad.get()[r] >= 0) {
        throw Error(
            fmt::format("DeviceSampler::verify: logit {} of target row {} is NaN or infinite",
                        m.staging_bad.get()[r], r));
      }
    }
  }
  const sampling::VerifyOutcome out = m.staging_outcome.get()[0];
  sampling::throw_if_error(out, "DeviceSampler::verify");
  return {out.accepted, out.next};
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
