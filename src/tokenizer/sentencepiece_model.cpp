// read_sentencepiece_model(): a SentencePiece tokenizer.model (a serialized ModelProto) into a
// TokenizerSpec, with a small protobuf wire-format reader instead of libsentencepiece/libprotobuf.
//
// The fields used (sentencepiece_model.proto):
//   ModelProto       1 pieces (repeated SentencePiece)  2 trainer_spec  3 normalizer_spec
//                    5 denormalizer_spec
//   SentencePiece    1 piece (string)  2 score (float)  3 type (enum, default NORMAL = 1)
//   TrainerSpec      3 model_type (default UNIGRAM = 1; BPE = 2)  24 treat_whitespace_as_suffix
//                    35 byte_fallback  44 unk_surface  45..48 unk/bos/eos/pad piece
//   NormalizerSpec   1 name  2 precompiled_charsmap  3 add_dummy_prefix (default true)
//                    4 remove_extra_whitespaces (default true)  5 escape_whitespaces (default true)
// Every length is checked against the bytes that remain before it is used.

#include <fmt/format.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <utility>

#include "internal.hpp"

namespace specdec {
namespace {

enum class WireType : std::uint8_t { varint = 0, fixed64 = 1, length_delimited = 2, fixed32 = 5 };

struct Field {
  std::uint32_t number = 0;
  WireType type = WireType::varint;
  std::uint64_t varint = 0;   // varint
  std::uint32_t fixed32 = 0;  // fixed32
  std::string_view bytes;     // length-delimited
};

/// Reads the fields of one message from a byte range, failing with "<name>: <message>: ...".
class WireReader {
 public:
  WireReader(std::string_view data, const std::string& name, std::string message)
      : data_(data), name_(name), message_(std::move(message)) {}

  [[nodiscard]] bool done() const { return pos_ >= data_.size(); }

  Field next() {
    Field f;
    const std::uint64_t tag = varint();
    f.number = static_cast<std::uint32_t>(tag >> 3);
    if ((tag >> 3) == 0 || (tag >> 3) > 0x1FFFFFFF)
      fail(fmt::format("invalid field number {}", tag >> 3));
    switch (tag & 7) {
      case 0:
        f.type = WireType::varint;
        f.varint = varint();
        break;
      case 1:
        f.type = WireType::fixed64;
        take(8);
        break;
      case 2: {
        f.type = WireType::length_delimited;
        const std::uint64_t len = varint();
        f.bytes = take(len);
        break;
      }
      case 5: {
        f.type = WireType::fixed32;
        const std::string_view b = take(4);
        f.fixed32 = static_cast<std::uint32_t>(static_cast<unsigned char>(b[0])) |
                    static_cast<std::uint32_t>(static_cast<unsigned char>(b[1])) << 8 |
                    static_cast<std::uint32_t>(static_cast<unsigned char>(b[2])) << 16 |
                    static_cast<std::uint32_t>(static_cast<unsigned char>(b[3])) << 24;
        break;
      }
      default:
        fail(fmt::format("field {} has unsupported wire type {}", f.number, tag & 7));
    }
    return f;
  }

  /// The field must have the given wire type (a known field with another type is corrupt).
  void expect(const Field& f, WireType type) const {
    if (f.type != type) {
      fail(fmt::format("field {} has wire type {}, expected {}", f.number, static_cast<int>(f.type),
                       static_cast<int>(type)));
    }
  }

  [[noreturn]] void fail(const std::string& problem) const {
    throw Error(fmt::format("{}: not a valid SentencePiece model: {} at byte {}: {}", name_,
                            message_, pos_, problem));
  }

 private:
  std::uint64_t varint() {
    std::uint64_t value = 0;
    for (int shift = 0; shift < 64; shift += 7) {
      if (pos_ >= data_.size()) fail("truncated varint");
      const auto byte = static_cast<unsigned char>(data_[pos_++]);
      value |= static_cast<std::uint64_t>(byte & 0x7F) << shift;
      if ((byte & 0x80) == 0) return value;
    }
    fail("varint longer than 10 bytes");
  }

  std::string_view take(std::uint64_t len) {
    if (len > data_.size() - pos_)
      fail(fmt::format("field of {} bytes runs past the end ({} left)", len, data_.size() - pos_));
    const std::string_view out = data_.substr(pos_, static_cast<std::size_t>(len));
    pos_ += static_cast<std::size_t>(len);
    return out;
  }

