// GGUF reader: see specdec/model/gguf.hpp for the layout. Parsing is a single forward pass over
// the bytes with a bounds-checked cursor; nothing is trusted until checked against the bytes
// that remain.
#include "specdec/model/gguf.hpp"

#include <algorithm>
#include <array>
#include <bit>
#include <cstring>
#include <limits>
#include <numeric>
#include <set>

#include <fmt/format.h>
#include <fmt/ranges.h>

#include "checked.hpp"

namespace specdec {

static_assert(std::endian::native == std::endian::little,
              "the GGUF reader assumes a little-endian host (as GGUF files are)");

namespace {

using detail::checked_add;
using detail::checked_align_up;
using detail::checked_mul;

// ------------------------------------------------------------------------ limits

constexpr int kMaxArrayNesting = 8;         // arrays of arrays: real files use at most 2 levels
constexpr std::size_t kMaxTensorName = 63;  // GGML_MAX_NAME (64) including the terminator
constexpr std::uint32_t kMaxDims = 4;       // GGML_MAX_DIMS
constexpr std::uint64_t kMaxAlignment = std::uint64_t{1} << 30;
// Metadata arrays are parsed into GgufValues (~48 bytes each): a budget of array elements per
// file keeps a file full of one-byte elements from needing 48x its size in RAM. The largest real
// tokenizers (256k tokens with scores, types and merges) use about a quarter of it.
constexpr std::uint64_t kMaxArrayElements = std::uint64_t{1} << 22;

// Smallest encoding of one value of each type, to bound counts by the bytes that remain.
std::uint64_t min_encoded_size(GgufType t) {
  switch (t) {
    case GgufType::uint8:
    case GgufType::int8:
    case GgufType::boolean:
      return 1;
    case GgufType::uint16:
    case GgufType::int16:
      return 2;
    case GgufType::uint32:
    case GgufType::int32:
    case GgufType::float32:
      return 4;
    case GgufType::uint64:
    case GgufType::int64:
    case GgufType::float64:
    case GgufType::string:  // u64 length
      return 8;
    case GgufType::array:  // u32 element type + u64 count
      return 12;
  }
  return 1;
}

bool is_known_type(std::uint32_t t) { return t <= static_cast<std::uint32_t>(GgufType::float64); }

// ------------------------------------------------------------------------ cursor

/// What is being read, for the truncation message: "value of metadata key 'general.name'".
/// Formatted only when the read fails (a tokenizer array has ~10^5 values).
struct Field {
  Field(const char* what) : kind(what) {}  // NOLINT: implicit from a literal on purpose
  Field(const char* what, std::string_view which) : kind(what), name(which) {}
  std::string_view kind;
  std::string_view name;
  [[nodiscard]] std::string str() const {
    return name.empty() ? std::string(kind) : fmt::format("{} '{}'", kind, name);
  }
};

class Cursor {
 public:
  Cursor(std::span<const std::byte> bytes, const std::string& name) : bytes_(bytes), name_(name) {}

  [[nodiscard]] std::uint64_t pos() const { return pos_; }
  [[nodiscard]] std::uint64_t remaining() const { return bytes_.size() - pos_; }

  [[noreturn]] void fail(const std::string& problem) const {
    throw Error(fmt::format("{}: {}", name_, problem));
  }

  void need(std::uint64_t n, const Field& what) const {
    if (n > remaining())
      fail(fmt::format("truncated file: {} at offset {} needs {} bytes, only {} left", what.str(),
                       pos_, n, remaining()));
  }

  template <class T>
  T read(const Field& what) {
    need(sizeof(T), what);
    T v;
    std::memcpy(&v, bytes_.data() + pos_, sizeof(T));
    pos_ += sizeof(T);
    return v;
  }

  /// Takes n elements from the file's array budget (see kMaxArrayElements).
  void spend_array_elements(std::uint64_t n, const std::string& key) {
    if (n > array_budget_)
      fail(fmt::format("metadata key '{}': metadata arrays hold more than {} elements in total",
                       key, kMaxArrayElements));
    array_budget_ -= n;
  }

