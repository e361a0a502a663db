// The real trained pair (../shared/models/tinyllama-pair): its GGUF and Hugging Face layouts load
// and agree tensor by tensor, allowing for the rotary layout the README documents, and both
// tokenizers reproduce the SentencePiece ids recorded in greedy-reference.jsonl.
#include <cstring>
#include <fstream>

#include <nlohmann/json.hpp>

#include "specdec/model/gguf.hpp"
#include "specdec/model/loader.hpp"
#include "specdec_test.hpp"

using namespace specdec;
namespace fs = std::filesystem;

namespace {

/// Row r of the Hugging Face q_proj/k_proj equals this row of the GGUF (Meta, adjacent-pair)
/// matrix. The README's permutation, per head of `head_dim` rows:
///   hf = meta.view(n_heads, head_dim / 2, 2, dim).transpose(1, 2).reshape(n_heads * head_dim, dim)
/// so hf row (h, j, i) = h * head_dim + j * head_dim / 2 + i is meta row (h, i, j) = h * head_dim +
/// 2 i + j.
std::size_t meta_row_of_hf_row(std::size_t r, std::size_t head_dim) {
  const std::size_t h = r / head_dim, within = r % head_dim, half = head_dim / 2;
  const std::size_t j = within / half, i = within % half;
  return h * head_dim + 2 * i + j;
}

void check_pair_member(const fs::path& pair, const std::string& which) {
  const LoadedModel gg = load_model((pair / (which + "-f32.gguf")).string());
  const LoadedModel hf = load_model((pair / (which + "-hf")).string());
  const ModelConfig& a = gg.config;
  const ModelConfig& b = hf.config;

  // Configs agree except for the documented rotary layout.
  CHECK(a.rope_layout == RopeLayout::adjacent_pairs);
  CHECK(b.rope_layout == RopeLayout::rotate_half);
  CHECK(a.architecture == b.architecture);
  CHECK(a.vocab_size == b.vocab_size);
  CHECK(a.dim == b.dim);
  CHECK(a.n_layers == b.n_layers);
  CHECK(a.n_heads == b.n_heads);
  CHECK(a.n_kv_heads == b.n_kv_heads);
  CHECK(a.head_dim == b.head_dim);
  CHECK(a.ffn_dim == b.ffn_dim);
  CHECK(a.context_length == b.context_length);
  CHECK(a.rope_theta == b.rope_theta);
  CHECK(a.rope_scaling.kind == RopeScaling::Kind::none);
  CHECK(b.rope_scaling.kind == RopeScaling::Kind::none);
  CHECK(a.rms_norm_eps == b.rms_norm_eps);
  CHECK(a.qkv_bias == b.qkv_bias);
  CHECK(a.qk_norm == b.qk_norm);
  CHECK(a.tied_embeddings == b.tied_embeddings);
  CHECK_FALSE(a.tied_embeddings);  // README: untied output projection
  CHECK(a.bos_token == b.bos_token);
  CHECK(a.eos_token == b.eos_token);
  CHECK(a.bos_token == 1);  // README: <s>=1, </s>=2
  CHECK(a.eos_token == 2);

  // Tensor by tensor: same names, shapes and dtypes; q/k rows permuted, everything else identical.
  REQUIRE(gg.weights->tensors().size() == hf.weights->tensors().size());
  for (const auto& [name, t] : gg.weights->tensors()) {
    INFO(which << " tensor " << name);
    const Tensor* u = hf.weights->find(name);
    REQUIRE(u != nullptr);
    REQUIRE(t.shape == u->shape);
    REQUIRE(t.dtype == DType::f32);
    REQUIRE(u->dtype == DType::f32);
    REQUIRE(t.nbytes == u->nbytes);
    const bool rotary = name.ends_with("attn_q.weight") || name.ends_with("attn_k.weight");
    if (!rotary) {
      CHECK(std::memcmp(t.data, u->data, t.nbytes) == 0);
      continue;
    }
    const std::size_t rows = t.shape[0], row_bytes = t.shape[1] * sizeof(float);
    std::size_t mismatched_rows = 0, identical_rows = 0;
    for (std::size_t r = 0; r < rows; ++r) {
      const std::size_t m = meta_row_of_hf_row(r, a.head_dim);
      mismatched_rows +=
          std::memcmp(u->data + r * row_bytes, t.data + m * row_bytes, row_bytes) != 0;
      identical_rows +=
          std::memcmp(u->data + r * row_bytes, t.data + r * row_bytes, row_bytes) == 0;
    }
    CHECK(mismatched_rows == 0);
    CHECK(identical_rows < rows);  // the layouts really differ: the permutation is not a no-op
  }

  // Tokenizers: from GGUF metadata and from tokenizer.model, both give the sentencepiece ids.
  REQUIRE(gg.tokenizer != nullptr);
  REQUIRE(hf.tokenizer != nullptr);
  CHECK(gg.tokenizer->vocab_size() == a.vocab_size);
  std::ifstream prompts(pair / "eval-prompts.jsonl"), reference(pair / "greedy-reference.jsonl");
  std::string prompt_line, reference_line;
  std::size_t checked = 0;
  while (std::getline(prompts, prompt_line) && std::getline(reference, reference_line)) {
    const auto text = nlohmann::json::parse(prompt_line)["text"].get<std::string>();
    const auto ids =
        nlohmann::json::parse(reference_line)["prompt_ids"].get<std::vector<token_t>>();
    INFO(which << " prompt: " << text);
    CHECK(gg.tokenizer->encode(text) == ids);
    CHECK(hf.tokenizer->encode(text) == ids);
    ++checked;
  }
  CHECK(checked == 40);

  const std::string report = describe_model(gg);
  CHECK(report.find("blk.0.attn_q.weight") != std::string::npos);
  CHECK(report.find("adjacent_pairs") != std::string::npos);
}

}  // namespace

