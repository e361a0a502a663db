#pragma once
// Writers of small GGUF and safetensors byte buffers for the malformed-file tests (and the fuzzer
// seed corpus). They can write what no real writer would: any magic, version, count, type, shape
// or offset, so that each corruption is one field changed from a valid file.

#include <cstddef>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <optional>
#include <random>
#include <string>
#include <string_view>
#include <vector>

#include <nlohmann/json.hpp>

#include "specdec/model/llama_schema.hpp"

namespace specdec::test {

using Bytes = std::vector<std::byte>;

inline void put_raw(Bytes& out, const void* p, std::size_t n) {
  const auto* b = static_cast<const std::byte*>(p);
  out.insert(out.end(), b, b + n);
}
template <class T>
void put(Bytes& out, T v) {
  put_raw(out, &v, sizeof v);
}
inline void put_string(Bytes& out, std::string_view s) {
  put<std::uint64_t>(out, s.size());
  put_raw(out, s.data(), s.size());
}

inline Bytes f32_bytes(const std::vector<float>& v) {
  Bytes b;
  put_raw(b, v.data(), v.size() * sizeof(float));
  return b;
}

/// n floats, distinct per seed, so that a mixed-up tensor is noticed.
inline std::vector<float> some_floats(std::size_t n, unsigned seed) {
  std::mt19937 rng(seed);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  std::vector<float> v(n);
  for (auto& x : v) x = u(rng);
  return v;
}

// GGUF value type ids (gguf_type).
enum GgufTypeId : std::uint32_t {
  kU8 = 0,
  kI8 = 1,
  kU16 = 2,
  kI16 = 3,
  kU32 = 4,
  kI32 = 5,
  kF32 = 6,
  kBool = 7,
  kString = 8,
  kArray = 9,
  kU64 = 10,
  kI64 = 11,
  kF64 = 12,
};
// ggml tensor type ids.
enum GgmlTypeId : std::uint32_t {
  kGgmlF32 = 0,
  kGgmlF16 = 1,
  kGgmlQ4_0 = 2,
  kGgmlQ8_0 = 8,
  kGgmlQ6_K = 14,
  kGgmlIQ2_XS = 17,  // known to ggml, not computed by specdec
};

class GgufWriter {
 public:
  struct Kv {
    std::string key;
    std::uint32_t type;
    Bytes value;  // encoded value (for arrays: element type, count, elements)
  };
  struct TensorSpec {
    std::string name;
    std::uint32_t type = kGgmlF32;
    std::vector<std::uint64_t> shape;     // outermost first; written reversed as ne[]
    Bytes data;                           // written at `offset` unless write_data is false
    std::optional<std::uint64_t> offset;  // default: next aligned position after the previous one
    bool write_data = true;
  };

  char magic[4] = {'G', 'G', 'U', 'F'};
  std::uint32_t version = 3;
  std::uint64_t alignment = 32;  // layout only; add general.alignment yourself to declare another
  std::optional<std::uint64_t> tensor_count;    // override of the header field
  std::optional<std::uint64_t> metadata_count;  // override of the header field
  std::vector<Kv> kvs;
  std::vector<TensorSpec> tensors;

  void kv(std::string key, std::uint32_t type, Bytes value) {
    kvs.push_back({std::move(key), type, std::move(value)});
  }
  template <class T>
  void kv_scalar(std::string key, std::uint32_t type, T v) {
    Bytes b;
    put(b, v);
    kv(std::move(key), type, std::move(b));
  }
  void kv_u32(std::string key, std::uint32_t v) { kv_scalar(std::move(key), kU32, v); }
  void kv_f32(std::string key, float v) { kv_scalar(std::move(key), kF32, v); }
  void kv_bool(std::string key, bool v) { kv_scalar(std::move(key), kBool, std::uint8_t{v}); }
  void kv_string(std::string key, std::string_view v) {
    Bytes b;
    put_string(b, v);
    kv(std::move(key), kString, std::move(b));
  }
  void kv_strings(std::string key, const std::vector<std::string>& v) {
    Bytes b;
    put<std::uint32_t>(b, kString);
    put<std::uint64_t>(b, v.size());
    for (const auto& s : v) put_string(b, s);
    kv(std::move(key), kArray, std::move(b));
  }
  void kv_f32s(std::string key, const std::vector<float>& v) {
    Bytes b;
    put<std::uint32_t>(b, kF32);
    put<std::uint64_t>(b, v.size());
    put_raw(b, v.data(), v.size() * 4);
    kv(std::move(key), kArray, std::move(b));
  }
  void kv_i32s(std::string key, const std::vector<std::int32_t>& v) {
    Bytes b;
    put<std::uint32_t>(b, kI32);
    put<std::uint64_t>(b, v.size());
    put_raw(b, v.data(), v.size() * 4);
    kv(std::move(key), kArray, std::move(b));
  }
  Kv* find_kv(std::string_view key) {
    for (auto& k : kvs)
      if (k.key == key) return &k;
    return nullptr;
  }
  void remove_kv(std::string_view key) {
    std::erase_if(kvs, [&](const Kv& k) { return k.key == key; });
  }

