# Sources of specdec_tokenizer (paths relative to src/).
list(APPEND SOURCES tokenizer/detokenizer.cpp)
list(APPEND PRIVATE_LIBS fmt::fmt nlohmann_json::nlohmann_json PkgConfig::PCRE2)
