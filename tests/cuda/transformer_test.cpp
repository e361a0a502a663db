// cuda::Transformer end to end: its logits against cpu::Transformer's on the trained tinyllama
// pair with the same F16 weights (the CPU backend is the reference), prefill (cuBLAS path),
// decode, verify and rollback; CUDA graph replays against direct launches; batch invariance; the
// error contract.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <memory>
#include <vector>

#include "model_f16.hpp"
#include "specdec/cpu/transformer.hpp"
#include "specdec/cuda/transformer.hpp"
#include "specdec/decoder/cost_model.hpp"
#include "support.hpp"

namespace {

using specdec::LogitsView;
using specdec::token_t;

using specdec::test::emulator_friendly;
using specdec::test::load_f16;

/// max |a - b| over a row / max |b| over the row, worst row.
double worst_row_error(const std::vector<float>& actual, const LogitsView& expected) {
  REQUIRE(actual.size() == expected.rows * expected.vocab);
  double worst = 0.0;
  for (std::size_t r = 0; r < expected.rows; ++r) {
    const auto e = expected.row(r);
    const std::span<const float> a(actual.data() + r * expected.vocab, expected.vocab);
    worst = std::max(worst, specdec::test::relative_error(a, e));
  }
  return worst;
}

std::vector<float> host_copy(specdec::cuda::Transformer& m, const LogitsView& v) {
  REQUIRE(v.where == specdec::Memory::device);
  std::vector<float> out(v.rows * v.vocab);
  m.copy_logits_to_host(out);
  return out;
}

// A prompt of the pair's vocabulary (ids < 4096), long enough for the prefill path.
std::vector<token_t> prompt(std::size_t n) {
  std::vector<token_t> t(n);
  for (std::size_t i = 0; i < n; ++i) t[i] = static_cast<token_t>((i * 977 + 13) % 4000 + 1);
  t[0] = 1;  // <s>
  return t;
}

}  // namespace

TEST_CASE("cuda::Transformer matches cpu::Transformer (F16 weights)", "[cuda-emu][transformer]") {
  for (const char* file : {"draft-f32.gguf", "target-f32.gguf"}) {
    const auto model = load_f16(file);
    if (!model) {
      WARN("tinyllama-pair not found: skipped");
      return;
    }
    // Both KV types on the draft; the (6x slower to emulate) target with the default f16 only.
    const bool target = std::string(file) == "target-f32.gguf";
    for (auto kv : {specdec::KvType::f16, specdec::KvType::f32}) {
      if (target && kv == specdec::KvType::f32) break;
      INFO(file << ", KV cache " << (kv == specdec::KvType::f16 ? "f16" : "f32"));
      specdec::cpu::Options cpu_options;
      cpu_options.kv_type =
          kv == specdec::KvType::f16 ? specdec::KvType::f16 : specdec::KvType::f32;
      cpu_options.context_length = 128;
      specdec::cpu::Transformer cpu(model->config, model->store, cpu_options);
      auto options = emulator_friendly();
      options.kv_type = kv;
      options.context_length = 128;
      specdec::cuda::Transformer gpu(model->config, model->store, options);
      REQUIRE(gpu.vocab_size() == cpu.vocab_size());

      auto compare = [&](std::span<const token_t> tokens, double tolerance) {
        const LogitsView expected = cpu.forward(tokens);
        const LogitsView got = gpu.forward(tokens);
        REQUIRE(got.rows == tokens.size());
        REQUIRE(gpu.cached() == cpu.cached());
        const double error = worst_row_error(host_copy(gpu, got), expected);
        INFO(tokens.size() << " tokens at " << cpu.cached() - tokens.size() << ": relative error "
                           << error);
        CHECK(error <= tolerance);
      };
      const auto p = prompt(21);
      // Prefill of 21 tokens: cuBLAS with the activations rounded to f16.
      compare(p, 1e-3);
      compare(std::vector<token_t>{42}, 1e-3);               // decode
      compare(std::vector<token_t>{7, 8, 9, 10, 11}, 1e-3);  // verify of 5
      cpu.rollback(23);
      gpu.rollback(23);
      compare(std::vector<token_t>{12, 13, 14}, 1e-3);  // after a rollback
      compare(prompt(16), 1e-3);                        // 16: the largest skinny step
    }
  }
}

