#pragma once
// The bundled demo pair (models/README.md says how these files were made).

namespace specdec::cli {

inline constexpr const char* kDemoTarget = "target-q8_0.gguf";
inline constexpr const char* kDemoDraft = "draft-q8_0.gguf";
/// The held-out eval prompts of the pair (20 code, 20 prose), the default prompts of `bench`.
inline constexpr const char* kDemoPrompts = "eval-prompts.jsonl";

}  // namespace specdec::cli
