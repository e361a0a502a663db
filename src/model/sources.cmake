# Sources of specdec_model (paths relative to src/).
list(APPEND SOURCES model/config.cpp)
list(APPEND PUBLIC_LIBS specdec_tokenizer)
list(APPEND PRIVATE_LIBS fmt::fmt nlohmann_json::nlohmann_json)