TEST_CASE("tinyllama pair: GGUF and Hugging Face layouts agree", "[tinyllama]") {
  const fs::path pair = test::tinyllama_pair();
  if (pair.empty()) {
    WARN("tinyllama-pair not found: skipped");
    return;
  }
  SECTION("target") { check_pair_member(pair, "target"); }
  SECTION("draft") { check_pair_member(pair, "draft"); }
}

TEST_CASE("tinyllama pair: configs match the README", "[tinyllama]") {
  const fs::path pair = test::tinyllama_pair();
  if (pair.empty()) {
    WARN("tinyllama-pair not found: skipped");
    return;
  }
  // README "Architecture" table: dim, layers, heads, KV heads, head dim, FFN, vocab, context.
  const ModelConfig t = gguf_model_config(read_gguf((pair / "target-f32.gguf").string()));
  CHECK(t.dim == 288);
  CHECK(t.n_layers == 6);
  CHECK(t.n_heads == 6);
  CHECK(t.n_kv_heads == 2);
  CHECK(t.head_dim == 48);
  CHECK(t.ffn_dim == 768);
  CHECK(t.vocab_size == 4096);
  CHECK(t.context_length == 256);
  const ModelConfig d = gguf_model_config(read_gguf((pair / "draft-f32.gguf").string()));
  CHECK(d.dim == 128);
  CHECK(d.n_layers == 2);
  CHECK(d.n_heads == 4);
  CHECK(d.n_kv_heads == 2);
  CHECK(d.head_dim == 32);
  CHECK(d.ffn_dim == 384);
  // README parameter counts: 7,671,456 (target) and 1,442,432 (draft).
  for (const auto& [file, params] :
       {std::pair{"target-f32.gguf", 7671456}, std::pair{"draft-f32.gguf", 1442432}}) {
    const LoadedModel m = load_gguf_model(read_gguf((pair / file).string()));
    std::uint64_t n = 0;
    for (const auto& [name, tensor] : m.weights->tensors()) n += tensor.elements();
    CHECK(n == static_cast<std::uint64_t>(params));
  }
}