  void f32_tensor(std::string name, std::vector<std::uint64_t> shape, unsigned seed) {
    std::size_t n = 1;
    for (auto d : shape) n *= d;
    tensors.push_back(
        {std::move(name), kGgmlF32, std::move(shape), f32_bytes(some_floats(n, seed)), {}, true});
  }
  TensorSpec* find_tensor(std::string_view name) {
    for (auto& t : tensors)
      if (t.name == name) return &t;
    return nullptr;
  }
  void remove_tensor(std::string_view name) {
    std::erase_if(tensors, [&](const TensorSpec& t) { return t.name == name; });
  }

  [[nodiscard]] Bytes build() const {
    Bytes out;
    put_raw(out, magic, 4);
    put<std::uint32_t>(out, version);
    put<std::uint64_t>(out, tensor_count.value_or(tensors.size()));
    put<std::uint64_t>(out, metadata_count.value_or(kvs.size()));
    for (const auto& k : kvs) {
      put_string(out, k.key);
      put<std::uint32_t>(out, k.type);
      out.insert(out.end(), k.value.begin(), k.value.end());
    }
    std::vector<std::uint64_t> offsets;
    std::uint64_t next = 0;
    for (const auto& t : tensors) {
      const std::uint64_t offset = t.offset.value_or(next);
      offsets.push_back(offset);
      next = align(offset + t.data.size());
      put_string(out, t.name);
      put<std::uint32_t>(out, static_cast<std::uint32_t>(t.shape.size()));
      for (auto it = t.shape.rbegin(); it != t.shape.rend(); ++it) put<std::uint64_t>(out, *it);
      put<std::uint32_t>(out, t.type);
      put<std::uint64_t>(out, offset);
    }
    const std::uint64_t data_start = align(out.size());
    for (std::size_t i = 0; i < tensors.size(); ++i) {
      if (!tensors[i].write_data) continue;
      const std::uint64_t at = data_start + offsets[i];
      if (out.size() < at + tensors[i].data.size()) out.resize(at + tensors[i].data.size());
      std::memcpy(out.data() + at, tensors[i].data.data(), tensors[i].data.size());
    }
    return out;
  }

