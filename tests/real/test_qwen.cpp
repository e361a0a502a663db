// Conformance on the real Qwen2.5-Coder pair (official Q4_K_M GGUF files, issue 9 item 6):
//   1. llama-quantize's recipe (quant_mix.hpp) reproduces the type of every tensor of both files;
//   2. the CPU backend's logits agree with an independent numpy forward over the gguf.quants-
//      dequantised weights (tools/reference_forward.py; fixtures in tests/data/real/);
//   3. its greedy continuations of the code prompts equal the reference's up to the first
//      near-tie;
//   4. greedy speculative decoding (1.5B target, 0.5B draft) emits exactly the target-only
//      greedy tokens.
// 2-4 run on the official files and on their Q8_0 re-encodings by convert_gguf (made here, in a
// temporary folder), which the CPU backend could already run before it had K-quant kernels.
//
// The files are found in $SPECDEC_MODELS (default ~/.cache/specdec-models); when they are
// absent each test prints SKIPPED and exits with 77, which ctest reports as skipped.
//
// Tolerance. The CPU backend, like llama.cpp, quantises the activations to 8 bits before each
// quantised matrix product, so its logits differ from a float forward by far more than rounding.
// Both implementations were measured against the numpy reference on the same positions
// (tools/reference_forward.py --llama-cpp; docs/model-files.md has the table):
//   * positions >= 1: llama.cpp's largest error over the stored logits is 1.0-3.5% of the
//     position's largest |logit|, specdec's (Q8_0 files) 1.6% (0.5B) and 0.8% (1.5B); the largest
//     error of any of the 16 best logits is <= 0.26 (llama.cpp). kLogitTolerance = 5% of max
//     |logit|.
//   * position 0 (the logits after the first token alone): Qwen2.5 puts "massive activations"
//     (residual values in the thousands in a few channels) on the first token, and an 8-bit
//     block holding one of them rounds its other values coarsely: llama.cpp is off by 55% of
//     max |logit| there on the 1.5B Q4_K_M file (its argmax differs), 5.8% on the Q8_0 one.
//     kFirstPositionTolerance = 60% only guards against garbage; later positions (which attend
//     to position 0's keys and values) carry the real check.
//   * greedy: continuations are compared token by token; where they first differ, the
//     reference's top-2 gap at that step must be below kGreedyMargin = 0.75 logits, about three
//     times the largest error measured on a top-16 logit (a near-tie that 8-bit activations may
//     legitimately flip; llama.cpp itself parts from the reference at gaps of 0.069 and 0.010).
//     After that step the contexts differ and the comparison stops.
// An error beyond these bounds is not activation rounding but a bug: a wrong scale, a misplaced
// block or rotary pair gives errors of the order of the logits themselves.
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "qwen_files.hpp"
#include "specdec/cpu/transformer.hpp"
#include "specdec/decoder/autoregressive.hpp"
#include "specdec/decoder/speculative.hpp"
#include "specdec/model/gguf.hpp"
#include "specdec/model/gguf_writer.hpp"
#include "specdec/model/loader.hpp"
#include "specdec/model/quant_mix.hpp"
#include "specdec_test.hpp"

using specdec::token_t;
using specdec::test::kSizes;
using specdec::test::official;
using specdec::test::require_models;
using specdec::test::skip_under_sanitizer;
namespace fs = std::filesystem;

