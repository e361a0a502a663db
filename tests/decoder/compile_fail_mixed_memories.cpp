// Compiled (not run) by ctest: a SpeculativeDecoder whose draft model returns host logits and
// whose target returns device logits must not compile, with the session's static_assert message
// (decoder.mixed_memories_do_not_compile). With -DSPECDEC_SAME_MEMORY both models declare device
// logits and the file must compile (decoder.same_memories_compile): the failure above is the
// static_assert's, not a broken test file.
#include <span>

#include "specdec/decoder/speculative.hpp"

namespace {

using specdec::LogitsView;
using specdec::Memory;
using specdec::token_t;

/// A model with logits on the host (the default of logits_memory_v).
struct HostModel {
  [[nodiscard]] std::size_t vocab_size() const { return 4; }
  [[nodiscard]] std::size_t context_length() const { return 8; }
  [[nodiscard]] std::size_t cached() const { return 0; }
  LogitsView forward(std::span<const token_t>) { return {}; }
  void rollback(std::size_t) {}
};

/// A model that declares device logits (and so its completion point, which CausalLM asks of it).
struct DeviceModel : HostModel {
  static constexpr Memory logits_memory = Memory::device;
  void synchronize() {}
};

/// A device sampler for this test (the real one, cuda::DeviceSampler, needs the CUDA backend).
struct FakeDeviceSampler : specdec::HostSampler {
  static constexpr Memory memory = Memory::device;
  using HostSampler::HostSampler;
};

}  // namespace

template <>
struct specdec::SamplerFor<Memory::device> {
  using type = FakeDeviceSampler;
};

#if defined(SPECDEC_SAME_MEMORY)
using Draft = DeviceModel;
#else
using Draft = HostModel;
#endif

void instantiate(Draft& draft, DeviceModel& target) {
  specdec::SpeculativeDecoder<Draft, DeviceModel> decoder(draft, target);
  (void)decoder;
}