 private:
  [[nodiscard]] std::uint64_t align(std::uint64_t x) const {
    return (x + alignment - 1) / alignment * alignment;
  }
};

/// Hyper-parameters of the small models the tests write (valid for llama, qwen2 and qwen3).
struct TinyModel {
  std::string arch = "llama";
  std::uint64_t vocab = 16, dim = 8, layers = 2, heads = 2, kv_heads = 1, head_dim = 4, ffn = 16,
                context = 32;
  bool tied = false;
  bool qkv_bias = false;   // qwen2
  bool qk_norm = false;    // qwen3
  bool tokenizer = false;  // tokenizer.ggml.* keys of a toy SentencePiece vocabulary
};

/// The (GGUF name, shape) of every tensor of a TinyModel, in the order a converter writes them.
/// Written out here rather than read from kLlamaTensors on purpose: the loader's tests hold the
/// schema's names and shapes against this independent list (and test_llama_schema holds the names
/// against llama.cpp's gguf-py).
inline std::vector<std::pair<std::string, std::vector<std::uint64_t>>> tiny_tensor_shapes(
    const TinyModel& m) {
  const std::uint64_t q = m.heads * m.head_dim, kv = m.kv_heads * m.head_dim;
  std::vector<std::pair<std::string, std::vector<std::uint64_t>>> out = {
      {"token_embd.weight", {m.vocab, m.dim}}};
  for (std::uint64_t i = 0; i < m.layers; ++i) {
    const std::string b = "blk." + std::to_string(i) + ".";
    out.push_back({b + "attn_norm.weight", {m.dim}});
    out.push_back({b + "attn_q.weight", {q, m.dim}});
    out.push_back({b + "attn_k.weight", {kv, m.dim}});
    out.push_back({b + "attn_v.weight", {kv, m.dim}});
    if (m.qkv_bias) {
      out.push_back({b + "attn_q.bias", {q}});
      out.push_back({b + "attn_k.bias", {kv}});
      out.push_back({b + "attn_v.bias", {kv}});
    }
    if (m.qk_norm) {
      out.push_back({b + "attn_q_norm.weight", {m.head_dim}});
      out.push_back({b + "attn_k_norm.weight", {m.head_dim}});
    }
    out.push_back({b + "attn_output.weight", {m.dim, q}});
    out.push_back({b + "ffn_norm.weight", {m.dim}});
    out.push_back({b + "ffn_gate.weight", {m.ffn, m.dim}});
    out.push_back({b + "ffn_up.weight", {m.ffn, m.dim}});
    out.push_back({b + "ffn_down.weight", {m.dim, m.ffn}});
  }
  out.push_back({"output_norm.weight", {m.dim}});
  if (!m.tied) out.push_back({"output.weight", {m.vocab, m.dim}});
  return out;
}

/// A valid GGUF writer for a TinyModel (F32 tensors of some_floats); tests then corrupt it.
inline GgufWriter tiny_gguf(const TinyModel& m) {
  GgufWriter w;
  const std::string a = m.arch + ".";
  w.kv_string("general.architecture", m.arch);
  w.kv_string("general.name", "tiny-" + m.arch);
  w.kv_u32(a + "context_length", static_cast<std::uint32_t>(m.context));
  w.kv_u32(a + "embedding_length", static_cast<std::uint32_t>(m.dim));
  w.kv_u32(a + "block_count", static_cast<std::uint32_t>(m.layers));
  w.kv_u32(a + "feed_forward_length", static_cast<std::uint32_t>(m.ffn));
  w.kv_u32(a + "attention.head_count", static_cast<std::uint32_t>(m.heads));
  w.kv_u32(a + "attention.head_count_kv", static_cast<std::uint32_t>(m.kv_heads));
  if (m.head_dim * m.heads != m.dim)
    w.kv_u32(a + "attention.key_length", static_cast<std::uint32_t>(m.head_dim));
  w.kv_f32(a + "rope.freq_base", 10000.0f);
  w.kv_f32(a + "attention.layer_norm_rms_epsilon", 1e-5f);
  if (m.tokenizer) {
    // A toy SentencePiece vocabulary: <unk> <s> </s>, the 256 byte tokens would not fit in 16,
    // so: a few pieces. Enough for the loader to build a tokenizer.
    std::vector<std::string> tokens = {"<unk>", "<s>", "</s>"};
    const char* pieces[] = {"\xE2\x96\x81",
                            "a",
                            "b",
                            "c",
                            "\xE2\x96\x81"
                            "a",
                            "ab",
                            "bc",
                            "abc",
                            "d",
                            "e",
                            "f",
                            "g",
                            "h"};
    for (std::size_t i = 0; tokens.size() < m.vocab; ++i)
      tokens.push_back(pieces[i % 13] + std::string(i / 13, 'x'));
    std::vector<float> scores(tokens.size());
    std::vector<std::int32_t> types(tokens.size(), 1);
    types[0] = 2;
    types[1] = types[2] = 3;
    for (std::size_t i = 0; i < scores.size(); ++i) scores[i] = -static_cast<float>(i);
    w.kv_string("tokenizer.ggml.model", "llama");
    w.kv_strings("tokenizer.ggml.tokens", tokens);
    w.kv_f32s("tokenizer.ggml.scores", scores);
    w.kv_i32s("tokenizer.ggml.token_type", types);
    w.kv_u32("tokenizer.ggml.bos_token_id", 1);
    w.kv_u32("tokenizer.ggml.eos_token_id", 2);
    w.kv_u32("tokenizer.ggml.unknown_token_id", 0);
  }
  unsigned seed = 1;
  for (const auto& [name, shape] : tiny_tensor_shapes(m)) w.f32_tensor(name, shape, seed++);
  return w;
}

/// safetensors: a JSON header and tensor bytes appended in order, like the reference writer
/// (which pads the header with spaces to a multiple of 8).
class SafetensorsWriter {
 public:
  nlohmann::ordered_json header = nlohmann::ordered_json::object();
  Bytes data;