  std::string_view data_;
  std::size_t pos_ = 0;
  const std::string& name_;
  std::string message_;  // which message is being read, for errors
};

float as_float(std::uint32_t bits) {
  float f;
  std::memcpy(&f, &bits, sizeof f);
  return f;
}

struct TrainerSpec {
  std::int64_t model_type = 1;  // UNIGRAM
  bool byte_fallback = false;
  bool treat_whitespace_as_suffix = false;
  std::string unk_surface = " \xE2\x81\x87 ";
  std::string unk_piece = "<unk>", bos_piece = "<s>", eos_piece = "</s>", pad_piece = "<pad>";
};

struct NormalizerSpec {
  std::string name;
  bool has_charsmap = false;
  bool add_dummy_prefix = true;
  bool remove_extra_whitespaces = true;
  bool escape_whitespaces = true;
};

void parse_trainer_spec(std::string_view bytes, const std::string& name, TrainerSpec& t) {
  WireReader r(bytes, name, "trainer_spec");
  while (!r.done()) {
    const Field f = r.next();
    const auto string_field = [&](std::string& out) {
      r.expect(f, WireType::length_delimited);
      out.assign(f.bytes);
    };
    switch (f.number) {
      case 3:
        r.expect(f, WireType::varint);
        t.model_type = static_cast<std::int64_t>(f.varint);
        break;
      case 24:
        r.expect(f, WireType::varint);
        t.treat_whitespace_as_suffix = f.varint != 0;
        break;
      case 35:
        r.expect(f, WireType::varint);
        t.byte_fallback = f.varint != 0;
        break;
      case 44:
        string_field(t.unk_surface);
        break;
      case 45:
        string_field(t.unk_piece);
        break;
      case 46:
        string_field(t.bos_piece);
        break;
      case 47:
        string_field(t.eos_piece);
        break;
      case 48:
        string_field(t.pad_piece);
        break;
      default:
        break;  // training options that do not change encoding
    }
  }
}

void parse_normalizer_spec(std::string_view bytes, const std::string& name,
                           std::string_view message, NormalizerSpec& n) {
  WireReader r(bytes, name, std::string(message));
  while (!r.done()) {
    const Field f = r.next();
    switch (f.number) {
      case 1:
        r.expect(f, WireType::length_delimited);
        n.name.assign(f.bytes);
        break;
      case 2:
        r.expect(f, WireType::length_delimited);
        n.has_charsmap = !f.bytes.empty();
        break;
      case 3:
        r.expect(f, WireType::varint);
        n.add_dummy_prefix = f.varint != 0;
        break;
      case 4:
        r.expect(f, WireType::varint);
        n.remove_extra_whitespaces = f.varint != 0;
        break;
      case 5:
        r.expect(f, WireType::varint);
        n.escape_whitespaces = f.varint != 0;
        break;
      default:
        break;
    }
  }
}

void parse_piece(std::string_view bytes, const std::string& name, std::size_t index,
                 TokenizerSpec& spec) {
  WireReader r(bytes, name, fmt::format("piece {}", index));
  std::string piece;
  float score = 0.0f;
  std::int64_t type = detail::kTypeNormal;
  while (!r.done()) {
    const Field f = r.next();
    switch (f.number) {
      case 1:
        r.expect(f, WireType::length_delimited);
        piece.assign(f.bytes);
        break;
      case 2:
        r.expect(f, WireType::fixed32);
        score = as_float(f.fixed32);
        break;
      case 3:
        r.expect(f, WireType::varint);
        type = static_cast<std::int64_t>(f.varint);
        break;
      default:
        break;
    }
  }
  // sentencepiece's own checks (ModelInterface::InitializePieces).
  if (piece.empty()) r.fail("empty piece");
  if (piece.size() >= 8000)
    r.fail(fmt::format("piece of {} bytes (sentencepiece allows < 8000)", piece.size()));
  if (piece.find('\0') != std::string::npos) r.fail("piece contains a NUL byte");
  if (type < detail::kTypeNormal || type > detail::kTypeByte)
    r.fail(fmt::format("piece type {} is not 1-6", type));
  if (score != score) r.fail("score is NaN");
  spec.tokens.push_back(std::move(piece));
  spec.scores.push_back(score);
  spec.token_types.push_back(static_cast<std::int32_t>(type));
}

/// The control token whose piece is `piece`, or -1 (sentencepiece's bos_id() / eos_id()).
token_t control_id(const TokenizerSpec& spec, const std::string& piece) {
  for (std::size_t i = 0; i < spec.tokens.size(); ++i) {
    if (spec.tokens[i] == piece && spec.token_types[i] == detail::kTypeControl)
      return static_cast<token_t>(i);
  }
  return -1;
}

std::string read_file(const std::string& path) {
  std::error_code ec;
  const auto size = std::filesystem::file_size(path, ec);
  if (ec) throw Error(fmt::format("{}: cannot read: {}", path, ec.message()));
  constexpr std::uintmax_t kMaxSize = std::uintmax_t{1} << 30;
  if (size > kMaxSize)
    throw Error(fmt::format("{}: {} bytes is too large for a tokenizer file", path, size));
  std::ifstream in(path, std::ios::binary);
  std::string data(static_cast<std::size_t>(size), '\0');
  if (!in.read(data.data(), static_cast<std::streamsize>(size)))
    throw Error(fmt::format("{}: cannot read", path));
  return data;
}

}  // namespace

TokenizerSpec parse_sentencepiece_model(std::string_view bytes, const std::string& name) {
  TokenizerSpec spec;
  spec.model = "llama";
  spec.source = name;
  TrainerSpec trainer;
  NormalizerSpec normalizer, denormalizer;
  bool has_trainer = false;

  WireReader r(bytes, name, "ModelProto");
  while (!r.done()) {
    const Field f = r.next();
    switch (f.number) {
      case 1:
        r.expect(f, WireType::length_delimited);
        if (spec.tokens.size() >= static_cast<std::size_t>(INT32_MAX))
          r.fail("more than 2^31 pieces");
        parse_piece(f.bytes, name, spec.tokens.size(), spec);
        break;
      case 2:
        r.expect(f, WireType::length_delimited);
        parse_trainer_spec(f.bytes, name, trainer);
        has_trainer = true;
        break;
      case 3:
        r.expect(f, WireType::length_delimited);
        parse_normalizer_spec(f.bytes, name, "normalizer_spec", normalizer);
        break;
      case 5:
        r.expect(f, WireType::length_delimited);
        parse_normalizer_spec(f.bytes, name, "denormalizer_spec", denormalizer);
        break;
      default:
        break;
    }
  }

  const auto refuse = [&](const std::string& what) {
    throw Error(fmt::format(
        "{}: {} (specdec implements SentencePiece BPE with identity normalization)", name, what));
  };
  if (spec.tokens.empty()) refuse("the model has no pieces");
  if (!has_trainer || trainer.model_type != 2) {
    static constexpr const char* kTypes[] = {"?", "unigram", "bpe", "word", "char"};
    const auto t = trainer.model_type;
    refuse(fmt::format("model_type is {}, not bpe",
                       t >= 1 && t <= 4 ? kTypes[t] : std::to_string(t).c_str()));
  }
  if (normalizer.has_charsmap) {
    refuse(fmt::format("normalization rule '{}' is not supported",
                       normalizer.name.empty() ? std::string("custom") : normalizer.name));
  }
  if (denormalizer.has_charsmap) refuse("a denormalization rule is not supported");
  if (!normalizer.escape_whitespaces) refuse("escape_whitespaces = false is not supported");
  if (trainer.treat_whitespace_as_suffix) refuse("treat_whitespace_as_suffix is not supported");

  spec.byte_fallback = trainer.byte_fallback;
  spec.add_space_prefix = normalizer.add_dummy_prefix;
  spec.remove_extra_whitespaces = normalizer.remove_extra_whitespaces;
  spec.unk_surface = trainer.unk_surface;
  int unknown_count = 0;
  for (std::size_t i = 0; i < spec.tokens.size(); ++i) {
    if (spec.token_types[i] == detail::kTypeUnknown) {
      ++unknown_count;
      spec.unk = static_cast<token_t>(i);
    }
    if (spec.token_types[i] == detail::kTypeByte && !spec.byte_fallback) {
      throw Error(fmt::format("{}: byte piece {} ('{}') although byte_fallback is false", name, i,
                              spec.tokens[i]));
    }
  }
  if (unknown_count != 1)
    throw Error(
        fmt::format("{}: {} unknown-type pieces, expected exactly one", name, unknown_count));
  spec.bos = control_id(spec, trainer.bos_piece);
  spec.eos = control_id(spec, trainer.eos_piece);
  spec.pad = control_id(spec, trainer.pad_piece);
  // The Llama convention (Hugging Face LlamaTokenizer's add_bos_token default).
  spec.add_bos = spec.bos >= 0;
  spec.add_eos = false;
  return spec;
}

TokenizerSpec read_sentencepiece_model(const std::string& path) {
  TokenizerSpec spec = parse_sentencepiece_model(read_file(path), path);
  // A Hugging Face folder states the BOS/EOS rule in tokenizer_config.json.
  const auto config_path = std::filesystem::path(path).parent_path() / "tokenizer_config.json";
  std::error_code ec;
  if (std::filesystem::is_regular_file(config_path, ec)) {
    const std::string text = read_file(config_path.string());
    const auto config = nlohmann::json::parse(text, nullptr, /*allow_exceptions=*/false);
    if (config.is_discarded() || !config.is_object()) {
      throw Error(fmt::format("{}: not a JSON object", config_path.string()));
    }
    for (const auto& [key, target] :
         {std::pair<const char*, bool*>{"add_bos_token", &spec.add_bos},
          std::pair<const char*, bool*>{"add_eos_token", &spec.add_eos}}) {
      if (auto it = config.find(key); it != config.end() && !it->is_null()) {
        if (!it->is_boolean())
          throw Error(fmt::format("{}: '{}' is not a boolean", config_path.string(), key));
        *target = it->get<bool>();
      }
    }
    if (spec.add_bos && spec.bos < 0)
      throw Error(fmt::format("{}: add_bos_token but the model has no BOS", path));
    if (spec.add_eos && spec.eos < 0)
      throw Error(fmt::format("{}: add_eos_token but the model has no EOS", path));
  }
  return spec;
}

}  // namespace specdec