  std::string read_string(const Field& what) {
    const auto len = read<std::uint64_t>(what);
    need(len, what);  // bounds the length by the bytes present before allocating
    std::string s(reinterpret_cast<const char*>(bytes_.data() + pos_),
                  static_cast<std::size_t>(len));
    pos_ += len;
    return s;
  }

 private:
  std::span<const std::byte> bytes_;
  const std::string& name_;
  std::uint64_t pos_ = 0;
  std::uint64_t array_budget_ = kMaxArrayElements;
};

GgufValue read_value(Cursor& in, GgufType type, const std::string& key, int depth) {
  GgufValue v;
  v.type = type;
  const Field what{"value of metadata key", key};
  switch (type) {
    case GgufType::uint8:
      v.value = std::uint64_t{in.read<std::uint8_t>(what)};
      break;
    case GgufType::int8:
      v.value = std::int64_t{in.read<std::int8_t>(what)};
      break;
    case GgufType::uint16:
      v.value = std::uint64_t{in.read<std::uint16_t>(what)};
      break;
    case GgufType::int16:
      v.value = std::int64_t{in.read<std::int16_t>(what)};
      break;
    case GgufType::uint32:
      v.value = std::uint64_t{in.read<std::uint32_t>(what)};
      break;
    case GgufType::int32:
      v.value = std::int64_t{in.read<std::int32_t>(what)};
      break;
    case GgufType::uint64:
      v.value = in.read<std::uint64_t>(what);
      break;
    case GgufType::int64:
      v.value = in.read<std::int64_t>(what);
      break;
    case GgufType::float32:
      v.value = double{in.read<float>(what)};
      break;
    case GgufType::float64:
      v.value = in.read<double>(what);
      break;
    case GgufType::boolean: {
      const auto b = in.read<std::uint8_t>(what);
      if (b > 1) in.fail(fmt::format("metadata key '{}': invalid bool value {}", key, b));
      v.value = b == 1;
      break;
    }
    case GgufType::string:
      v.value = in.read_string(what);
      break;
    case GgufType::array: {
      const auto elem = in.read<std::uint32_t>(what);
      if (!is_known_type(elem))
        in.fail(fmt::format("metadata key '{}': unknown array element type {}", key, elem));
      v.element_type = static_cast<GgufType>(elem);
      const auto count = in.read<std::uint64_t>(what);
      if (v.element_type == GgufType::array && depth + 1 >= kMaxArrayNesting)
        in.fail(fmt::format("metadata key '{}': arrays nested deeper than {} levels", key,
                            kMaxArrayNesting));
      // Every element takes at least min_encoded_size bytes: a count the rest of the file cannot
      // hold is rejected before anything is allocated for it.
      if (count > in.remaining() / min_encoded_size(v.element_type))
        in.fail(
            fmt::format("metadata key '{}': array of {} elements cannot fit in the {} bytes left",
                        key, count, in.remaining()));
      in.spend_array_elements(count, key);
      GgufValue::Array items;
      items.reserve(static_cast<std::size_t>(count));
      for (std::uint64_t i = 0; i < count; ++i)
        items.push_back(read_value(in, v.element_type, key, depth + 1));
      v.value = std::move(items);
      break;
    }
  }
  return v;
}

std::string shape_string(const std::vector<std::uint64_t>& shape) {
  return fmt::format("[{}]", fmt::join(shape, ", "));
}

}  // namespace

// ------------------------------------------------------------------------ public helpers

const char* gguf_type_name(GgufType t) noexcept {
  switch (t) {
    case GgufType::uint8:
      return "u8";
    case GgufType::int8:
      return "i8";
    case GgufType::uint16:
      return "u16";
    case GgufType::int16:
      return "i16";
    case GgufType::uint32:
      return "u32";
    case GgufType::int32:
      return "i32";
    case GgufType::float32:
      return "f32";
    case GgufType::boolean:
      return "bool";
    case GgufType::string:
      return "string";
    case GgufType::array:
      return "array";
    case GgufType::uint64:
      return "u64";
    case GgufType::int64:
      return "i64";
    case GgufType::float64:
      return "f64";
  }
  return "?";
}

std::optional<std::uint64_t> GgufValue::as_uint() const {
  if (const auto* u = std::get_if<std::uint64_t>(&value)) return *u;
  if (const auto* i = std::get_if<std::int64_t>(&value); i && *i >= 0)
    return static_cast<std::uint64_t>(*i);
  return std::nullopt;
}

std::optional<std::int64_t> GgufValue::as_int() const {
  if (const auto* i = std::get_if<std::int64_t>(&value)) return *i;
  if (const auto* u = std::get_if<std::uint64_t>(&value);
      u && *u <= static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()))
    return static_cast<std::int64_t>(*u);
  return std::nullopt;
}

