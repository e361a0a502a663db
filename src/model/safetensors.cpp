// safetensors reader: see specdec/model/safetensors.hpp for the layout and the checks.
#include "specdec/model/safetensors.hpp"

#include <algorithm>
#include <bit>
#include <cstring>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <nlohmann/json.hpp>

#include "checked.hpp"

namespace specdec {

namespace {

using detail::checked_mul;
using nlohmann::json;

// The reference implementation refuses headers above 100 MB; so do we.
constexpr std::uint64_t kMaxHeaderSize = 100'000'000;

/// Bytes per element of the byte-sized dtypes of the format; 0 for an unknown name. (The
/// sub-byte F4/F6 types of recent versions are reported as unsupported.)
std::uint64_t element_size(std::string_view dtype) {
  static constexpr std::pair<std::string_view, std::uint64_t> kSizes[] = {
      {"BOOL", 1}, {"U8", 1},  {"I8", 1},  {"F8_E5M2", 1}, {"F8_E4M3", 1}, {"F8_E8M0", 1},
      {"I16", 2},  {"U16", 2}, {"F16", 2}, {"BF16", 2},    {"I32", 4},     {"U32", 4},
      {"F32", 4},  {"F64", 8}, {"I64", 8}, {"U64", 8},     {"C64", 8},
  };
  for (const auto& [name, size] : kSizes)
    if (name == dtype) return size;
  return 0;
}

[[noreturn]] void fail_in(const std::string& file, const std::string& problem) {
  throw Error(file + ": " + problem);
}

std::optional<DType> dtype_from_safetensors(std::string_view dtype) {
  if (dtype == "F32") return DType::f32;
  if (dtype == "F16") return DType::f16;
  if (dtype == "BF16") return DType::bf16;
  return std::nullopt;
}

}  // namespace

const SafetensorsTensor* SafetensorsFile::find(std::string_view tensor_name) const {
  for (const auto& t : tensors)
    if (t.name == tensor_name) return &t;
  return nullptr;
}

SafetensorsFile parse_safetensors(std::span<const std::byte> bytes, const std::string& name) {
  static_assert(std::endian::native == std::endian::little,
                "the safetensors reader assumes a little-endian host");
  SafetensorsFile st;
  st.name = name;
  auto fail = [&](const std::string& problem) { fail_in(name, problem); };

  if (bytes.size() < 8)
    fail(fmt::format("truncated file: {} bytes, too short for the 8-byte header size",
                     bytes.size()));
  std::memcpy(&st.header_size, bytes.data(), 8);
  if (st.header_size > kMaxHeaderSize)
    fail(fmt::format("header size {} exceeds the limit of {} bytes (not a safetensors file?)",
                     st.header_size, kMaxHeaderSize));
  if (st.header_size > bytes.size() - 8)
    fail(fmt::format("truncated file: the header needs {} bytes, only {} follow", st.header_size,
                     bytes.size() - 8));
  const auto* header_begin = reinterpret_cast<const char*>(bytes.data() + 8);
  const std::string_view header_text(header_begin, static_cast<std::size_t>(st.header_size));
  if (header_text.empty() || header_text.front() != '{')
    fail("the header is not a JSON object (not a safetensors file?)");

  json header;
  try {
    header = json::parse(header_text);
  } catch (const json::exception& e) {
    fail(fmt::format("invalid JSON header: {}", e.what()));
  }
  if (!header.is_object()) fail("the header is not a JSON object");

  const std::uint64_t data_start = 8 + st.header_size;
  const std::uint64_t data_size = bytes.size() - data_start;
  for (const auto& item : header.items()) {
    const std::string& key = item.key();  // (not a structured binding: lambdas below capture it)
    const json& entry = item.value();
    if (key == "__metadata__") {
      if (!entry.is_object()) fail("__metadata__ is not an object");
      for (const auto& [k, v] : entry.items()) {
        if (!v.is_string()) fail(fmt::format("__metadata__ value of '{}' is not a string", k));
        st.metadata.emplace(k, v.get<std::string>());
      }
      continue;
    }
    SafetensorsTensor t;
    t.name = key;
    auto bad = [&](const std::string& problem) {
      fail_in(name, fmt::format("tensor '{}': {}", key, problem));
    };
    if (!entry.is_object()) bad("entry is not an object");
    const auto dtype = entry.find("dtype");
    const auto shape = entry.find("shape");
    const auto offsets = entry.find("data_offsets");
    if (dtype == entry.end() || !dtype->is_string()) bad("missing or non-string \"dtype\"");
    if (shape == entry.end() || !shape->is_array()) bad("missing or non-array \"shape\"");
    if (offsets == entry.end() || !offsets->is_array() || offsets->size() != 2 ||
        !(*offsets)[0].is_number_unsigned() || !(*offsets)[1].is_number_unsigned())
      bad("\"data_offsets\" must be two non-negative integers");

    t.dtype_name = dtype->get<std::string>();
    const std::uint64_t elem_size = element_size(t.dtype_name);
    if (elem_size == 0) bad(fmt::format("unknown or unsupported dtype '{}'", t.dtype_name));
    t.dtype = dtype_from_safetensors(t.dtype_name);

    std::optional<std::uint64_t> elements = 1;
    for (const auto& d : *shape) {
      if (!d.is_number_unsigned()) bad("shape entries must be non-negative integers");
      t.shape.push_back(d.get<std::uint64_t>());
      if (elements) elements = checked_mul(*elements, t.shape.back());
    }
    const auto expected_bytes = elements ? checked_mul(*elements, elem_size) : std::nullopt;
    if (!expected_bytes)
      bad(fmt::format("byte size of shape [{}] ({}) overflows", fmt::join(t.shape, ", "),
                      t.dtype_name));

    t.begin = (*offsets)[0].get<std::uint64_t>();
    t.end = (*offsets)[1].get<std::uint64_t>();
    if (t.begin > t.end) bad(fmt::format("data_offsets [{}, {}] are reversed", t.begin, t.end));
    if (t.end - t.begin != *expected_bytes)
      bad(fmt::format("data_offsets [{}, {}] hold {} bytes but shape [{}] of {} needs {}", t.begin,
                      t.end, t.end - t.begin, fmt::join(t.shape, ", "), t.dtype_name,
                      *expected_bytes));
    if (t.end > data_size)
      bad(fmt::format("data [{}, {}) lies past the end of the file ({} data bytes)", t.begin, t.end,
                      data_size));
    // Readers cast these bytes to float/uint16 pointers, so each tensor must start at a multiple of
    // its element size (the reference writer pads the header to 8 bytes to ensure it).
    if ((data_start + t.begin) % elem_size != 0)
      bad(fmt::format("misaligned: file offset {} is not a multiple of the {}-byte element size",
                      data_start + t.begin, elem_size));
    t.data = bytes.data() + data_start + t.begin;
    st.tensors.push_back(std::move(t));
  }

  std::sort(st.tensors.begin(), st.tensors.end(), [](const auto& a, const auto& b) {
    return a.begin != b.begin ? a.begin < b.begin : a.end < b.end;
  });
  for (std::size_t i = 1; i < st.tensors.size(); ++i) {
    const auto& prev = st.tensors[i - 1];
    const auto& next = st.tensors[i];
    if (prev.end > next.begin)
      fail(fmt::format("tensors '{}' [{}, {}) and '{}' [{}, {}) overlap", prev.name, prev.begin,
                       prev.end, next.name, next.begin, next.end));
  }
  return st;
}

SafetensorsFile read_safetensors(const std::string& path) {
  auto file = std::make_shared<const MappedFile>(path);
  SafetensorsFile st = parse_safetensors({file->data(), file->size()}, path);
  st.file = std::move(file);
  return st;
}

}  // namespace specdec
