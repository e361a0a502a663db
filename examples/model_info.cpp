// specdec-info: prints what specdec reads from a model file or folder — format, architecture,
// config, the tensor table and the tokenizer — until the `specdec info` command of the CLI exists.
//
//   specdec-info MODEL            MODEL: a .gguf file or a Hugging Face folder
//   specdec-info --metadata MODEL also every GGUF metadata key
//
// When loading fails (say a GGUF with tensor types specdec cannot compute with), the error is
// printed and, for GGUF files, the raw metadata and tensor table still are, since they parsed.
#include <cstdio>
#include <cstring>
#include <string>

#include <fmt/format.h>

#include "specdec/model/gguf.hpp"
#include "specdec/model/loader.hpp"

namespace {

bool is_gguf(const std::string& path) {
  std::FILE* f = std::fopen(path.c_str(), "rb");
  if (f == nullptr) return false;
  char magic[4] = {};
  const bool ok = std::fread(magic, 1, 4, f) == 4 && std::memcmp(magic, "GGUF", 4) == 0;
  std::fclose(f);
  return ok;
}

void print_raw_gguf(const specdec::GgufFile& g) {
  fmt::print("{}", specdec::describe_gguf_metadata(g));
  fmt::print("tensors as stored:\n");
  for (const auto& t : g.tensors) {
    const char* type = specdec::ggml_type_name(t.ggml_type);
    fmt::print("  {:<40} {:<8} [{}] {} bytes{}\n", t.name, type ? type : "?",
               fmt::join(t.shape, ", "), t.nbytes,
               t.dtype ? "" : "  (type not supported by specdec)");
  }
}

}  // namespace

int main(int argc, char** argv) {
  bool metadata = false;
  std::string path;
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    if (arg == "--metadata") {
      metadata = true;
    } else if (arg == "-h" || arg == "--help" || !path.empty()) {
      fmt::print(stderr, "usage: {} [--metadata] MODEL   (a .gguf file or a Hugging Face folder)\n",
                 argv[0]);
      return arg == "-h" || arg == "--help" ? 0 : 2;
    } else {
      path = arg;
    }
  }
  if (path.empty()) {
    fmt::print(stderr, "usage: {} [--metadata] MODEL   (a .gguf file or a Hugging Face folder)\n",
               argv[0]);
    return 2;
  }
  try {
    const specdec::LoadedModel model = specdec::load_model(path);
    fmt::print("{}", specdec::describe_model(model));
    if (metadata && is_gguf(path))
      fmt::print("\n{}", specdec::describe_gguf_metadata(specdec::read_gguf(path)));
    return 0;
  } catch (const specdec::Error& e) {
    fmt::print(stderr, "error: {}\n", e.what());
    if (!is_gguf(path)) return 1;
    try {
      print_raw_gguf(specdec::read_gguf(path));  // the file parses even if it cannot be loaded
    } catch (const specdec::Error&) {
      // already reported above
    }
    return 1;
  }
}