namespace {

constexpr double kLogitTolerance = 0.05;         // of max |logit| at the position (see above)
constexpr double kFirstPositionTolerance = 0.6;  // position 0: massive activations (see above)
constexpr double kGreedyMargin = 0.75;           // logits (see above)
nlohmann::json fixture(const std::string& stem) {
  std::ifstream in(specdec::test::test_data() / "real" / (stem + ".json"));
  REQUIRE(in.good());
  return nlohmann::json::parse(in);
}

/// The Q8_0 re-encodings, written once per process into a temporary folder removed at exit.
struct Reencoded {
  fs::path dir = fs::temp_directory_path() / fmt::format("specdec-qwen-q8_0-{}", ::getpid());
  Reencoded() {
    fs::create_directories(dir);
    for (const char* size : kSizes)
      specdec::convert_gguf(official(size).string(), path(size).string(),
                            *specdec::find_quant_preset("Q8_0"));
  }
  ~Reencoded() { fs::remove_all(dir); }
  [[nodiscard]] fs::path path(const char* size) const {
    return dir / fmt::format("qwen2.5-coder-{}-instruct-q8_0.gguf", size);
  }
};

specdec::cpu::Options cpu_options() {
  specdec::cpu::Options o;
  o.threads = 2;
  return o;
}

/// A CPU Transformer, or a failure that says why the backend refused the file.
std::unique_ptr<specdec::cpu::Transformer> make_model(const specdec::LoadedModel& m,
                                                      const fs::path& file) {
  try {
    return std::make_unique<specdec::cpu::Transformer>(m, cpu_options());
  } catch (const specdec::Error& e) {
    FAIL("the CPU backend cannot run " << file.filename().string() << ": " << e.what());
  }
  return nullptr;
}

specdec::GenerationConfig greedy(std::size_t n) {
  specdec::GenerationConfig cfg;
  cfg.max_new_tokens = n;
  cfg.sampling.temperature = 0;
  cfg.stop_at_eos = false;  // the reference ignores EOS
  return cfg;
}

/// Largest |a - b| over the stored ids, and the largest |b| (the scale of the position).
struct RowError {
  double max_abs = 0, scale = 0;
  [[nodiscard]] double relative() const { return max_abs / scale; }
};
RowError row_error(std::span<const float> ours, const nlohmann::json& ref_position,
                   const std::vector<token_t>& sample_ids) {
  RowError e;
  const auto top_ids = ref_position.at("top_ids").get<std::vector<token_t>>();
  const auto top = ref_position.at("top_logits").get<std::vector<double>>();
  const auto sample = ref_position.at("sample_logits").get<std::vector<double>>();
  const auto add = [&](token_t id, double ref) {
    e.max_abs = std::max(e.max_abs, std::fabs(ours[static_cast<std::size_t>(id)] - ref));
    e.scale = std::max(e.scale, std::fabs(ref));
  };
  for (std::size_t i = 0; i < top_ids.size(); ++i) add(top_ids[i], top[i]);
  for (std::size_t i = 0; i < sample_ids.size(); ++i) add(sample_ids[i], sample[i]);
  return e;
}

/// Same measure between two fixtures' rows (llama.cpp against the numpy reference).
double fixture_error(const nlohmann::json& a, const nlohmann::json& b) {
  double diff = 0, scale = 0;
  const auto sa = a.at("sample_logits").get<std::vector<double>>();
  const auto sb = b.at("sample_logits").get<std::vector<double>>();
  for (std::size_t i = 0; i < sa.size(); ++i) {
    diff = std::max(diff, std::fabs(sa[i] - sb[i]));
    scale = std::max(scale, std::fabs(sb[i]));
  }
  return diff / std::max(scale, std::fabs(b.at("max").get<double>()));
}

/// Checks 2-3 for one model file against its fixture; returns its greedy continuations.
void check_model(const fs::path& file, const nlohmann::json& fx, specdec::cpu::Transformer& model,
                 const specdec::Tokenizer& tok) {
  const std::string name = file.filename().string();
  // The fixture's ids are specdec's tokenisation of the prompt (checked so that a tokenizer
  // change shows here rather than as a logits mismatch).
  const auto prompt = fx.at("prompt_tokens").get<std::vector<token_t>>();
  CHECK(tok.encode(fx.at("prompt").get<std::string>()) == prompt);

  model.reset();
  const specdec::LogitsView logits = model.forward(prompt);
  const auto sample_ids = fx.at("sample_ids").get<std::vector<token_t>>();
  double worst = 0, worst_llama = 0;
  for (std::size_t p = 0; p < fx.at("positions").size(); ++p) {
    const auto& ref = fx.at("positions")[p];
    const auto pos = ref.at("position").get<std::size_t>();
    const RowError e = row_error(logits.row(pos), ref, sample_ids);
    if (pos > 0) worst = std::max(worst, e.relative());
    INFO(name << " position " << pos << ": max |specdec - reference| " << e.max_abs << " = "
              << e.relative() << " of max |logit| " << e.scale);
    CHECK(e.relative() <= (pos == 0 ? kFirstPositionTolerance : kLogitTolerance));
    // The argmax where no error within the bounds can change it.
    const auto top = ref.at("top_logits").get<std::vector<double>>();
    if (pos > 0 && top[0] - top[1] > kGreedyMargin) {
      const auto row = logits.row(pos);
      const auto argmax = std::max_element(row.begin(), row.end()) - row.begin();
      CHECK(argmax == ref.at("argmax").get<std::ptrdiff_t>());
    }
    if (fx.contains("llama_cpp") && pos > 0)
      worst_llama = std::max(worst_llama, fixture_error(fx["llama_cpp"]["positions"][p], ref));
  }
  std::cout << fmt::format(
      "{}: logits vs numpy reference, positions >= 1: worst {:.4f} of max "
      "|logit| (llama.cpp: {:.4f}; bound {})\n",
      name, worst, worst_llama, kLogitTolerance);

  specdec::AutoregressiveDecoder dec(model);
  for (const auto& g : fx.at("greedy")) {
    const auto ids = g.at("prompt_tokens").get<std::vector<token_t>>();
    const auto expected = g.at("tokens").get<std::vector<token_t>>();
    const auto gaps = g.at("top2_gap").get<std::vector<double>>();
    model.reset();
    const auto got = dec.generate(ids, greedy(expected.size())).tokens;
    REQUIRE(got.size() == expected.size());
    // Token by token; the first difference must be a near-tie of the reference.
    std::size_t same = 0;
    while (same < expected.size() && got[same] == expected[same]) ++same;
    if (same < expected.size()) {
      INFO(name << " prompt " << g.at("prompt") << ": specdec's token " << got[same]
                << " differs from the reference's " << expected[same] << " at step " << same
                << ", where the reference's top-2 gap is " << gaps[same]);
      CHECK(gaps[same] < kGreedyMargin);
    }
    std::cout << fmt::format(
        "{}: greedy {:?}: {} of {} tokens equal{}\n", name,
        g.at("prompt").get<std::string>().substr(0, 24), same, expected.size(),
        same < expected.size() ? fmt::format(" (then a near-tie: gap {})", gaps[same]) : "");
  }
}

/// 2-4 for one pair of files (official or re-encoded).
void check_pair(const fs::path& draft_file, const fs::path& target_file,
                const std::string& draft_fixture, const std::string& target_fixture) {
  const specdec::LoadedModel draft_m = specdec::load_model(draft_file.string());
  const specdec::LoadedModel target_m = specdec::load_model(target_file.string());
  REQUIRE(target_m.tokenizer != nullptr);
  const auto draft = make_model(draft_m, draft_file);
  const auto target = make_model(target_m, target_file);
  check_model(draft_file, fixture(draft_fixture), *draft, *draft_m.tokenizer);
  const nlohmann::json target_fx = fixture(target_fixture);
  check_model(target_file, target_fx, *target, *target_m.tokenizer);

  // 4. Greedy speculative == greedy target-only, on the same prompts.
  specdec::AutoregressiveDecoder baseline(*target);
  std::size_t drafted = 0, accepted = 0;
  for (const auto& g : target_fx.at("greedy")) {
    const auto ids = g.at("prompt_tokens").get<std::vector<token_t>>();
    target->reset();
    const auto expected = baseline.generate(ids, greedy(32)).tokens;
    target->reset();
    draft->reset();
    specdec::SpeculativeDecoder spec(*draft, *target, specdec::SpeculativeOptions{.k = 4});
    const specdec::GenerationResult r = spec.generate(ids, greedy(32));
    INFO("prompt " << g.at("prompt"));
    CHECK(r.tokens == expected);
    drafted += r.stats.drafted;
    accepted += r.stats.accepted;
  }
  std::cout << fmt::format("speculative (k = 4): acceptance {}/{}\n", accepted, drafted);
}

}  // namespace

