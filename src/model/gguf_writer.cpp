// GGUF v3 writer and the model conversion (specdec convert): see specdec/model/gguf_writer.hpp.
#include "specdec/model/gguf_writer.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <fstream>
#include <set>

#include <fmt/format.h>

#include "checked.hpp"
#include "specdec/model/quant_mix.hpp"
#include "specdec/model/quants.hpp"

namespace specdec {

// ------------------------------------------------------------------------ writer

namespace {

using Bytes = std::vector<std::byte>;

void put_raw(Bytes& out, const void* p, std::size_t n) {
  // resize + memcpy rather than insert(): GCC 12 reports a bogus -Wstringop-overflow for
  // vector<std::byte>::insert of a few bytes (a false positive).
  if (n == 0) return;
  const std::size_t at = out.size();
  out.resize(at + n);
  std::memcpy(out.data() + at, p, n);
}
template <class T>
void put(Bytes& out, T v) {
  put_raw(out, &v, sizeof v);
}
void put_string(Bytes& out, const std::string& s) {
  put<std::uint64_t>(out, s.size());
  put_raw(out, s.data(), s.size());
}
void pad_to(Bytes& out, std::uint64_t alignment) {
  out.resize(static_cast<std::size_t>(*detail::checked_align_up(out.size(), alignment)),
             std::byte{0});
}

/// Writes a value's payload in its declared type (the reader widened it; this narrows it back).
void put_value(Bytes& out, GgufType type, const GgufValue& v, const std::string& key) {
  const auto fail = [&] {
    throw Error(
        fmt::format("GgufWriter: metadata key '{}' does not hold a {}", key, gguf_type_name(type)));
  };
  const auto as_int = [&]() -> std::int64_t {
    if (const auto i = v.as_int()) return *i;
    if (const auto* u = std::get_if<std::uint64_t>(&v.value)) return static_cast<std::int64_t>(*u);
    fail();
    return 0;
  };
  switch (type) {
    case GgufType::uint8:
      put(out, static_cast<std::uint8_t>(as_int()));
      break;
    case GgufType::int8:
      put(out, static_cast<std::int8_t>(as_int()));
      break;
    case GgufType::uint16:
      put(out, static_cast<std::uint16_t>(as_int()));
      break;
    case GgufType::int16:
      put(out, static_cast<std::int16_t>(as_int()));
      break;
    case GgufType::uint32:
      put(out, static_cast<std::uint32_t>(as_int()));
      break;
    case GgufType::int32:
      put(out, static_cast<std::int32_t>(as_int()));
      break;
    case GgufType::uint64:
      put(out, static_cast<std::uint64_t>(as_int()));
      break;
    case GgufType::int64:
      put(out, as_int());
      break;
    case GgufType::float32:
    case GgufType::float64: {
      const auto f = v.as_float();
      if (!f) fail();
      if (type == GgufType::float32)
        put(out, static_cast<float>(*f));
      else
        put(out, *f);
      break;
    }
    case GgufType::boolean: {
      const auto b = v.as_bool();
      if (!b) fail();
      put<std::uint8_t>(out, *b ? 1 : 0);
      break;
    }
    case GgufType::string: {
      const std::string* s = v.as_string();
      if (s == nullptr) fail();
      put_string(out, *s);
      break;
    }
    case GgufType::array: {
      const GgufValue::Array* a = v.as_array();
      if (a == nullptr) fail();
      put(out, static_cast<std::uint32_t>(v.element_type));
      put<std::uint64_t>(out, a->size());
      for (const GgufValue& e : *a) put_value(out, v.element_type, e, key);
      break;
    }
  }
}

}  // namespace

GgufWriter::GgufWriter(std::uint64_t alignment) : alignment_(alignment) {
  if (alignment == 0 || (alignment & (alignment - 1)) != 0)
    throw Error(fmt::format("GgufWriter: alignment {} is not a power of two", alignment));
}

GgufValue GgufWriter::u32(std::uint32_t v) {
  GgufValue value;
  value.type = GgufType::uint32;
  value.value = std::uint64_t{v};
  return value;
}

GgufValue GgufWriter::str(std::string v) {
  GgufValue value;
  value.type = GgufType::string;
  value.value = std::move(v);
  return value;
}

void GgufWriter::set(const std::string& key, GgufValue value) {
  for (auto& [k, v] : metadata_)
    if (k == key) {
      v = std::move(value);
      return;
    }
  metadata_.emplace_back(key, std::move(value));
}

void GgufWriter::add_tensor(const std::string& name, DType dtype, std::vector<std::uint64_t> shape,
                            std::vector<std::byte> data) {
  for (const auto& t : tensors_)
    if (t.name == name) throw Error(fmt::format("GgufWriter: duplicate tensor '{}'", name));
  std::uint64_t elements = 1;
  for (const auto d : shape) elements *= d;
  const std::uint64_t cols = shape.empty() ? 1 : shape.back();
  if (cols % dtype_block_elems(dtype) != 0)
    throw Error(
        fmt::format("GgufWriter: tensor '{}': rows of {} values do not hold whole {} blocks", name,
                    cols, dtype_name(dtype)));
  const std::uint64_t expected = elements / dtype_block_elems(dtype) * dtype_block_bytes(dtype);
  if (data.size() != expected)
    throw Error(fmt::format("GgufWriter: tensor '{}' has {} bytes, its shape and type need {}",
                            name, data.size(), expected));
  tensors_.push_back({name, dtype, std::move(shape), std::move(data)});
}

std::vector<std::byte> GgufWriter::header() const {
  Bytes out;
  put_raw(out, "GGUF", 4);
  put<std::uint32_t>(out, 3);
  put<std::uint64_t>(out, tensors_.size());
  put<std::uint64_t>(out, metadata_.size());
  for (const auto& [key, value] : metadata_) {
    put_string(out, key);
    put(out, static_cast<std::uint32_t>(value.type));
    put_value(out, value.type, value, key);
  }
  // Tensor infos: ne[] innermost first (specdec's shapes are outermost first), offsets relative
  // to the data section, each rounded up to the alignment.
  std::uint64_t offset = 0;
  for (const auto& t : tensors_) {
    put_string(out, t.name);
    put(out, static_cast<std::uint32_t>(t.shape.size()));
    for (auto d = t.shape.rbegin(); d != t.shape.rend(); ++d) put<std::uint64_t>(out, *d);
    put(out, ggml_type_of(t.dtype));
    put<std::uint64_t>(out, offset);
    offset = *detail::checked_align_up(offset + t.data.size(), alignment_);
  }
  pad_to(out, alignment_);
  return out;
}

std::vector<std::byte> GgufWriter::bytes() const {
  Bytes out = header();
  for (const auto& t : tensors_) {
    put_raw(out, t.data.data(), t.data.size());
    pad_to(out, alignment_);
  }
  return out;
}

void GgufWriter::write(const std::string& path) const {
  // Header, then each tensor's bytes from where they are: no second copy of the whole file
  // (a 1.5B model's tensors are gigabytes).
  std::ofstream file(path, std::ios::binary | std::ios::trunc);
  if (!file) throw Error(fmt::format("{}: cannot open for writing", path));
  const auto put_bytes = [&](const std::byte* p, std::size_t n) {
    file.write(reinterpret_cast<const char*>(p), static_cast<std::streamsize>(n));
  };
  const Bytes head = header();
  put_bytes(head.data(), head.size());
  std::uint64_t written = head.size();
  const std::vector<std::byte> zeros(static_cast<std::size_t>(alignment_));
  for (const auto& t : tensors_) {
    put_bytes(t.data.data(), t.data.size());
    written += t.data.size();
    const std::uint64_t pad = *detail::checked_align_up(written, alignment_) - written;
    put_bytes(zeros.data(), static_cast<std::size_t>(pad));
    written += pad;
  }
  if (!file.flush()) throw Error(fmt::format("{}: write failed", path));
}

// ------------------------------------------------------------------------ model conversion

namespace {

/// The tensor's values as floats (any type specdec computes with; checked by the caller).
std::vector<float> to_f32(const GgufFile&, const GgufTensorInfo& t) {
  const std::size_t n = static_cast<std::size_t>(t.nbytes / dtype_block_bytes(*t.dtype) *
                                                 dtype_block_elems(*t.dtype));
  std::vector<float> out(n);
  dequantize(*t.dtype, t.data, out.data(), n);
  return out;
}

Bytes encode(const std::vector<float>& values, DType type) {
  Bytes out(values.size() / dtype_block_elems(type) * dtype_block_bytes(type));
  quant::quantize(type, values, out);
  return out;
}

/// What the recipe needs to know about the model: llama.cpp reads it from the {arch}.* keys;
/// a file without them (a test fixture) gets the layer count from its blk.N tensors.
MixModel mix_model(const GgufFile& g, std::string& architecture) {
  MixModel m;
  architecture = g.get_string("general.architecture").value_or("");
  m.architecture = architecture;
  const auto key = [&](const char* k) { return g.get_uint(fmt::format("{}.{}", architecture, k)); };
  int max_layer = -1;
  for (const auto& t : g.tensors) max_layer = std::max(max_layer, tensor_layer(t.name));
  m.layers = static_cast<std::uint32_t>(key("block_count").value_or(max_layer + 1));
  m.heads = static_cast<std::uint32_t>(key("attention.head_count").value_or(1));
  m.kv_heads = static_cast<std::uint32_t>(key("attention.head_count_kv").value_or(m.heads));
  m.has_output = g.find_tensor("output.weight") != nullptr;
  return m;
}

}  // namespace

ConvertReport convert_gguf(const std::string& in, const std::string& out, const QuantPreset& preset,
                           bool pure) {
  const GgufFile g = read_gguf(in);
  std::string architecture;
  const MixModel model = mix_model(g, architecture);

  // Every type first, so that a tensor the recipe would give an unwritable type fails before
  // any work is done.
  std::vector<DType> types;
  for (const GgufTensorInfo& t : g.tensors) {
    if (!t.dtype) {
      const char* type = ggml_type_name(t.ggml_type);
      g.fail(fmt::format("tensor '{}' is {}: convert reads {}", t.name, type ? type : "?",
                         supported_dtype_names()));
    }
    const MixTensor mt{t.name, t.shape.size(), t.shape.empty() ? 1 : t.shape.back(), *t.dtype};
    const DType to = quant_mix_type(preset, model, mt, pure);
    if (to != *t.dtype && !quant::can_quantize(to))
      g.fail(fmt::format("tensor '{}': the {} recipe gives it type {}, which specdec cannot write",
                         t.name, preset.name, dtype_name(to)));
    types.push_back(to);
  }

  GgufWriter writer(g.alignment);
  for (const auto& [key, value] : g.metadata) writer.set(key, value);
  // As llama-quantize: the preset's llama_ftype, and ggml's current quantisation version (2).
  writer.set("general.file_type", GgufWriter::u32(preset.file_type));
  writer.set("general.quantization_version", GgufWriter::u32(2));

  ConvertReport report;
  for (std::size_t i = 0; i < g.tensors.size(); ++i) {
    const GgufTensorInfo& t = g.tensors[i];
    const DType to = types[i];
    // A tensor already in its type is copied as it is (requantising would lose precision).
    Bytes data = to == *t.dtype ? Bytes(t.data, t.data + t.nbytes) : encode(to_f32(g, t), to);
    report.tensors.push_back({t.name, t.shape, *t.dtype, to, t.nbytes, data.size()});
    writer.add_tensor(t.name, to, t.shape, std::move(data));
  }
  writer.write(out);
  std::ifstream written(out, std::ios::binary | std::ios::ate);
  report.file_bytes = static_cast<std::uint64_t>(written.tellg());
  return report;
}

}  // namespace specdec
