// make_random_gguf: writes a GGUF v3 file with random weights and the shapes of a real model, for
// timing the CPU backend (weights do not change timings; shapes and dtypes do).
//
//   make_random_gguf --shape tinyllama-1.1b --type bf16 --out /work/scratch/models/target-bf16.gguf
//   make_random_gguf --shape tinyllama-1.1b --type q4_k_m --out
//   /work/scratch/models/target-q4_k_m.gguf
//
// Shapes: tinyllama-1.1b (dim 2048, 22 layers, 32 heads, 4 KV heads, FFN 5632, vocab 32000),
// llama-68m (dim 768, 2 layers, 12 heads, FFN 3072, vocab 32000), and the Qwen2.5 (qwen2
// architecture: q/k/v biases, tied embeddings, rope base 1e6) shapes qwen2.5-1.5b (dim 1536, 28
// layers, 12 heads, 2 KV heads, FFN 8960, vocab 151936) and qwen2.5-0.5b (dim 896, 24 layers, 14
// heads, 2 KV heads, FFN 4864, vocab 151936), as in the official Qwen2.5(-Coder) GGUF files. Types:
// any of llama.cpp's presets (specdec/model/quant_mix.hpp: F32, F16, BF16, Q8_0, Q4_0, Q4_K_M,
// Q5_K_M, Q6_K, ...): each tensor takes the type llama-quantize would give it (the K-quant mixes
// put Q6_K on the output head and on some attn_v / ffn_down, ...); norms stay F32. The file is
// streamed tensor by tensor, 64 MiB of rows at a time quantised by all CPUs. Weights are uniform
// with variance 1 / fan-in (unit-scale activations, no denormals that could slow the arithmetic
// down).
#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <array>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <exception>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "specdec/cpu/kernels.hpp"
#include "specdec/model/gguf_writer.hpp"
#include "specdec/model/llama_schema.hpp"
#include "specdec/model/quant_mix.hpp"
#include "specdec/model/quants.hpp"
#include "specdec/model/weights.hpp"

namespace {

using specdec::DType;

struct Shape {
  const char* name;
  const char* architecture;  // general.architecture, and the prefix of the metadata keys
  std::uint64_t vocab, dim, layers, heads, kv_heads, ffn, context;
  double rms_eps, rope_base;
  bool qkv_bias;  // attn_q/k/v.bias tensors (Qwen2)
  bool tied;      // no output.weight: the head is token_embd (Qwen2.5 up to 3B)
};

constexpr std::array shapes = {
    Shape{"tinyllama-1.1b", "llama", 32000, 2048, 22, 32, 4, 5632, 2048, 1e-5, 1e4, false, false},
    Shape{"llama-68m", "llama", 32000, 768, 2, 12, 12, 3072, 2048, 1e-6, 1e4, false, false},
    Shape{"qwen2.5-1.5b", "qwen2", 151936, 1536, 28, 12, 2, 8960, 32768, 1e-6, 1e6, true, true},
    Shape{"qwen2.5-0.5b", "qwen2", 151936, 896, 24, 14, 2, 4864, 32768, 1e-6, 1e6, true, true},
};

/// The type llama-quantize's recipe gives a tensor of this random llama under `preset`.
DType recipe_type(const specdec::QuantPreset& preset, const Shape& s, const std::string& name,
                  const std::vector<std::uint64_t>& shape) {
  const specdec::MixModel model{s.architecture, static_cast<std::uint32_t>(s.layers),
                                static_cast<std::uint32_t>(s.heads),
                                static_cast<std::uint32_t>(s.kv_heads), !s.tied};
  return specdec::quant_mix_type(preset, model, {name, shape.size(), shape.back(), DType::f32});
}

struct TensorPlan {
  std::string name;
  std::vector<std::uint64_t> shape;  // outermost first
  DType dtype;
  float scale;  // values uniform in [-scale, scale]; 0 means all ones (norm weights)
  std::uint64_t offset = 0;
};

/// Bytes of one row of `cols` elements (whole blocks for Q8_0).
std::uint64_t row_bytes(DType t, std::uint64_t cols) {
  return cols / specdec::dtype_block_elems(t) * specdec::dtype_block_bytes(t);
}

/// A splitmix64 stream: fast and good enough for weights nobody reads for their values.
struct Random {
  static constexpr std::uint64_t step = 0x9e3779b97f4a7c15ull;  // the state's increment per value
  std::uint64_t state;
  float uniform() {  // [-1, 1)
    std::uint64_t z = (state += step);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    z ^= z >> 31;
    return static_cast<float>(z >> 40) * (2.0f / 16777216.0f) - 1.0f;
  }
};

class Output {
 public:
  explicit Output(const std::string& path) : path_(path), f_(std::fopen(path.c_str(), "wb")) {
    if (f_ == nullptr) throw specdec::Error(fmt::format("{}: cannot open for writing", path));
  }
  ~Output() {
    if (f_ != nullptr) std::fclose(f_);
  }
  Output(const Output&) = delete;
  Output& operator=(const Output&) = delete;
  void raw(const void* p, std::size_t n) {
    if (std::fwrite(p, 1, n, f_) != n) throw specdec::Error(fmt::format("{}: write failed", path_));
    written_ += n;
  }
  template <class T>
  void put(T v) {
    raw(&v, sizeof v);
  }
  void str(const std::string& s) {
    put<std::uint64_t>(s.size());
    raw(s.data(), s.size());
  }
  void pad_to(std::uint64_t alignment) {
    static const std::array<char, 64> zeros{};
    while (written_ % alignment != 0)
      raw(zeros.data(), std::min<std::uint64_t>(alignment - written_ % alignment, 64));
  }
  void close() {
    if (std::fclose(f_) != 0) throw specdec::Error(fmt::format("{}: close failed", path_));
    f_ = nullptr;
  }
  [[nodiscard]] std::uint64_t written() const { return written_; }

