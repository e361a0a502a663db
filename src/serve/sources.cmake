# Sources of specdec_serve (paths relative to src/): the serving engine's Job, the OpenAI API
# (request parsing, response building), the metrics and the HTTP layer (Boost.Beast; TLS with OpenSSL). The engine
# itself is a template over the model type (include/specdec/serve/engine.hpp); the routes are the
# front-end's (the CLI's specdec serve).
list(APPEND SOURCES
  serve/job.cpp
  serve/api.cpp
  serve/metrics.cpp
  serve/http.cpp)
list(APPEND PUBLIC_LIBS specdec_model nlohmann_json::nlohmann_json)
list(APPEND PRIVATE_LIBS fmt::fmt Boost::headers OpenSSL::SSL OpenSSL::Crypto)