std::optional<double> GgufValue::as_float() const {
  if (const auto* d = std::get_if<double>(&value)) return *d;
  if (const auto* u = std::get_if<std::uint64_t>(&value)) return static_cast<double>(*u);
  if (const auto* i = std::get_if<std::int64_t>(&value)) return static_cast<double>(*i);
  return std::nullopt;
}

std::optional<bool> GgufValue::as_bool() const {
  if (const auto* b = std::get_if<bool>(&value)) return *b;
  return std::nullopt;
}

const std::string* GgufValue::as_string() const { return std::get_if<std::string>(&value); }
const GgufValue::Array* GgufValue::as_array() const { return std::get_if<Array>(&value); }

std::string GgufValue::to_string(std::size_t max_array_elems) const {
  struct Visitor {
    std::size_t max_elems;
    const GgufValue& self;
    std::string operator()(std::uint64_t u) const { return std::to_string(u); }
    std::string operator()(std::int64_t i) const { return std::to_string(i); }
    std::string operator()(double d) const { return fmt::format("{}", d); }
    std::string operator()(bool b) const { return b ? "true" : "false"; }
    std::string operator()(const std::string& s) const {
      constexpr std::size_t kMaxShown = 80;
      if (s.size() > kMaxShown)
        return fmt::format("\"{}...\"", std::string_view(s).substr(0, kMaxShown));
      return fmt::format("\"{}\"", s);
    }
    std::string operator()(const Array& a) const {
      std::string out = fmt::format("[{} x {}]", gguf_type_name(self.element_type), a.size());
      for (std::size_t i = 0; i < a.size() && i < max_elems; ++i) {
        out += ' ';
        out += a[i].to_string(max_elems);
      }
      if (a.size() > max_elems) out += " ...";
      return out;
    }
  };
  return std::visit(Visitor{max_array_elems, *this}, value);
}

// ------------------------------------------------------------------------ GgufFile

void GgufFile::fail(const std::string& problem) const {
  throw Error(fmt::format("{}: {}", name, problem));
}

const GgufValue* GgufFile::find(std::string_view key) const {
  for (const auto& [k, v] : metadata)
    if (k == key) return &v;
  return nullptr;
}

const GgufTensorInfo* GgufFile::find_tensor(std::string_view tensor_name) const {
  for (const auto& t : tensors)
    if (t.name == tensor_name) return &t;
  return nullptr;
}

namespace {
template <class Get>
auto typed_get(const GgufFile& f, std::string_view key, const char* expected, Get get) {
  const GgufValue* v = f.find(key);
  using Result = decltype(get(*v));
  if (v == nullptr) return Result{};
  Result r = get(*v);
  if (!r)
    f.fail(fmt::format("metadata key '{}' is {} ({}), expected {}", key, gguf_type_name(v->type),
                       v->to_string(), expected));
  return r;
}
}  // namespace

std::optional<std::uint64_t> GgufFile::get_uint(std::string_view key) const {
  return typed_get(*this, key, "a non-negative integer",
                   [](const GgufValue& v) { return v.as_uint(); });
}

std::optional<double> GgufFile::get_float(std::string_view key) const {
  return typed_get(*this, key, "a number", [](const GgufValue& v) { return v.as_float(); });
}

std::optional<bool> GgufFile::get_bool(std::string_view key) const {
  return typed_get(*this, key, "a bool", [](const GgufValue& v) { return v.as_bool(); });
}

std::optional<std::string> GgufFile::get_string(std::string_view key) const {
  return typed_get(*this, key, "a string", [](const GgufValue& v) -> std::optional<std::string> {
    if (const std::string* s = v.as_string()) return *s;
    return std::nullopt;
  });
}