 private:
  std::string path_;
  std::FILE* f_;
  std::uint64_t written_ = 0;
};

void write_model(const Shape& s, const specdec::QuantPreset& preset, const std::string& path,
                 std::uint64_t seed) {
  const std::uint64_t head_dim = s.dim / s.heads;
  auto uniform_scale = [](std::uint64_t fan_in) {
    return std::sqrt(3.0f / static_cast<float>(fan_in));
  };
  std::vector<TensorPlan> tensors;
  // Every tensor in the type the preset's recipe gives it (norms: F32).
  const auto add = [&](std::string name, std::vector<std::uint64_t> shape, float scale) {
    const DType type = recipe_type(preset, s, name, shape);
    tensors.push_back({std::move(name), std::move(shape), type, scale});
  };
  // Every tensor the Llama-family schema gives this config, in its order (global ones first).
  specdec::ModelConfig c;
  c.vocab_size = s.vocab;
  c.dim = s.dim;
  c.n_layers = s.layers;
  c.n_heads = s.heads;
  c.n_kv_heads = s.kv_heads;
  c.head_dim = head_dim;
  c.ffn_dim = s.ffn;
  c.qkv_bias = s.qkv_bias;
  c.tied_embeddings = s.tied;
  specdec::for_each_llama_tensor(c, [&](const specdec::LlamaTensorSpec& spec, std::size_t layer) {
    const bool bias = spec.gguf.ends_with(".bias");
    // Matrices: variance 1 / fan-in (the embedding: unit scale); norm weights: ones; biases 0.1.
    const float scale = spec.is_matrix() ? (spec.id == specdec::LlamaTensor::token_embd
                                                ? 1.0f
                                                : uniform_scale(specdec::extent_size(spec.cols, c)))
                        : bias           ? 0.1f
                                         : 0.0f;
    add(specdec::gguf_tensor_name(spec.id, layer), specdec::expected_shape(spec, c), scale);
  });
  constexpr std::uint64_t alignment = 32;
  std::uint64_t offset = 0;
  for (TensorPlan& t : tensors) {
    t.offset = offset;
    const std::uint64_t rows = t.shape.size() == 2 ? t.shape[0] : 1;
    offset += (rows * row_bytes(t.dtype, t.shape.back()) + alignment - 1) / alignment * alignment;
  }

  Output out(path);
  out.raw("GGUF", 4);
  out.put<std::uint32_t>(3);
  out.put<std::uint64_t>(tensors.size());
  const std::uint32_t u32 = 4, f32 = 6, string = 8;
  struct Kv {
    std::string key;
    std::uint32_t type;
    std::uint64_t u;
    double f;
    std::string s;
  };
  const std::uint32_t file_type = preset.file_type;  // llama_ftype, as llama-quantize sets it
  const std::string arch = s.architecture;
  const std::vector<Kv> kvs = {
      {"general.architecture", string, 0, 0, arch},
      {"general.name", string, 0, 0, fmt::format("random {} {}", s.name, preset.name)},
      {"general.file_type", u32, file_type, 0, ""},
      {arch + ".vocab_size", u32, s.vocab, 0, ""},
      {arch + ".context_length", u32, s.context, 0, ""},
      {arch + ".embedding_length", u32, s.dim, 0, ""},
      {arch + ".block_count", u32, s.layers, 0, ""},
      {arch + ".feed_forward_length", u32, s.ffn, 0, ""},
      {arch + ".attention.head_count", u32, s.heads, 0, ""},
      {arch + ".attention.head_count_kv", u32, s.kv_heads, 0, ""},
      {arch + ".rope.dimension_count", u32, head_dim, 0, ""},
      {arch + ".rope.freq_base", f32, 0, s.rope_base, ""},
      {arch + ".attention.layer_norm_rms_epsilon", f32, 0, s.rms_eps, ""},
  };
  out.put<std::uint64_t>(kvs.size());
  for (const Kv& kv : kvs) {
    out.str(kv.key);
    out.put(kv.type);
    if (kv.type == u32) out.put(static_cast<std::uint32_t>(kv.u));
    if (kv.type == f32) out.put(static_cast<float>(kv.f));
    if (kv.type == string) out.str(kv.s);
  }
  for (const TensorPlan& t : tensors) {
    out.str(t.name);
    out.put<std::uint32_t>(static_cast<std::uint32_t>(t.shape.size()));
    for (auto it = t.shape.rbegin(); it != t.shape.rend(); ++it)
      out.put<std::uint64_t>(*it);  // ne[]: innermost first
    out.put(specdec::ggml_type_of(t.dtype));
    out.put(t.offset);
  }
  out.pad_to(alignment);
  const std::uint64_t data_start = out.written();

  // The rows of a tensor are drawn and quantised by all CPUs, a chunk of at most 64 MiB at a time,
  // and written in order. The splitmix64 stream is a counter (its n-th value is a function of
  // seed + n steps), so each row starts at a known state and the file is the same bytes whatever
  // the number of threads.
  const unsigned threads = std::max(1u, std::thread::hardware_concurrency());
  std::uint64_t drawn = 0;  // values drawn for the tensors before this one
  for (const TensorPlan& t : tensors) {
    const std::uint64_t rows = t.shape.size() == 2 ? t.shape[0] : 1, cols = t.shape.back();
    const std::uint64_t bytes = row_bytes(t.dtype, cols);
    const std::uint64_t chunk = std::clamp<std::uint64_t>((64u << 20) / bytes, 1, rows);
    std::vector<std::byte> encoded(chunk * bytes);
    for (std::uint64_t first = 0; first < rows; first += chunk) {
      const std::uint64_t n = std::min(chunk, rows - first);
      std::vector<std::thread> workers;
      std::vector<std::exception_ptr> errors(threads);
      for (unsigned w = 0; w < threads; ++w)
        workers.emplace_back([&, w] {
          try {
            std::vector<float> row(cols);
            for (std::uint64_t r = w; r < n; r += threads) {
              Random random{seed + (drawn + (first + r) * cols) * Random::step};
              for (float& v : row) v = t.scale == 0.0f ? 1.0f : t.scale * random.uniform();
              specdec::quant::quantize(t.dtype, row, std::span(encoded).subspan(r * bytes, bytes));
            }
          } catch (...) {
            errors[w] = std::current_exception();
          }
        });
      for (std::thread& worker : workers) worker.join();
      for (const std::exception_ptr& e : errors)
        if (e) std::rethrow_exception(e);
      out.raw(encoded.data(), n * bytes);
    }
    if (t.scale != 0.0f) drawn += rows * cols;
    out.pad_to(alignment);
    if (out.written() - data_start != (&t == &tensors.back() ? offset : (&t + 1)->offset))
      throw specdec::Error(
          fmt::format("{}: internal error: {} ends at the wrong offset", path, t.name));
  }
  out.close();
  fmt::print("{}: {} tensors, {:.1f} MB ({} {})\n", path, tensors.size(),
             static_cast<double>(out.written()) / 1e6, s.name, preset.name);
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Writes a random-weight GGUF model with a real model's shapes (for benchmarks)"};
  std::string shape_name = "tinyllama-1.1b", type_name = "bf16", path;
  std::uint64_t seed = 1;
  app.add_option("--shape", shape_name, "tinyllama-1.1b, llama-68m, qwen2.5-1.5b or qwen2.5-0.5b")
      ->capture_default_str();
  app.add_option("--type", type_name,
                 "a llama.cpp preset: f32, f16, bf16, q8_0, q4_0, q4_k_m, q5_k_m, q6_k, ...")
      ->capture_default_str();
  app.add_option("--out", path, "the .gguf file to write")->required();
  app.add_option("--seed", seed, "random seed")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  try {
    const Shape* shape = nullptr;
    for (const Shape& s : shapes)
      if (shape_name == s.name) shape = &s;
    if (shape == nullptr)
      throw specdec::Error(fmt::format(
          "--shape {}: expected tinyllama-1.1b, llama-68m, qwen2.5-1.5b or qwen2.5-0.5b",
          shape_name));
    const specdec::QuantPreset* preset = specdec::find_quant_preset(type_name);
    if (preset == nullptr)
      throw specdec::Error(
          fmt::format("--type {}: expected one of {}", type_name, specdec::quant_preset_names()));
    write_model(*shape, *preset, path, seed);
  } catch (const std::exception& e) {
    fmt::print(stderr, "make_random_gguf: {}\n", e.what());
    return 1;
  }
  return 0;
}
