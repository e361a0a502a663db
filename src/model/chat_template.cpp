// Chat templates: detection from the Jinja text, and each family rendered as its official
// template renders (specdec/model/chat_template.hpp; the fixtures of tests/data/model/chat are
// jinja2's renderings of the published templates, tools/make_chat_fixtures.py).
#include "specdec/model/chat_template.hpp"

#include <algorithm>
#include <array>
#include <ctime>

#include <fmt/format.h>
#include <fmt/ranges.h>

namespace specdec {

namespace {

using Family = ChatTemplate::Family;

/// One row per family: its name, and the BOS / EOS texts its models' tokenizers use (what
/// detect() and named() render bos_token and eos_token as; for_model() takes the model's).
struct FamilyInfo {
  Family family;
  std::string_view name;
  std::string_view bos;
  std::string_view eos;
};
constexpr std::array kFamilies = {
    FamilyInfo{Family::chatml, "chatml", "", "<|im_end|>"},
    FamilyInfo{Family::llama3, "llama3", "<|begin_of_text|>", "<|eot_id|>"},
    FamilyInfo{Family::llama31, "llama3.1", "<|begin_of_text|>", "<|eot_id|>"},
    FamilyInfo{Family::llama2, "llama2", "<s>", "</s>"},
    FamilyInfo{Family::mistral, "mistral", "<s>", "</s>"},
    FamilyInfo{Family::gemma, "gemma", "<bos>", "<eos>"},
    FamilyInfo{Family::phi3, "phi3", "<s>", "<|endoftext|>"},
    FamilyInfo{Family::zephyr, "zephyr", "<s>", "</s>"},
};

const FamilyInfo& info(Family family) {
  for (const FamilyInfo& f : kFamilies)
    if (f.family == family) return f;
  throw Error("chat template: unknown family");  // unreachable: every enumerator has a row
}

std::string known_names() {
  std::vector<std::string_view> names;
  names.reserve(std::size(kFamilies));
  for (const FamilyInfo& f : kFamilies) names.push_back(f.name);
  return fmt::format("{}", fmt::join(names, ", "));
}

/// Python's str.strip() (Jinja's trim filter and the templates' .strip()): removes leading and
/// trailing characters that Python counts as whitespace, the Unicode ones included.
std::string python_strip(std::string_view s) {
  // The code point that starts at s[i] (0 when the bytes are not valid UTF-8) and its length.
  const auto decode = [](std::string_view t, std::size_t i, std::size_t& len) -> char32_t {
    const auto b = [&](std::size_t k) { return static_cast<unsigned char>(t[k]); };
    const unsigned char c = b(i);
    len = c < 0x80 ? 1 : (c >> 5) == 0x6 ? 2 : (c >> 4) == 0xE ? 3 : (c >> 3) == 0x1E ? 4 : 0;
    if (len == 0 || i + len > t.size()) return len = 1, 0;
    char32_t cp = len == 1 ? c : c & (0x7F >> len);
    for (std::size_t k = 1; k < len; ++k) {
      if ((b(i + k) & 0xC0) != 0x80) return len = 1, 0;
      cp = cp << 6 | (b(i + k) & 0x3F);
    }
    return cp;
  };
  const auto is_space = [](char32_t c) {
    return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 ||
           c == 0x1680 || (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 ||
           c == 0x202F || c == 0x205F || c == 0x3000;
  };
  std::size_t begin = 0;
  while (begin < s.size()) {
    std::size_t len = 0;
    if (!is_space(decode(s, begin, len))) break;
    begin += len;
  }
  std::size_t end = s.size();
  while (end > begin) {
    // Step back to the start of the last character (at most 3 continuation bytes).
    std::size_t start = end - 1;
    while (start > begin && end - start < 4 &&
           (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80)
      --start;
    std::size_t len = 0;
    const char32_t c = decode(s, start, len);
    if (start + len != end || !is_space(c)) break;
    end = start;
  }
  return std::string(s.substr(begin, end - begin));
}

bool contains(std::string_view text, std::string_view what) {
  return text.find(what) != std::string_view::npos;
}

/// The default system message of a Qwen-style ChatML template: the text of a string literal
/// '<|im_start|>system\n...<|im_end|>\n' written whole in the template (Qwen2.5: "You are Qwen,
/// created by Alibaba Cloud. You are a helpful assistant."), with the literal's escapes undone.
/// Empty when the template has none.
std::string qwen_default_system(std::string_view text) {
  for (const std::string_view head : {"<|im_start|>system\\n", "<|im_start|>system\n"}) {
    for (std::size_t at = text.find(head); at != std::string_view::npos;
         at = text.find(head, at + 1)) {
      if (at == 0 || (text[at - 1] != '\'' && text[at - 1] != '"')) continue;
      const char quote = text[at - 1];
      const std::size_t from = at + head.size();
      const std::size_t to = text.find("<|im_end|>", from);
      if (to == std::string_view::npos || to == from) continue;
      const std::string_view body = text.substr(from, to - from);
      // A literal: no closing quote and no Jinja expression inside.
      if (contains(body, std::string_view(&quote, 1)) || contains(body, "{{") ||
          contains(body, "{%"))
        continue;
      std::string out;
      for (std::size_t i = 0; i < body.size(); ++i) {
        if (body[i] != '\\' || i + 1 == body.size()) {
          out += body[i];
          continue;
        }
        const char c = body[++i];
        out += c == 'n' ? '\n' : c == 't' ? '\t' : c == 'r' ? '\r' : c;
      }
      return out;
    }
  }
  return {};
}

/// "%d %b %Y" of today (Llama 3.2's strftime_now("%d %b %Y"), in the C locale).
std::string today() {
  const std::time_t now = std::time(nullptr);
  std::tm local{};
  localtime_r(&now, &local);
  static constexpr std::array<std::string_view, 12> kMonths = {
      "Jan", "Feb", "Mar", "Apr", "May", "Jun", "Jul", "Aug", "Sep", "Oct", "Nov", "Dec"};
  return fmt::format("{:02d} {} {}", local.tm_mday, kMonths[static_cast<std::size_t>(local.tm_mon)],
                     local.tm_year + 1900);
}

[[noreturn]] void refuse(std::string_view family, const std::string& problem) {
  throw Error(fmt::format("chat template {}: {}", family, problem));
}

/// The templates that require user / assistant / user / ... (Llama 2, Mistral, Gemma): the
/// Jinja check (message['role'] == 'user') != (loop.index0 % 2 == 0), message by message.
void check_alternation(std::string_view family, std::span<const ChatMessage> loop) {
  for (std::size_t i = 0; i < loop.size(); ++i)
    if ((loop[i].role == "user") != (i % 2 == 0))
      refuse(family, fmt::format("conversation roles must alternate user/assistant/user/... "
                                 "(message {} is '{}')",
                                 i + 1, loop[i].role));
}

}  // namespace

ChatTemplate::ChatTemplate(Family family)
    : family_(family), bos_(info(family).bos), eos_(info(family).eos) {
  if (family == Family::chatml) {
    // named("chatml") is the plain format; detect() fills in a Qwen template's default.
  } else if (family == Family::llama31) {
    date_ = "26 Jul 2024";  // the template's own default date_string
  }
}

std::vector<std::string_view> ChatTemplate::names() {
  std::vector<std::string_view> names;
  names.reserve(std::size(kFamilies));
  for (const FamilyInfo& f : kFamilies) names.push_back(f.name);
  return names;
}

ChatTemplate ChatTemplate::named(std::string_view name) {
  for (const FamilyInfo& f : kFamilies)
    if (f.name == name) return ChatTemplate(f.family);
  throw Error(fmt::format("unknown chat template '{}' (known: {})", name, known_names()));
}

ChatTemplate ChatTemplate::detect(std::string_view text) {
  for (const FamilyInfo& f : kFamilies)
    if (f.name == text) return ChatTemplate(f.family);
  // The order and the substrings are llama.cpp's (llm_chat_detect_template), restricted to the
  // families specdec renders; the look-alikes llama.cpp tells apart are refused by name.
  const auto has = [&](std::string_view s) { return contains(text, s); };
  const auto unsupported = [&](std::string_view what) -> ChatTemplate {
    throw Error(fmt::format(
        "the model's chat template looks like {}, which specdec cannot render; choose one it can "
        "with --chat-template NAME ({})",
        what, known_names()));
  };
  if (has("<|im_start|>")) {
    if (has("<|im_sep|>")) return unsupported("Phi-4's");
    if (has("<end_of_utterance>")) return unsupported("SmolVLM's");
    ChatTemplate t(Family::chatml);
    t.default_system_ = qwen_default_system(text);
    return t;
  }
  if (text.starts_with("mistral") || has("[INST]")) {
    if (has("[SYSTEM_PROMPT]")) return unsupported("Mistral's v7 format ([SYSTEM_PROMPT])");
    if (has("' [INST] ' + system_message") || has("[AVAILABLE_TOOLS]"))
      return unsupported("Mistral's v1 / v3 format (tools, the system prompt in the last turn)");
    // llama.cpp's llama2 variants: with <<SYS>>, BOS inside the history or stripped messages it is
    // Llama 2's chat format; without any of them, the Mistral v0.1 format.
    if (has("<<SYS>>") || has("bos_token + '[INST]") || has("content.strip()"))
      return ChatTemplate(Family::llama2);
    return ChatTemplate(Family::mistral);
  }
  if (has("<|assistant|>") && has("<|end|>")) return ChatTemplate(Family::phi3);
  if (has("[gMASK]")) return unsupported("ChatGLM's");
  // Zephyr: llama.cpp asks for a literal <|endoftext|> (StableLM-Zephyr) and takes
  // zephyr-7b-beta's template, which writes eos_token, for GLM-Edge's; both are Zephyr here.
  if (has("<|user|>") && (has("<|endoftext|>") || has("eos_token")))
    return ChatTemplate(Family::zephyr);
  if (has("<start_of_turn>")) {
    ChatTemplate t(Family::gemma);
    t.system_role_ = !has("System role not supported");  // Gemma 1 and 2 raise this
    return t;
  }
  if (has("<|start_header_id|>") && has("<|end_header_id|>")) {
    if (!has("Cutting Knowledge Date")) return ChatTemplate(Family::llama3);
    ChatTemplate t(Family::llama31);
    if (has("strftime_now")) t.date_ = today();  // Llama 3.2 / 3.3: the day of the request
    return t;
  }
  throw Error(
      fmt::format("the model's chat template is not one specdec recognises; choose a format with "
                  "--chat-template NAME ({})",
                  known_names()));
}

ChatTemplate ChatTemplate::for_model(const LoadedModel& model,
                                     const std::optional<std::string>& override_name) {
  ChatTemplate t = [&] {
    if (override_name) return named(*override_name);
    if (!model.chat_template)
      throw Error(fmt::format(
          "{}: the model carries no chat template (tokenizer.chat_template): choose one with "
          "--chat-template NAME ({})",
          model.source, known_names()));
    try {
      return detect(*model.chat_template);
    } catch (const Error& e) {
      throw Error(fmt::format("{}: {}", model.source, e.what()));
    }
  }();
  if (model.tokenizer) {
    const Tokenizer& tok = *model.tokenizer;
    if (tok.bos() >= 0) t.bos_ = tok.token_piece(tok.bos());
    if (tok.eos() >= 0) t.eos_ = tok.token_piece(tok.eos());
  }
  return t;
}

std::string_view ChatTemplate::name() const { return info(family_).name; }

ChatTemplate ChatTemplate::with_special_tokens(std::string bos, std::string eos) const {
  ChatTemplate t = *this;
  t.bos_ = std::move(bos);
  t.eos_ = std::move(eos);
  return t;
}

std::vector<std::string> ChatTemplate::end_of_turn() const {
  switch (family_) {
    case Family::chatml:
      return {"<|im_end|>"};
    case Family::llama3:
    case Family::llama31:
      return {"<|eot_id|>"};
    case Family::gemma:
      return {"<end_of_turn>"};
    case Family::phi3:
      return {"<|end|>"};
    case Family::llama2:
    case Family::mistral:
    case Family::zephyr:
      break;
  }
  return {eos_};
}

std::string ChatTemplate::render(std::span<const ChatMessage> messages,
                                 bool add_generation_prompt) const {
  return render_marked(messages, add_generation_prompt, nullptr);
}

std::string ChatTemplate::render_marked(std::span<const ChatMessage> messages, bool generation,
                                        std::vector<std::size_t>* content_ends) const {
  const std::string_view family = name();
  for (std::size_t i = 0; i < messages.size(); ++i) {
    const std::string& role = messages[i].role;
    if (role != "system" && role != "user" && role != "assistant")
      refuse(family,
             fmt::format("message {} has role '{}' (system, user or assistant)", i + 1, role));
  }
  std::string out;
  if (content_ends) content_ends->assign(messages.size(), std::string::npos);
  // Appends a message's content (as the template writes it) and records where it ends.
  const auto content = [&](std::size_t i, std::string_view text) {
    out += text;
    if (content_ends) (*content_ends)[i] = out.size();
  };
  const bool system_first = !messages.empty() && messages.front().role == "system";

  switch (family_) {
    case Family::chatml: {
      // Qwen2.5's template: a first system message, else its default one (none for plain ChatML),
      // then every message (a later system message too) as <|im_start|>role\n...<|im_end|>\n.
      if (!system_first && !default_system_.empty())
        out += "<|im_start|>system\n" + default_system_ + "<|im_end|>\n";
      for (std::size_t i = 0; i < messages.size(); ++i) {
        out += "<|im_start|>" + messages[i].role + "\n";
        content(i, messages[i].content);
        out += "<|im_end|>\n";
      }
      if (generation) out += "<|im_start|>assistant\n";
      break;
    }
    case Family::llama3:
    case Family::llama31: {
      std::size_t first = 0;
      if (family_ == Family::llama31) {
        // The system block is always written; a first system message fills it.
        out += bos_ + "<|start_header_id|>system<|end_header_id|>\n\n";
        out += "Cutting Knowledge Date: December 2023\nToday Date: " + date_ + "\n\n";
        if (system_first) {
          content(0, python_strip(messages[0].content));
          first = 1;
        }
        out += "<|eot_id|>";
      }
      for (std::size_t i = first; i < messages.size(); ++i) {
        if (family_ == Family::llama3 && i == 0) out += bos_;  // the first message carries it
        out += "<|start_header_id|>" + messages[i].role + "<|end_header_id|>\n\n";
        content(i, python_strip(messages[i].content));
        out += "<|eot_id|>";
      }
      if (generation) out += "<|start_header_id|>assistant<|end_header_id|>\n\n";
      break;
    }
    case Family::llama2: {
      // Llama-2-chat: the system message goes inside the first [INST] between <<SYS>> markers;
      // every user turn starts with BOS; contents are stripped. No generation prompt.
      const std::size_t first = system_first ? 1 : 0;
      check_alternation(family, messages.subspan(first));
      for (std::size_t i = first; i < messages.size(); ++i) {
        std::string text = messages[i].content;
        if (i == first && system_first)
          text = fmt::format("<<SYS>>\n{}\n<</SYS>>\n\n{}", messages[0].content, text);
        if (messages[i].role == "user") {
          out += bos_ + "[INST] ";
          content(i, python_strip(text));
          out += " [/INST]";
        } else if (messages[i].role == "assistant") {
          out += " ";
          content(i, python_strip(text));
          out += " " + eos_;
        }  // a system message at an odd position passes the check and is not written
      }
      break;
    }
    case Family::mistral: {
      // Mistral v0.1: BOS once, [INST] user [/INST] answer</s>; no system role.
      out += bos_;
      check_alternation(family, messages);
      for (std::size_t i = 0; i < messages.size(); ++i) {
        if (messages[i].role == "user") {
          out += "[INST] ";
          content(i, messages[i].content);
          out += " [/INST]";
        } else if (messages[i].role == "assistant") {
          content(i, messages[i].content);
          out += eos_;
        }
      }
      break;
    }
    case Family::gemma: {
      // Gemma 3's template (Gemma 1 and 2 write the same for conversations without a system
      // message, which theirs refuse): the system message opens the first turn.
      out += bos_;
      if (system_first && !system_role_)
        refuse(family,
               "the model's template (Gemma 1 / 2) has no system role ('System role not "
               "supported'); --chat-template gemma puts it in the first turn as Gemma 3 does");
      const std::size_t first = system_first ? 1 : 0;
      check_alternation(family, messages.subspan(first));
      for (std::size_t i = first; i < messages.size(); ++i) {
        out += "<start_of_turn>";
        out += messages[i].role == "assistant" ? "model" : messages[i].role;
        out += "\n";
        if (i == first && system_first) out += messages[0].content + "\n\n";
        content(i, python_strip(messages[i].content));
        out += "<end_of_turn>\n";
      }
      if (generation) out += "<start_of_turn>model\n";
      break;
    }
    case Family::phi3: {
      // Phi-3.5-mini: an empty system message is left out; without the generation prompt the
      // text ends with eos_token.
      for (std::size_t i = 0; i < messages.size(); ++i) {
        const ChatMessage& m = messages[i];
        if (m.role == "system" && m.content.empty()) continue;
        out += "<|" + m.role + "|>\n";
        content(i, m.content);
        out += "<|end|>\n";
      }
      out += generation ? std::string("<|assistant|>\n") : eos_;
      break;
    }
    case Family::zephyr: {
      // Zephyr: every message ends with eos_token and a newline; the generation prompt follows
      // the last message (so an empty conversation gets none).
      for (std::size_t i = 0; i < messages.size(); ++i) {
        out += "<|" + messages[i].role + "|>\n";
        content(i, messages[i].content);
        out += eos_ + "\n";
        if (i + 1 == messages.size() && generation) out += "<|assistant|>\n";
      }
      break;
    }
  }
  return out;
}

std::string ChatTemplate::continuation(std::span<const ChatMessage> messages) const {
  std::size_t answer = messages.size();
  for (std::size_t i = messages.size(); i-- > 0;)
    if (messages[i].role == "assistant") {
      answer = i;
      break;
    }
  if (answer == messages.size() || answer + 1 == messages.size())
    throw Error(
        "ChatTemplate::continuation: the conversation needs an assistant answer followed by "
        "another message");
  std::vector<std::size_t> ends;
  const std::string text = render_marked(messages, true, &ends);
  const std::size_t end = ends[answer];
  const std::string marker = end_of_turn().front();
  const std::size_t at = end == std::string::npos ? end : text.find(marker, end);
  if (at == std::string::npos ||
      python_strip(std::string_view(text).substr(end, at - end)).size() != 0)
    throw Error(fmt::format(
        "chat template {}: the answer is not closed by {} where the template should close it",
        name(), marker));
  return text.substr(at);
}

std::vector<token_t> tokenize_chat(const Tokenizer& tokenizer, std::string_view text,
                                   bool at_start) {
  if (!at_start) return tokenizer.encode_special(text, false);
  // Whether the tokenizer puts BOS in front of a text by itself (its add_bos setting).
  const std::vector<token_t> empty = tokenizer.encode("", true);
  const bool adds_bos = tokenizer.bos() >= 0 && !empty.empty() && empty.front() == tokenizer.bos();
  if (adds_bos) {
    const std::string_view bos = tokenizer.token_piece(tokenizer.bos());
    if (!bos.empty() && text.starts_with(bos)) text.remove_prefix(bos.size());
  }
  return tokenizer.encode_special(text, true);
}

std::vector<token_t> end_of_turn_tokens(const ChatTemplate& chat_template,
                                        const Tokenizer& tokenizer) {
  std::vector<token_t> ids;
  for (const std::string& marker : chat_template.end_of_turn()) {
    const std::vector<token_t> encoded = tokenizer.encode_special(marker, false);
    if (encoded.size() == 1 && tokenizer.token_piece(encoded[0]) == marker &&
        std::find(ids.begin(), ids.end(), encoded[0]) == ids.end())
      ids.push_back(encoded[0]);
  }
  return ids;
}

}  // namespace specdec