const GgufValue::Array* GgufFile::get_array(std::string_view key, GgufType element) const {
  const GgufValue* v = find(key);
  if (v == nullptr) return nullptr;
  const GgufValue::Array* a = v->as_array();
  if (a == nullptr || v->element_type != element)
    fail(fmt::format("metadata key '{}' is {}, expected an array of {}", key,
                     a ? fmt::format("an array of {}", gguf_type_name(v->element_type))
                       : std::string(gguf_type_name(v->type)),
                     gguf_type_name(element)));
  return a;
}

// ------------------------------------------------------------------------ parsing

GgufFile parse_gguf(std::span<const std::byte> bytes, const std::string& name) {
  GgufFile g;
  g.name = name;
  g.file_size = bytes.size();
  Cursor in(bytes, g.name);

  // Header.
  in.need(4, "magic");
  if (std::memcmp(bytes.data(), "GGUF", 4) != 0) {
    const auto* b = reinterpret_cast<const unsigned char*>(bytes.data());
    in.fail(
        fmt::format("not a GGUF file (bad magic {:02x} {:02x} {:02x} {:02x}, expected \"GGUF\")",
                    b[0], b[1], b[2], b[3]));
  }
  in.read<std::uint32_t>("magic");
  g.version = in.read<std::uint32_t>("version");
  if (g.version != 2 && g.version != 3) {
    if (const auto swapped = __builtin_bswap32(g.version); swapped == 2 || swapped == 3)
      in.fail(fmt::format("big-endian GGUF v{} files are not supported", swapped));
    in.fail(fmt::format("unsupported GGUF version {} (specdec reads versions 2 and 3)", g.version));
  }
  const auto tensor_count = in.read<std::uint64_t>("tensor count");
  const auto metadata_count = in.read<std::uint64_t>("metadata count");
  // A metadata entry is at least a key length, a type and a one-byte value; a tensor info at
  // least a name length, n_dims, a type and an offset.
  constexpr std::uint64_t kMinEntry = 8 + 4 + 1, kMinTensorInfo = 8 + 4 + 4 + 8;
  if (metadata_count > in.remaining() / kMinEntry)
    in.fail(fmt::format("metadata count {} exceeds what the {} remaining bytes can hold",
                        metadata_count, in.remaining()));
  if (tensor_count > in.remaining() / kMinTensorInfo)
    in.fail(fmt::format("tensor count {} exceeds what the {} remaining bytes can hold",
                        tensor_count, in.remaining()));

  // Metadata.
  std::set<std::string, std::less<>> keys;
  g.metadata.reserve(static_cast<std::size_t>(metadata_count));
  for (std::uint64_t i = 0; i < metadata_count; ++i) {
    std::string key = in.read_string("metadata key");
    if (!keys.insert(key).second) in.fail(fmt::format("duplicate metadata key '{}'", key));
    const auto type = in.read<std::uint32_t>(Field{"type of metadata key", key});
    if (!is_known_type(type))
      in.fail(fmt::format("metadata key '{}': unknown value type {}", key, type));
    GgufValue value = read_value(in, static_cast<GgufType>(type), key, 0);
    g.metadata.emplace_back(std::move(key), std::move(value));
  }
  if (const GgufValue* a = g.find("general.alignment")) {
    const auto align = a->as_uint();
    if (!align || *align == 0 || !std::has_single_bit(*align) || *align > kMaxAlignment)
      in.fail(fmt::format("general.alignment {} is not a power of two up to 2^30", a->to_string()));
    g.alignment = *align;
  }

  // Tensor infos.
  std::set<std::string, std::less<>> names;
  g.tensors.reserve(static_cast<std::size_t>(tensor_count));
  for (std::uint64_t i = 0; i < tensor_count; ++i) {
    GgufTensorInfo t;
    t.name = in.read_string("tensor name");
    if (t.name.size() > kMaxTensorName)
      in.fail(fmt::format("tensor name '{}...' is longer than {} bytes", t.name.substr(0, 32),
                          kMaxTensorName));
    if (!names.insert(t.name).second) in.fail(fmt::format("duplicate tensor '{}'", t.name));
    const Field what{"info of tensor", t.name};
    const auto n_dims = in.read<std::uint32_t>(what);
    if (n_dims > kMaxDims)
      in.fail(fmt::format("tensor '{}' has {} dimensions (at most {})", t.name, n_dims, kMaxDims));
    std::vector<std::uint64_t> ne(n_dims);  // innermost first
    for (auto& d : ne) {
      d = in.read<std::uint64_t>(what);
      if (d > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()))
        in.fail(fmt::format("tensor '{}': dimension {} is out of range", t.name, d));
    }
    t.ggml_type = in.read<std::uint32_t>(what);
    t.offset = in.read<std::uint64_t>(what);
    t.shape.assign(ne.rbegin(), ne.rend());

    const GgmlType* type = ggml_type(t.ggml_type);
    if (type == nullptr)
      in.fail(fmt::format("tensor '{}': unknown tensor type {}", t.name, t.ggml_type));
    t.dtype = type->dtype;
    std::optional<std::uint64_t> elements = 1;
    for (auto d : ne)
      if (elements) elements = checked_mul(*elements, d);
    if (!elements ||
        *elements > static_cast<std::uint64_t>(std::numeric_limits<std::int64_t>::max()))
      in.fail(fmt::format("tensor '{}': element count of shape {} overflows", t.name,
                          shape_string(t.shape)));
    const std::uint64_t row = ne.empty() ? 1 : ne[0];
    if (row % type->block_elems != 0)
      in.fail(fmt::format("tensor '{}': row length {} is not a multiple of the {} block size {}",
                          t.name, row, type->name, type->block_elems));
    const auto nbytes = checked_mul(*elements / type->block_elems, type->block_bytes);
    if (!nbytes)
      in.fail(fmt::format("tensor '{}': byte size of shape {} ({}) overflows", t.name,
                          shape_string(t.shape), type->name));
    t.nbytes = *nbytes;
    g.tensors.push_back(std::move(t));
  }

  // Tensor data: the section starts at the next multiple of the alignment.
  const auto data_offset = checked_align_up(in.pos(), g.alignment);
  if (!data_offset) in.fail("data section offset overflows");
  g.data_offset = *data_offset;
  for (auto& t : g.tensors) {
    if (t.offset % g.alignment != 0)
      in.fail(
          fmt::format("tensor '{}' is misaligned: offset {} is not a multiple of the alignment {}",
                      t.name, t.offset, g.alignment));
    const auto begin = checked_add(g.data_offset, t.offset);
    const auto end = begin ? checked_add(*begin, t.nbytes) : std::nullopt;
    if (!end || *end > bytes.size())
      in.fail(fmt::format(
          "tensor '{}': data at offset {} + {} with {} bytes lies past the end of the file "
          "({} bytes)",
          t.name, g.data_offset, t.offset, t.nbytes, bytes.size()));
    t.data = bytes.data() + *begin;
  }
  // Overlaps: sorted by offset, each tensor must end before the next begins.
  std::vector<const GgufTensorInfo*> by_offset;
  for (const auto& t : g.tensors) by_offset.push_back(&t);
  std::sort(by_offset.begin(), by_offset.end(),
            [](const auto* a, const auto* b) { return a->offset < b->offset; });
  for (std::size_t i = 1; i < by_offset.size(); ++i) {
    const auto* prev = by_offset[i - 1];
    const auto* next = by_offset[i];
    if (prev->offset + prev->nbytes > next->offset)
      in.fail(fmt::format("tensors '{}' (bytes {}..{}) and '{}' (from {}) overlap", prev->name,
                          prev->offset, prev->offset + prev->nbytes, next->name, next->offset));
  }
  return g;
}

GgufFile read_gguf(const std::string& path) {
  auto file = std::make_shared<const MappedFile>(path);
  GgufFile g = parse_gguf({file->data(), file->size()}, path);
  g.file = std::move(file);
  return g;
}

std::string describe_gguf_metadata(const GgufFile& gguf) {
  std::string out = fmt::format(
      "GGUF v{}: {} metadata keys, {} tensors, alignment {}, data at offset {}\n", gguf.version,
      gguf.metadata.size(), gguf.tensors.size(), gguf.alignment, gguf.data_offset);
  for (const auto& [key, value] : gguf.metadata)
    out += fmt::format("  {:<44} {:<6} {}\n", key, gguf_type_name(value.type), value.to_string());
  return out;
}

}  // namespace specdec