TEST_CASE("cuda::Transformer steps of <= 16 tokens are batch-invariant, graphs replay exactly",
          "[cuda-emu][transformer]") {
  const auto model = load_f16("draft-f32.gguf");
  if (!model) {
    WARN("tinyllama-pair not found: skipped");
    return;
  }
  auto options = emulator_friendly();
  options.context_length = 64;
  specdec::cuda::Transformer graphs(model->config, model->store, options);
  options.cuda_graphs = false;
  specdec::cuda::Transformer direct(model->config, model->store, options);
  const auto p = prompt(10);
  const auto verify = std::vector<token_t>{5, 6, 7, 8, 9, 10};

  for (auto* m : {&graphs, &direct}) {
    (void)m->forward(std::span(p).first(8));  // 8 tokens: a skinny step
  }
  // The same verify twice through graphs (capture, then replay) and once directly.
  const auto first = host_copy(graphs, graphs.forward(verify));
  graphs.rollback(8);
  const auto replayed = host_copy(graphs, graphs.forward(verify));
  const auto launched = host_copy(direct, direct.forward(verify));
  CHECK(graphs.graph_stats().replays >= 1);
  CHECK(direct.graph_stats().captures == 0);
  REQUIRE(std::memcmp(first.data(), replayed.data(), first.size() * 4) == 0);
  REQUIRE(std::memcmp(first.data(), launched.data(), first.size() * 4) == 0);

  // Decoding the same tokens one at a time gives the same rows, bit for bit.
  direct.rollback(8);
  const std::size_t vocab = direct.vocab_size();
  for (std::size_t i = 0; i < verify.size(); ++i) {
    const auto row = host_copy(direct, direct.forward(std::span(verify).subspan(i, 1)));
    INFO("position " << 8 + i);
    REQUIRE(std::memcmp(row.data(), first.data() + i * vocab, vocab * 4) == 0);
  }
}

TEST_CASE("cuda::Transformer error contract and host copies", "[cuda-emu][transformer]") {
  const auto model = load_f16("draft-f32.gguf");
  if (!model) {
    WARN("tinyllama-pair not found: skipped");
    return;
  }
  auto options = emulator_friendly();
  options.context_length = 20;
  specdec::cuda::Transformer m(model->config, model->store, options);
  const auto v = m.forward(std::vector<token_t>{1, 2, 3});
  CHECK(v.where == specdec::Memory::device);
  const auto copied = host_copy(m, v);
  const LogitsView host = m.logits_to_host();
  CHECK(host.where == specdec::Memory::host);
  REQUIRE(host.rows == 3);
  CHECK(std::memcmp(host.data, copied.data(), copied.size() * 4) == 0);
  std::vector<float> wrong(5);
  CHECK_THROWS_AS(m.copy_logits_to_host(wrong), specdec::Error);

  CHECK_THROWS_AS(m.forward(std::vector<token_t>{}), specdec::Error);
  CHECK_THROWS_AS(m.forward(std::vector<token_t>{4, 4096}), specdec::Error);
  CHECK_THROWS_AS(m.forward(std::vector<token_t>{-1}), specdec::Error);
  CHECK_THROWS_AS(m.forward(std::vector<token_t>(18, 5)), specdec::Error);  // 3 + 18 > 20
  CHECK(m.cached() == 3);
  CHECK_THROWS_AS(m.rollback(4), specdec::Error);
  m.rollback(0);
  CHECK(m.cached() == 0);
  CHECK(m.device_bytes() > 0);

  // A context whose KV cache exceeds the device's free memory (the emulator reports 16 GiB) is
  // refused before allocating, by name; one past the kernels' int indexing too.
  options.context_length = std::size_t{1} << 30;
  CHECK_THROWS_WITH(
      specdec::cuda::Transformer(model->config, model->store, options),
      Catch::Contains("1073741824 positions needs") && Catch::Contains("Options::context_length"));
  options.context_length = std::size_t{1} << 31;
  CHECK_THROWS_WITH(specdec::cuda::Transformer(model->config, model->store, options),
                    Catch::Contains("2^31 - 1"));
}