TEST_CASE("qwen: llama-quantize's recipe gives every tensor of the official files its type",
          "[real-models]") {
  require_models();
  for (const char* size : kSizes) {
    const specdec::GgufFile g = specdec::read_gguf(official(size).string());
    const specdec::QuantPreset* preset = specdec::find_quant_preset("Q4_K_M");
    REQUIRE(g.get_uint("general.file_type") == preset->file_type);
    specdec::MixModel model;
    const std::string arch = *g.get_string("general.architecture");
    model.architecture = arch;
    model.layers = static_cast<std::uint32_t>(*g.get_uint("qwen2.block_count"));
    model.heads = static_cast<std::uint32_t>(*g.get_uint("qwen2.attention.head_count"));
    model.kv_heads = static_cast<std::uint32_t>(*g.get_uint("qwen2.attention.head_count_kv"));
    model.has_output = g.find_tensor("output.weight") != nullptr;
    // These files were made by a llama.cpp that counted attn_v / ffn_down tensors in the order
    // of its input file, where layers sort as strings (blk.0, blk.1, blk.10, ...): that count,
    // not the layer number, decides use_more_bits. Today's llama.cpp visits layers in order.
    std::vector<std::string> names;
    for (const auto& t : g.tensors) names.push_back(t.name);
    std::sort(names.begin(), names.end());
    std::map<std::string, int> ordinal;
    std::map<std::string, int> seen;
    for (const auto& n : names) {
      const std::string kind = n.find("attn_v.weight") != std::string::npos     ? "attn_v"
                               : n.find("ffn_down.weight") != std::string::npos ? "ffn_down"
                                                                                : "";
      if (!kind.empty()) ordinal[n] = seen[kind]++;
    }
    std::size_t mismatches = 0, differ_by_layer_order = 0;
    for (const auto& t : g.tensors) {
      specdec::MixTensor mt{t.name, t.shape.size(), t.shape.back(), specdec::DType::f32};
      const int index = ordinal.count(t.name) ? ordinal[t.name] : -1;
      mt.index = index;
      const specdec::DType as_made = specdec::quant_mix_type(*preset, model, mt);
      mt.index = -1;  // today's llama.cpp: the layer number
      if (specdec::quant_mix_type(*preset, model, mt) != as_made) ++differ_by_layer_order;
      const char* in_file = specdec::ggml_type_name(t.ggml_type);
      if (t.shape.size() < 2) continue;  // the recipe keeps vectors as they are (F32 here)
      if (in_file != std::string(specdec::dtype_name(as_made)) && mismatches++ < 5)
        UNSCOPED_INFO(t.name << ": file " << in_file << ", recipe " << dtype_name(as_made));
    }
    INFO(official(size).filename().string());
    CHECK(mismatches == 0);
    std::cout << fmt::format(
        "{}: every tensor type reproduced; {} tensors would differ under "
        "today's layer-ordered count\n",
        official(size).filename().string(), differ_by_layer_order);
  }
}

