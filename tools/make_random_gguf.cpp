// make_random_gguf: writes a GGUF v3 file with random weights and the shapes of a real model, for
// timing the CPU backend (weights do not change timings; shapes and dtypes do).
//
//   make_random_gguf --shape tinyllama-1.1b --type bf16 --out /work/scratch/models/target-bf16.gguf
//
// Shapes: tinyllama-1.1b (dim 2048, 22 layers, 32 heads, 4 KV heads, FFN 5632, vocab 32000) and
// llama-68m (dim 768, 2 layers, 12 heads, FFN 3072, vocab 32000). Types: any DType (f32, f16,
// bf16, q4_0 ... q8_0, q2_k ... q6_k, iq4_nl, iq4_xs) for every matrix, the embedding and the
// output head; norms in F32, as llama.cpp's quantizer leaves them. The file is streamed tensor by
// tensor, so a 4.4 GB F32 model needs only one row of memory. Float weights are uniform with
// variance 1 / fan-in (unit-scale activations, no denormals that could slow the arithmetic
// down); quantised ones are random blocks of the same magnitude (random_blocks()).
#include <fmt/format.h>
#include <CLI/CLI.hpp>

#include <array>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <cstring>
#include <optional>
#include <string>
#include <vector>

#include "specdec/cpu/kernels.hpp"
#include "specdec/model/gguf_writer.hpp"
#include "specdec/model/quants.hpp"
#include "specdec/model/random_blocks.hpp"
#include "specdec/model/weights.hpp"