  void tensor(const std::string& name, const std::string& dtype, std::vector<std::uint64_t> shape,
              const Bytes& bytes) {
    const std::uint64_t begin = data.size();
    data.insert(data.end(), bytes.begin(), bytes.end());
    header[name] = {{"dtype", dtype}, {"shape", shape}, {"data_offsets", {begin, data.size()}}};
  }
  void f32_tensor(const std::string& name, std::vector<std::uint64_t> shape, unsigned seed) {
    std::size_t n = 1;
    for (auto d : shape) n *= d;
    tensor(name, "F32", std::move(shape), f32_bytes(some_floats(n, seed)));
  }

  [[nodiscard]] Bytes build(bool pad_header = true) const {
    return build_with_header(header.dump(), pad_header);
  }
  [[nodiscard]] Bytes build_with_header(std::string text, bool pad_header = true) const {
    if (pad_header)
      while ((8 + text.size()) % 8 != 0) text += ' ';
    Bytes out;
    put<std::uint64_t>(out, text.size());
    put_raw(out, text.data(), text.size());
    out.insert(out.end(), data.begin(), data.end());
    return out;
  }
};

/// The Hugging Face name of a GGUF tensor name (inverse of specdec::hf_to_gguf_tensor_name), read
/// from the schema; names outside it are kept.
inline std::string hf_name(const std::string& gguf) {
  const auto named = specdec::parse_gguf_tensor_name(gguf);
  if (!named) return gguf;
  const std::string_view hf = named->spec->hf;
  return named->spec->per_layer
             ? "model.layers." + std::to_string(named->layer) + "." + std::string(hf)
             : std::string(hf);
}

/// config.json of a TinyModel as transformers < 5 writes it.
inline nlohmann::json tiny_hf_config(const TinyModel& m) {
  const char* cls = m.arch == "qwen2"     ? "Qwen2ForCausalLM"
                    : m.arch == "qwen3"   ? "Qwen3ForCausalLM"
                    : m.arch == "mistral" ? "MistralForCausalLM"
                                          : "LlamaForCausalLM";
  return {{"architectures", {cls}},
          {"model_type", m.arch},
          {"vocab_size", m.vocab},
          {"hidden_size", m.dim},
          {"intermediate_size", m.ffn},
          {"num_hidden_layers", m.layers},
          {"num_attention_heads", m.heads},
          {"num_key_value_heads", m.kv_heads},
          {"head_dim", m.head_dim},
          {"max_position_embeddings", m.context},
          {"rms_norm_eps", 1e-5},
          {"rope_theta", 10000.0},
          {"hidden_act", "silu"},
          {"tie_word_embeddings", m.tied},
          {"bos_token_id", 1},
          {"eos_token_id", 2}};
}

/// Safetensors bytes of a TinyModel under Hugging Face names.
inline SafetensorsWriter tiny_safetensors(const TinyModel& m) {
  SafetensorsWriter w;
  unsigned seed = 1;
  for (const auto& [name, shape] : tiny_tensor_shapes(m))
    w.f32_tensor(hf_name(name), shape, seed++);
  return w;
}

/// A fresh empty directory under the system temp folder, removed on destruction.
class TempDir {
 public:
  TempDir() {
    std::random_device rd;
    path_ = std::filesystem::temp_directory_path() /
            ("specdec-test-" + std::to_string(rd()) + std::to_string(rd()));
    std::filesystem::create_directories(path_);
  }
  ~TempDir() {
    std::error_code ec;
    std::filesystem::remove_all(path_, ec);
  }
  TempDir(const TempDir&) = delete;
  TempDir& operator=(const TempDir&) = delete;
  [[nodiscard]] const std::filesystem::path& path() const { return path_; }

 private:
  std::filesystem::path path_;
};

inline void write_file(const std::filesystem::path& path, const Bytes& bytes) {
  std::ofstream out(path, std::ios::binary);
  out.write(reinterpret_cast<const char*>(bytes.data()),
            static_cast<std::streamsize>(bytes.size()));
}
inline void write_file(const std::filesystem::path& path, std::string_view text) {
  std::ofstream out(path, std::ios::binary);
  out.write(text.data(), static_cast<std::streamsize>(text.size()));
}
inline Bytes read_file(const std::filesystem::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::string s((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  Bytes b(s.size());
  std::memcpy(b.data(), s.data(), s.size());
  return b;
}

}  // namespace specdec::test
