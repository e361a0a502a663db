# Sources of specdec_tokenizer (paths relative to src/).
list(APPEND SOURCES
  tokenizer/utf8.cpp
  tokenizer/nfc.cpp
  tokenizer/make_tokenizer.cpp
  tokenizer/sentencepiece_bpe.cpp
  tokenizer/sentencepiece_model.cpp
  tokenizer/pretokenizer.cpp
  tokenizer/byte_level_bpe.cpp
  tokenizer/hf_tokenizer_json.cpp
  tokenizer/detokenizer.cpp)
list(APPEND PRIVATE_LIBS fmt::fmt nlohmann_json::nlohmann_json PkgConfig::PCRE2)
