// read_hf_tokenizer_json(): a Hugging Face tokenizer.json of a byte-level BPE model (GPT-2,
// Llama 3, Qwen2) into a TokenizerSpec. Only what specdec reproduces exactly is accepted:
//
//   model           {"type": "BPE", "vocab": {...}, "merges": ["a b", ...] or [["a", "b"], ...],
//                    "ignore_merges": bool}; no dropout, subword prefixes/suffixes, byte fallback
//   added_tokens    [{"id", "content", "special", ...}] without lstrip / rstrip / single_word
//   normalizer      null or NFC
//   pre_tokenizer   Split(Regex, "Isolated") pieces and one ByteLevel (add_prefix_space false),
//                   alone or in a Sequence
//   decoder         ByteLevel
//   post_processor  null, ByteLevel, TemplateProcessing "[BOS] $A [EOS]" (BOS and EOS optional),
//                   or a Sequence of those
// tokenizer_config.json beside the file names the bos_token / eos_token (the post-processor alone
// decides whether they are added, as in transformers).

#include <fmt/format.h>

#include <algorithm>
#include <cctype>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>

#include "internal.hpp"
#include "pretokenizer.hpp"

namespace specdec {
namespace {

using nlohmann::json;

[[noreturn]] void fail(const std::string& path, const std::string& problem) {
  throw Error(fmt::format("{}: {}", path, problem));
}

json read_json(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail(path, "cannot open");
  json j = json::parse(in, nullptr, /*allow_exceptions=*/false);
  if (j.is_discarded()) fail(path, "not valid JSON");
  return j;
}

std::string type_of(const json& node) {
  if (!node.is_object()) return {};
  auto it = node.find("type");
  return it != node.end() && it->is_string() ? it->get<std::string>() : std::string();
}

bool flag(const json& node, const char* key, bool fallback) {
  auto it = node.find(key);
  if (it == node.end() || it->is_null()) return fallback;
  return it->get<bool>();  // throws json::type_error for a non-boolean, reported with the path
}

/// A regex matching the literal string `s` (Split with {"String": s}).
std::string regex_escape(const std::string& s) {
  std::string out;
  for (char c : s) {
    const auto u = static_cast<unsigned char>(c);
    if (u < 0x80 && !std::isalnum(u)) out += '\\';
    out += c;
  }
  return out;
}

struct PreTokenizer {
  std::vector<std::string> regexes;
  bool byte_level = false;
};

void parse_pre_tokenizer(const std::string& path, const json& node, PreTokenizer& pre) {
  const std::string type = type_of(node);
  if (type == "Sequence") {
    for (const json& child : node.at("pretokenizers")) parse_pre_tokenizer(path, child, pre);
  } else if (type == "Split") {
    if (pre.byte_level) fail(path, "a Split pre-tokenizer after ByteLevel is not supported");
    const json& pattern = node.at("pattern");
    if (pattern.contains("Regex")) {
      pre.regexes.push_back(pattern.at("Regex").get<std::string>());
    } else if (pattern.contains("String")) {
      pre.regexes.push_back(regex_escape(pattern.at("String").get<std::string>()));
    } else {
      fail(path, "Split pre-tokenizer without a Regex or String pattern");
    }
    const std::string behavior = node.at("behavior").get<std::string>();
    if (behavior != "Isolated")
      fail(path, fmt::format("Split behavior '{}' is not supported (only Isolated)", behavior));
    if (flag(node, "invert", false)) fail(path, "an inverted Split pre-tokenizer is not supported");
  } else if (type == "ByteLevel") {
    if (pre.byte_level) fail(path, "two ByteLevel pre-tokenizers");
    if (flag(node, "add_prefix_space", false))
      fail(path, "ByteLevel add_prefix_space = true is not supported");
    if (flag(node, "use_regex", true)) pre.regexes.push_back(detail::pretokenizer_regex("gpt2"));
    pre.byte_level = true;
  } else {
    fail(path,
         fmt::format("pre-tokenizer '{}' is not supported", type.empty() ? node.dump() : type));
  }
}

struct PostProcessor {
  std::optional<token_t> bos, eos;  // tokens the template puts before / after the text
  bool template_seen = false;
};

void parse_post_processor(const std::string& path, const json& node, PostProcessor& post) {
  if (node.is_null()) return;
  const std::string type = type_of(node);
  if (type == "Sequence") {
    for (const json& child : node.at("processors")) parse_post_processor(path, child, post);
  } else if (type == "ByteLevel") {
    // Only adjusts offsets.
  } else if (type == "TemplateProcessing") {
    if (post.template_seen) fail(path, "two TemplateProcessing post-processors");
    post.template_seen = true;
    const json& specials = node.at("special_tokens");
    bool seen_text = false;
    for (const json& item : node.at("single")) {
      if (item.contains("Sequence")) {
        if (seen_text) fail(path, "TemplateProcessing with the text twice");
        seen_text = true;
      } else if (item.contains("SpecialToken")) {
        const std::string name = item.at("SpecialToken").at("id").get<std::string>();
        const json& ids = specials.at(name).at("ids");
        if (ids.size() != 1)
          fail(path,
               fmt::format("template special token '{}' stands for {} ids", name, ids.size()));
        auto& slot = seen_text ? post.eos : post.bos;
        if (slot)
          fail(path, "TemplateProcessing with more than one token before or after the text");
        slot = ids.at(0).get<token_t>();
      } else {
        fail(path, fmt::format("unknown TemplateProcessing item {}", item.dump()));
      }
    }
    if (!seen_text) fail(path, "TemplateProcessing without the text ($A)");
  } else {
    fail(path,
         fmt::format("post-processor '{}' is not supported", type.empty() ? node.dump() : type));
  }
}

/// tokenizer_config.json names special tokens either as a string or as {"content": ...}.
std::optional<std::string> token_name(const json& config, const char* key) {
  auto it = config.find(key);
  if (it == config.end() || it->is_null()) return std::nullopt;
  if (it->is_string()) return it->get<std::string>();
  if (it->is_object() && it->contains("content")) return it->at("content").get<std::string>();
  return std::nullopt;
}

TokenizerSpec parse(const std::string& path, const json& j) {
  if (!j.is_object()) fail(path, "not a JSON object");
  TokenizerSpec spec;
  spec.model = "gpt2";
  spec.source = path;

  // ---- model
  const json& model = j.at("model");
  if (const std::string type = type_of(model); type != "BPE") {
    fail(path, fmt::format("model type '{}' is not supported (only BPE)", type));
  }
  if (auto it = model.find("dropout");
      it != model.end() && !it->is_null() && it->get<double>() != 0.0) {
    fail(path, "BPE dropout is not supported");
  }
  for (const char* key : {"continuing_subword_prefix", "end_of_word_suffix"}) {
    if (auto it = model.find(key);
        it != model.end() && !it->is_null() && !it->get<std::string>().empty()) {
      fail(path, fmt::format("BPE {} is not supported", key));
    }
  }
  if (flag(model, "byte_fallback", false)) {
    fail(path,
         "BPE with byte_fallback (a SentencePiece-style tokenizer.json) is not supported: use "
         "tokenizer.model");
  }
  spec.ignore_merges = flag(model, "ignore_merges", false);

  std::vector<std::pair<std::string, token_t>> entries;  // (piece, id) from vocab and added_tokens
  std::vector<std::int32_t> entry_types;
  const json& vocab = model.at("vocab");
  if (!vocab.is_object()) fail(path, "model.vocab is not an object");
  for (const auto& [piece, id] : vocab.items()) {
    entries.emplace_back(piece, id.get<token_t>());
    entry_types.push_back(detail::kTypeNormal);
  }
  if (auto it = j.find("added_tokens"); it != j.end() && !it->is_null()) {
    for (const json& added : *it) {
      for (const char* key : {"lstrip", "rstrip", "single_word"}) {
        if (flag(added, key, false))
          fail(path, fmt::format("added token with {} = true is not supported", key));
      }
      entries.emplace_back(added.at("content").get<std::string>(), added.at("id").get<token_t>());
      entry_types.push_back(flag(added, "special", false) ? detail::kTypeControl
                                                          : detail::kTypeUserDefined);
    }
  }
  token_t max_id = -1;
  for (const auto& [piece, id] : entries) {
    if (id < 0) fail(path, fmt::format("token '{}' has negative id {}", piece, id));
    max_id = std::max(max_id, id);
  }
  if (max_id < 0) fail(path, "empty vocabulary");
  spec.tokens.assign(static_cast<std::size_t>(max_id) + 1, std::string());
  spec.token_types.assign(spec.tokens.size(), 0);
  for (std::size_t e = 0; e < entries.size(); ++e) {
    const auto i = static_cast<std::size_t>(entries[e].second);
    // An added token may repeat a vocabulary entry (GPT-2's <|endoftext|>); its type wins.
    if (spec.token_types[i] != 0 && spec.tokens[i] != entries[e].first) {
      fail(path, fmt::format("id {} is both '{}' and '{}'", i, spec.tokens[i], entries[e].first));
    }
    spec.tokens[i] = entries[e].first;
    spec.token_types[i] = std::max(spec.token_types[i], entry_types[e]);
  }
  for (std::size_t i = 0; i < spec.tokens.size(); ++i) {
    if (spec.token_types[i] == 0)
      fail(path, fmt::format("no token has id {} (ids must be contiguous)", i));
  }
  if (auto it = model.find("unk_token"); it != model.end() && !it->is_null()) {
    const auto unk = vocab.find(it->get<std::string>());
    if (unk == vocab.end()) fail(path, "model.unk_token is not in the vocabulary");
    spec.unk = unk->get<token_t>();
  }

  for (const json& merge : model.at("merges")) {
    if (merge.is_string()) {
      spec.merges.push_back(merge.get<std::string>());
    } else {
      if (!merge.is_array() || merge.size() != 2)
        fail(path, fmt::format("merge {} is not a pair", merge.dump()));
      const auto left = merge[0].get<std::string>(), right = merge[1].get<std::string>();
      if (left.find(' ') != std::string::npos || right.find(' ') != std::string::npos) {
        fail(path, fmt::format("merge {} has a token containing a space", merge.dump()));
      }
      spec.merges.push_back(fmt::format("{} {}", left, right));
    }
  }

  // ---- normalizer, pre-tokenizer, decoder
  if (auto it = j.find("normalizer"); it != j.end() && !it->is_null()) {
    // NFC alone (Qwen2), possibly as the only member of a Sequence; an empty Sequence is none.
    const json* node = &*it;
    if (type_of(*node) == "Sequence" && node->at("normalizers").size() == 1)
      node = &node->at("normalizers")[0];
    if (type_of(*node) == "NFC") {
      spec.normalizer = "NFC";
    } else if (!(type_of(*node) == "Sequence" && node->at("normalizers").empty())) {
      fail(path, fmt::format("normalizer '{}' is not supported (only NFC)", type_of(*node)));
    }
  }
  PreTokenizer pre;
  if (auto it = j.find("pre_tokenizer"); it != j.end() && !it->is_null())
    parse_pre_tokenizer(path, *it, pre);
  if (!pre.byte_level) fail(path, "no ByteLevel pre-tokenizer: not a byte-level BPE tokenizer");
  spec.pre_regexes = pre.regexes;
  spec.pre = pre.regexes.empty() ? "none" : "";
  if (auto it = j.find("decoder"); it == j.end() || type_of(*it) != "ByteLevel") {
    fail(path, "the decoder is not ByteLevel");
  }

  // ---- BOS / EOS: the post-processor, then tokenizer_config.json
  PostProcessor post;
  if (auto it = j.find("post_processor"); it != j.end()) parse_post_processor(path, *it, post);
  spec.bos = post.bos.value_or(-1);
  spec.eos = post.eos.value_or(-1);
  spec.add_bos = post.bos.has_value();
  spec.add_eos = post.eos.has_value();
  return spec;
}

/// tokenizer_config.json names the BOS and EOS tokens. Its add_bos_token / add_eos_token are
/// not applied: transformers (5.x, measured) ignores them for tokenizer.json-backed tokenizers
/// and follows the post-processor, so specdec does the same.
void apply_tokenizer_config(const std::string& path, TokenizerSpec& spec) {
  const json config = read_json(path);
  if (!config.is_object()) fail(path, "not a JSON object");
  const auto id_of = [&](const std::string& name) -> token_t {
    for (std::size_t i = 0; i < spec.tokens.size(); ++i) {
      if (spec.tokens[i] == name) return static_cast<token_t>(i);
    }
    fail(path, fmt::format("special token '{}' is not in the vocabulary", name));
  };
  // The template's own tokens win; the config fills in what the template does not name.
  if (auto bos = token_name(config, "bos_token"); bos && !spec.add_bos) spec.bos = id_of(*bos);
  if (auto eos = token_name(config, "eos_token"); eos && !spec.add_eos) spec.eos = id_of(*eos);
}

}  // namespace

TokenizerSpec read_hf_tokenizer_json(const std::string& path) {
  try {
    TokenizerSpec spec = parse(path, read_json(path));
    const auto config_path = std::filesystem::path(path).parent_path() / "tokenizer_config.json";
    std::error_code ec;
    if (std::filesystem::is_regular_file(config_path, ec))
      apply_tokenizer_config(config_path.string(), spec);
    return spec;
  } catch (const json::exception& e) {
    // Missing keys and wrong types in either file (json::at / get throw these).
    throw Error(fmt::format("{}: unexpected structure: {}", path, e.what()));
  }
}

}  // namespace specdec