TEST_CASE("qwen Q8_0 re-encoding: logits, greedy and speculative agree with the reference",
          "[real-models]") {
  require_models();
  skip_under_sanitizer();
  static const Reencoded files;
  check_pair(files.path("0.5b"), files.path("1.5b"), "qwen2.5-coder-0.5b-instruct-q8_0",
             "qwen2.5-coder-1.5b-instruct-q8_0");
}

TEST_CASE("qwen official Q4_K_M: logits, greedy and speculative agree with the reference",
          "[real-models]") {
  require_models();
  skip_under_sanitizer();
  check_pair(official("0.5b"), official("1.5b"), "qwen2.5-coder-0.5b-instruct-q4_k_m",
             "qwen2.5-coder-1.5b-instruct-q4_k_m");
}

// Issue 10: speculative decoding that pays on the real pair. On one completion and one editing
// prompt of the committed bench set (bench/prompts/qwen-code.jsonl, chat template written out),
// greedy speculative decoding emits exactly the target-only tokens with every drafter: the 0.5B
// draft, the draft with its head restricted to the first 32768 ids (cpu::Options::head_tokens),
// prompt lookup, and lookup with the restricted draft behind it. It also prints what it pays:
// the draft-model decoders' decode time against target-only's (interleaved, the best of two runs
// each, both threads; the bench measures 1.3-2x on these prompts: docs/benchmarks.md).
TEST_CASE("qwen official Q4_K_M: every drafter's greedy output equals target-only",
          "[real-models]") {
  require_models();
  skip_under_sanitizer();
  const specdec::LoadedModel draft_m = specdec::load_model(official("0.5b").string());
  const specdec::LoadedModel target_m = specdec::load_model(official("1.5b").string());
  specdec::cpu::Options options = cpu_options();
  options.context_length = 1024;
  specdec::cpu::Transformer target(target_m, options);
  specdec::cpu::Transformer draft(draft_m, options);
  options.head_tokens = specdec::cpu::first_tokens(32768);
  specdec::cpu::Transformer draft_head(draft_m, options);

  std::ifstream in(fs::path(SPECDEC_REPO_ROOT) / "bench" / "prompts" / "qwen-code.jsonl");
  REQUIRE(in.good());
  std::map<std::string, std::string> first_of;  // domain -> its first prompt
  for (std::string line; std::getline(in, line);) {
    const auto j = nlohmann::json::parse(line);
    first_of.try_emplace(j.at("domain").get<std::string>(), j.at("text").get<std::string>());
  }
  REQUIRE(first_of.size() == 2);

  specdec::GenerationConfig cfg = greedy(64);
  cfg.stop_at_eos = true;
  for (const auto& [domain, text] : first_of) {
    const std::vector<token_t> ids = target_m.tokenizer->encode(text, true);
    specdec::AutoregressiveDecoder baseline(target);
    specdec::SpeculativeDecoder with_draft(draft, target, specdec::SpeculativeOptions{.k = 4});
    specdec::SpeculativeDecoder with_head(draft_head, target, specdec::SpeculativeOptions{.k = 4});
    specdec::NGramDrafter ngram;
    specdec::SpeculativeDecoder with_lookup(ngram, target, specdec::SpeculativeOptions{.k = 8});
    specdec::LookupThenModelDrafter<specdec::cpu::Transformer> both(
        draft_head, {.max_ngram = 3, .min_ngram = 2});
    specdec::SpeculativeDecoder with_both(both, target, specdec::SpeculativeOptions{.k = 4});

    double base_seconds = 1e30, draft_seconds = 1e30, head_seconds = 1e30;
    std::vector<token_t> expected;
    for (int rep = 0; rep < 2; ++rep) {
      const auto b = baseline.generate(ids, cfg);
      const auto d = with_draft.generate(ids, cfg);
      const auto h = with_head.generate(ids, cfg);
      expected = b.tokens;
      INFO(domain << " prompt");
      CHECK(d.tokens == expected);
      CHECK(h.tokens == expected);
      base_seconds = std::min(base_seconds, b.stats.decode_seconds);
      draft_seconds = std::min(draft_seconds, d.stats.decode_seconds);
      head_seconds = std::min(head_seconds, h.stats.decode_seconds);
    }
    INFO(domain << " prompt");
    CHECK(with_lookup.generate(ids, cfg).tokens == expected);
    CHECK(with_both.generate(ids, cfg).tokens == expected);
    {
      // Issue 21: suffix trees of up to 16 nodes, each scored by one forward_tree.
      specdec::SuffixDrafter suffix;
      specdec::SpeculativeDecoder with_trees(suffix, target,
                                             specdec::SpeculativeOptions{.max_tree_nodes = 16});
      const auto t = with_trees.generate(ids, cfg);
      CHECK(t.tokens == expected);
      std::cout << fmt::format("{}: suffix trees <= 16: {} rounds, {} of {} nodes accepted\n",
                               domain, t.stats.rounds, t.stats.accepted, t.stats.drafted);
      // The draft model's trees (head 32768), up to 8 nodes.
      specdec::ModelTreeDrafter<specdec::cpu::Transformer> trees(draft_head);
      specdec::SpeculativeDecoder with_draft_trees(
          trees, target, specdec::SpeculativeOptions{.max_tree_nodes = 8});
      const auto d = with_draft_trees.generate(ids, cfg);
      CHECK(d.tokens == expected);
      std::cout << fmt::format("{}: draft trees <= 8: {} rounds, {} of {} nodes accepted\n", domain,
                               d.stats.rounds, d.stats.accepted, d.stats.drafted);
      // At T = 0.8 the draft's candidates are drawn from its distribution (sampled trees, the
      // law: tests/decoder/test_distribution.cpp): reproducible from the seed, and accepted.
      specdec::GenerationConfig sampled = cfg;
      sampled.sampling.temperature = 0.8f;
      sampled.seed = 7;
      sampled.max_new_tokens = 32;
      const auto s1 = with_draft_trees.generate(ids, sampled);
      const auto s2 = with_draft_trees.generate(ids, sampled);
      CHECK(s1.tokens == s2.tokens);
      CHECK(s1.stats.accepted > 0);
      std::cout << fmt::format(
          "{}: sampled draft trees <= 8, T = 0.8: {} rounds, {} of {} nodes "
          "accepted\n",
          domain, s1.stats.rounds, s1.stats.accepted, s1.stats.drafted);
    }
    {
      // With llama.cpp-style penalties, a bias and log-probabilities: still token for token,
      // and the target's log-probabilities agree (verify rows against single-token rows).
      specdec::GenerationConfig penalised = cfg;
      penalised.max_new_tokens = 32;
      penalised.penalties.repeat = 1.15f;
      penalised.penalties.presence = 0.3f;
      const token_t banned = expected.at(1);
      penalised.penalties.logit_bias = {{banned, -std::numeric_limits<float>::infinity()}};
      penalised.logprobs = true;
      penalised.top_logprobs = 3;
      const auto b = baseline.generate(ids, penalised);
      const auto d = with_draft.generate(ids, penalised);
      CHECK(std::find(b.tokens.begin(), b.tokens.end(), banned) == b.tokens.end());
      CHECK(d.tokens == b.tokens);
      CHECK(with_lookup.generate(ids, penalised).tokens == b.tokens);
      REQUIRE(d.logprobs.size() == b.logprobs.size());
      for (std::size_t i = 0; i < b.logprobs.size(); ++i) {
        CHECK(d.logprobs[i].token == b.logprobs[i].token);
        CHECK(std::fabs(d.logprobs[i].logprob - b.logprobs[i].logprob) < 2e-3);
      }
    }
    std::cout << fmt::format(
        "{}: {} tokens; decode target-only {:.2f} s, draft k=4 {:.2f} s ({:.2f}x), head-32768 "
        "draft k=4 {:.2f} s ({:.2f}x)\n",
        domain, expected.size(), base_seconds, draft_seconds, base_seconds / draft_seconds,
        head_seconds, base_seconds / head_seconds);
    // Reported, not asserted: a timed assertion fails on a busy or throttled machine (a clean
    // CI run measured the draft at 0.83x once, 1.34x on the rerun); the bench measures speed.
    if (draft_seconds >= base_seconds || head_seconds >= base_seconds)
      WARN(domain << ": speculative decoding did not pay in this run (see above)");
  }
}

