// Tokenizer throughput: encode and decode of ~100 KB texts with the pair's SentencePiece model and
// the byte-level fixture tokenizers (tests/data/tokenizer), including the pathological inputs for
// BPE (one 100 KB run of spaces or of one letter: a single huge word). Baseline in the same run:
// a UTF-8 validation pass over the same bytes (touches every byte once).
//
//   build/.../bench/specdec_bench_tokenizer --benchmark_repetitions=5
//   --benchmark_report_aggregates_only=true

#include <benchmark/benchmark.h>

#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "specdec/model/tokenizer.hpp"
#include "utf8.hpp"  // src/tokenizer (internal): the baseline

namespace {

const std::filesystem::path kData = std::filesystem::path(SPECDEC_TEST_DATA) / "tokenizer";

/// The fixture text set (prose, code, CJK, emoji, whitespace, ...) repeated to 100 KiB.
const std::string& mixed_text() {
  static const std::string text = [] {
    std::ifstream in(kData / "texts.json");
    const auto j = nlohmann::json::parse(in);
    std::string all;
    for (const auto& t : j.at("texts")) {
      if (t.contains("text")) all += t.at("text").get<std::string>() + "\n";
    }
    std::string out;
    while (out.size() < 100 * 1024) out += all;
    out.resize(100 * 1024);
    while (!specdec::detail::utf8_is_valid(out)) out.pop_back();  // do not cut a character
    return out;
  }();
  return text;
}

const specdec::Tokenizer& tokenizer(int which) {
  static const auto spm = specdec::make_tokenizer(
      specdec::read_sentencepiece_model((kData / "spm" / "tinyllama-pair.model").string()));
  static const auto llama3 = specdec::make_tokenizer(
      specdec::read_hf_tokenizer_json((kData / "llama3-bpe" / "tokenizer.json").string()));
  static const auto qwen2 = specdec::make_tokenizer(
      specdec::read_hf_tokenizer_json((kData / "qwen2-bpe" / "tokenizer.json").string()));
  return which == 0 ? *spm : which == 1 ? *llama3 : *qwen2;
}

const std::string& input(int kind) {
  static const std::string spaces(100 * 1024, ' '), letters(100 * 1024, 'a');
  return kind == 0 ? mixed_text() : kind == 1 ? spaces : letters;
}

void set_labels(benchmark::State& state, std::size_t bytes, std::size_t tokens) {
  static const char* kTok[] = {"spm-pair", "llama3-bpe", "qwen2-bpe(NFC)"};
  static const char* kText[] = {"mixed", "spaces", "one-letter"};
  state.SetLabel(std::string(kTok[state.range(0)]) + " " + kText[state.range(1)] + " " +
                 std::to_string(tokens) + " tokens");
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * bytes));
}

void BM_Encode(benchmark::State& state) {
  const auto& tok = tokenizer(static_cast<int>(state.range(0)));
  const std::string& text = input(static_cast<int>(state.range(1)));
  std::size_t tokens = 0;
  for (auto _ : state) {
    const auto ids = tok.encode(text, true);
    tokens = ids.size();
    benchmark::DoNotOptimize(ids.data());
  }
  set_labels(state, text.size(), tokens);
}
BENCHMARK(BM_Encode)->ArgsProduct({{0, 1, 2}, {0, 1, 2}})->Unit(benchmark::kMillisecond);

void BM_Decode(benchmark::State& state) {
  const auto& tok = tokenizer(static_cast<int>(state.range(0)));
  const auto ids = tok.encode(input(static_cast<int>(state.range(1))), true);
  for (auto _ : state) {
    const std::string text = tok.decode(ids);
    benchmark::DoNotOptimize(text.data());
  }
  set_labels(state, input(static_cast<int>(state.range(1))).size(), ids.size());
}
BENCHMARK(BM_Decode)->ArgsProduct({{0, 1, 2}, {0}})->Unit(benchmark::kMillisecond);

void BM_Utf8ValidateBaseline(benchmark::State& state) {
  const std::string& text = mixed_text();
  for (auto _ : state) benchmark::DoNotOptimize(specdec::detail::utf8_is_valid(text));
  state.SetBytesProcessed(static_cast<std::int64_t>(state.iterations() * text.size()));
}
BENCHMARK(BM_Utf8ValidateBaseline)->Unit(benchmark::kMillisecond);

}  // namespace

BENCHMARK_MAIN();