TEST_CASE("cuda::Transformer takes token ids in device memory and captures step epilogues",
          "[cuda-emu][transformer]") {
  const auto model = load_f16("draft-f32.gguf");
  if (!model) {
    WARN("tinyllama-pair not found: skipped");
    return;
  }
  auto options = emulator_friendly();
  options.context_length = 32;
  specdec::cuda::Transformer m(model->config, model->store, options);
  const std::size_t vocab = m.vocab_size();
  const auto p = prompt(6);
  (void)m.forward(std::span(p).first(4));

  // The same step from host ids and from device ids: the same bits.
  const std::vector<token_t> ids = {p[4], p[5]};
  const auto from_host = host_copy(m, m.forward(ids));
  m.rollback(4);
  specdec::test::DeviceBuffer<token_t> device_ids(ids);
  const auto from_device =
      host_copy(m, m.forward(specdec::DeviceTokens{device_ids.get(), ids.size()}));
  REQUIRE(std::memcmp(from_host.data(), from_device.data(), from_host.size() * 4) == 0);
  CHECK(m.cached() == 6);

  // An epilogue that copies the step's last logits row: captured with the step, then replayed
  // for another step of the same shape, where it copies that step's row (it reads the logits
  // buffer at its fixed address).
  specdec::test::DeviceBuffer<float> last_row(vocab);
  specdec::cuda::StepEpilogue epilogue;
  epilogue.key = 42;
  epilogue.enqueue = [&](void* stream, const float* logits) {
    SPECDEC_CUDA_CHECK(cudaMemcpyAsync(last_row.get(), logits + vocab, vocab * sizeof(float),
                                       cudaMemcpyDeviceToDevice,
                                       static_cast<cudaStream_t>(stream)));
  };
  const auto before = m.graph_stats();
  for (const token_t t : {7, 8}) {
    m.rollback(4);
    const auto rows = host_copy(m, m.forward(std::vector<token_t>{p[4], t}, &epilogue));
    const auto copied = last_row.download();
    REQUIRE(std::memcmp(copied.data(), rows.data() + vocab, vocab * 4) == 0);
  }
  CHECK(m.graph_stats().captures == before.captures + 1);
  CHECK(m.graph_stats().replays == before.replays + 1);
  specdec::cuda::StepEpilogue keyless;
  keyless.enqueue = epilogue.enqueue;
  CHECK_THROWS_AS(m.forward(std::vector<token_t>{1}, &keyless), specdec::Error);
}

// The cost table of a device model: cuda::Transformer has a completion point (CausalLM requires
// one of a model with device logits), measure_forward_times waits for it around every timed
// forward, and the caches are left empty. (That the times are GPU work, not launches, is what
// the completion point gives; tests/decoder checks measure_forward_times waits for it.)
static_assert(specdec::HasCompletionPoint<specdec::cuda::Transformer>);
TEST_CASE("measure_forward_times on cuda::Transformer", "[cuda-emu][transformer]") {
  const auto model = load_f16("draft-f32.gguf");
  if (!model) {
    WARN("tinyllama-pair not found: skipped");
    return;
  }
  auto options = emulator_friendly();
  options.context_length = 16;
  specdec::cuda::Transformer target(model->config, model->store, options);
  specdec::cuda::Transformer draft(model->config, model->store, options);
  const specdec::ForwardTimes t = specdec::measure_forward_times(target, &draft, 2, 4, 1);
  REQUIRE(t.target.size() == 3);
  for (const double seconds : t.target) CHECK(seconds > 0.0);
  CHECK(t.draft > 0.0);
  CHECK(target.cached() == 0);
  CHECK(draft.cached() == 0);
  // The models still work after the timing: a forward gives the logits of a fresh one.
  specdec::cuda::Transformer fresh(model->config, model->store, options);
  const std::vector<token_t> tokens{1, 2, 3};
  CHECK(host_copy(target, target.forward(tokens)) == host_copy(fresh, fresh.forward(tokens)));
}