namespace {

using specdec::DType;

struct Shape {
  const char* name;
  std::uint64_t vocab, dim, layers, heads, kv_heads, ffn, context;
  double rms_eps;
};

constexpr std::array shapes = {
    Shape{"tinyllama-1.1b", 32000, 2048, 22, 32, 4, 5632, 2048, 1e-5},
    Shape{"llama-68m", 32000, 768, 2, 12, 12, 3072, 2048, 1e-6},
};

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
  std::uint64_t state;
  std::uint64_t next() {
    std::uint64_t z = (state += 0x9e3779b97f4a7c15ull);
    z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
    z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
    return z ^ (z >> 31);
  }
  float uniform() {  // [-1, 1)
    return static_cast<float>(next() >> 40) * (2.0f / 16777216.0f) - 1.0f;
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

/// llama.cpp's general.file_type of a model whose matrices are all `type` (llama_ftype; the
/// K-quants as their _S variant, which is mostly that type).
std::uint32_t llama_file_type(DType type) {
  switch (type) {
    case DType::f32:
      return 0;
    case DType::f16:
      return 1;
    case DType::q4_0:
      return 2;
    case DType::q4_1:
      return 3;
    case DType::q8_0:
      return 7;
    case DType::q5_0:
      return 8;
    case DType::q5_1:
      return 9;
    case DType::q2_k:
      return 10;
    case DType::q3_k:
      return 11;
    case DType::q4_k:
      return 14;
    case DType::q5_k:
      return 16;
    case DType::q6_k:
      return 18;
    case DType::iq4_nl:
      return 25;
    case DType::iq4_xs:
      return 30;
    case DType::bf16:
      return 32;
  }
  return 0;
}

void write_model(const Shape& s, DType type, const std::string& path, std::uint64_t seed) {
  const std::uint64_t head_dim = s.dim / s.heads, kv_dim = s.kv_heads * head_dim;
  auto uniform_scale = [](std::uint64_t fan_in) {
    return std::sqrt(3.0f / static_cast<float>(fan_in));
  };
  std::vector<TensorPlan> tensors;
  tensors.push_back({"token_embd.weight", {s.vocab, s.dim}, type, 1.0f});
  tensors.push_back({"output_norm.weight", {s.dim}, DType::f32, 0.0f});
  tensors.push_back({"output.weight", {s.vocab, s.dim}, type, uniform_scale(s.dim)});
  for (std::uint64_t i = 0; i < s.layers; ++i) {
    const std::string p = fmt::format("blk.{}.", i);
    tensors.push_back({p + "attn_norm.weight", {s.dim}, DType::f32, 0.0f});
    tensors.push_back({p + "attn_q.weight", {s.dim, s.dim}, type, uniform_scale(s.dim)});
    tensors.push_back({p + "attn_k.weight", {kv_dim, s.dim}, type, uniform_scale(s.dim)});
    tensors.push_back({p + "attn_v.weight", {kv_dim, s.dim}, type, uniform_scale(s.dim)});
    tensors.push_back({p + "attn_output.weight", {s.dim, s.dim}, type, uniform_scale(s.dim)});
    tensors.push_back({p + "ffn_norm.weight", {s.dim}, DType::f32, 0.0f});
    tensors.push_back({p + "ffn_gate.weight", {s.ffn, s.dim}, type, uniform_scale(s.dim)});
    tensors.push_back({p + "ffn_up.weight", {s.ffn, s.dim}, type, uniform_scale(s.dim)});
    tensors.push_back({p + "ffn_down.weight", {s.dim, s.ffn}, type, uniform_scale(s.ffn)});
  }
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
  const std::uint32_t file_type = llama_file_type(type);
  const std::vector<Kv> kvs = {
      {"general.architecture", string, 0, 0, "llama"},
      {"general.name", string, 0, 0,
       fmt::format("random {} {}", s.name, specdec::dtype_name(type))},
      {"general.file_type", u32, file_type, 0, ""},
      {"llama.vocab_size", u32, s.vocab, 0, ""},
      {"llama.context_length", u32, s.context, 0, ""},
      {"llama.embedding_length", u32, s.dim, 0, ""},
      {"llama.block_count", u32, s.layers, 0, ""},
      {"llama.feed_forward_length", u32, s.ffn, 0, ""},
      {"llama.attention.head_count", u32, s.heads, 0, ""},
      {"llama.attention.head_count_kv", u32, s.kv_heads, 0, ""},
      {"llama.rope.dimension_count", u32, head_dim, 0, ""},
      {"llama.rope.freq_base", f32, 0, 10000.0, ""},
      {"llama.attention.layer_norm_rms_epsilon", f32, 0, s.rms_eps, ""},
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

  std::vector<float> row;
  std::vector<std::byte> encoded;
  Random random{seed};
  for (const TensorPlan& t : tensors) {
    const std::uint64_t rows = t.shape.size() == 2 ? t.shape[0] : 1, cols = t.shape.back();
    row.resize(cols);
    encoded.resize(row_bytes(t.dtype, cols));
    for (std::uint64_t r = 0; r < rows; ++r) {
      if (t.scale != 0.0f && !specdec::is_float_dtype(t.dtype)) {
        specdec::random_blocks(t.dtype, encoded, random.next(), t.scale);
      } else {
        for (float& v : row) v = t.scale == 0.0f ? 1.0f : t.scale * random.uniform();
        specdec::quant::quantize(t.dtype, row, encoded);
      }
      out.raw(encoded.data(), encoded.size());
    }
    out.pad_to(alignment);
    if (out.written() - data_start != (&t == &tensors.back() ? offset : (&t + 1)->offset))
      throw specdec::Error(
          fmt::format("{}: internal error: {} ends at the wrong offset", path, t.name));
  }
  out.close();
  fmt::print("{}: {} tensors, {:.1f} MB ({} {})\n", path, tensors.size(),
             static_cast<double>(out.written()) / 1e6, s.name, specdec::dtype_name(type));
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Writes a random-weight GGUF model with a real model's shapes (for benchmarks)"};
  std::string shape_name = "tinyllama-1.1b", type_name = "bf16", path;
  std::uint64_t seed = 1;
  app.add_option("--shape", shape_name, "tinyllama-1.1b or llama-68m")->capture_default_str();
  app.add_option("--type", type_name,
                 "the weight type of every matrix: f32, f16, bf16, q4_0, q4_1, q5_0, q5_1, q8_0, "
                 "q2_k, q3_k, q4_k, q5_k, q6_k, iq4_nl or iq4_xs")
      ->capture_default_str();
  app.add_option("--out", path, "the .gguf file to write")->required();
  app.add_option("--seed", seed, "random seed")->capture_default_str();
  CLI11_PARSE(app, argc, argv);
  try {
    const Shape* shape = nullptr;
    for (const Shape& s : shapes)
      if (shape_name == s.name) shape = &s;
    if (shape == nullptr)
      throw specdec::Error(
          fmt::format("--shape {}: expected tinyllama-1.1b or llama-68m", shape_name));
    const std::optional<DType> type = specdec::parse_dtype(type_name);
    if (!type)
      throw specdec::Error(fmt::format("--type {}: expected one of {}", type_name,
                                       specdec::supported_dtype_names()));
    write_model(*shape, *type, path, seed);
  } catch (const std::exception& e) {
    fmt::print(stderr, "make_random_gguf: {}\n", e.what());
    return 1;
  }
  return 0;
}