// Issue 21: a token tree on the real target. After a code prompt, a 16-node tree holds the
// target's own greedy continuation as one branch and decoys beside it (other tokens at several
// depths, a second root); every node's logits row must be bitwise the last row of a plain
// forward of its path (the same Q4_K/Q6_K kernels, the ancestor lists in the attention), and
// keeping the greedy branch must leave the cache forward() would have left.
TEST_CASE("qwen official Q4_K_M: a token tree scores every node bitwise as its path alone",
          "[real-models]") {
  require_models();
  skip_under_sanitizer();
  const specdec::LoadedModel target_m = specdec::load_model(official("1.5b").string());
  specdec::cpu::Options options = cpu_options();
  options.context_length = 512;
  specdec::cpu::Transformer tree_model(target_m, options);
  specdec::cpu::Transformer plain(target_m, options);
  const std::vector<token_t> prompt = target_m.tokenizer->encode(
      "def fibonacci(n):\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n", true);

  // The target's greedy continuation: 6 tokens.
  const auto argmax = [](const float* row, std::size_t vocab) {
    return static_cast<token_t>(std::max_element(row, row + vocab) - row);
  };
  const std::size_t vocab = plain.vocab_size();
  std::vector<token_t> greedy_tokens;
  specdec::LogitsView l = plain.forward(prompt);
  for (int i = 0; i < 6; ++i) {
    greedy_tokens.push_back(argmax(l.data + (l.rows - 1) * vocab, vocab));
    l = plain.forward(std::span(&greedy_tokens.back(), 1));
  }
  // Nodes 0..5: the greedy chain; the rest: decoys hanging off it, and a second root.
  const auto g = [&](std::size_t i) { return greedy_tokens[i]; };
  const std::vector<token_t> tokens{g(0), g(1), g(2), g(3), g(4), g(5), 1000, 2000,
                                    g(2), 3000, g(5), 42,   g(1), 4000, g(3), 17};
  const std::vector<std::int32_t> parents{-1, 0, 1, 2, 3, 4, -1, 0, 7, 1, 3, 2, 6, 12, 11, 5};
  tree_model.forward(prompt);
  const specdec::LogitsView tree = tree_model.forward_tree(tokens, parents);
  const std::vector<float> rows(tree.data, tree.data + tree.rows * vocab);
  for (std::size_t node = 0; node < tokens.size(); ++node) {
    std::vector<token_t> path;
    for (std::int64_t a = static_cast<std::int64_t>(node); a >= 0;
         a = parents[static_cast<std::size_t>(a)])
      path.insert(path.begin(), tokens[static_cast<std::size_t>(a)]);
    plain.rollback(prompt.size());
    const specdec::LogitsView p = plain.forward(path);
    INFO("node " << node << " at depth " << path.size() - 1);
    CHECK(std::memcmp(rows.data() + node * vocab, p.data + (p.rows - 1) * vocab,
                      vocab * sizeof(float)) == 0);
  }
  // Keep the greedy branch but its last node, then decode one token: the row of plain decoding.
  tree_model.accept_path(std::vector<std::size_t>{0, 1, 2, 3, 4});
  REQUIRE(tree_model.cached() == prompt.size() + 5);
  const specdec::LogitsView next = tree_model.forward(std::span(&greedy_tokens[5], 1));
  plain.rollback(prompt.size());
  const specdec::LogitsView want = plain.forward(greedy_tokens);
  CHECK(std::memcmp(next.data, want.data + 5 * vocab, vocab * sizeof(float)) == 0);
}
