# Sources of specdec_model (paths relative to src/).
list(APPEND SOURCES
  model/config.cpp
  model/llama_schema.cpp  # the table of a Llama-family model's tensors
  model/dtype.cpp    # the table of weight types
  model/quants.cpp   # dequantisers and quantisers of every weight type
  model/quant_mix.cpp  # llama.cpp's presets: the type of each tensor under Q4_K_M, ...
  model/rope.cpp     # rotary frequencies and f32 vectors both backends read
  model/random_blocks.cpp  # random weights of any type (tests, benchmark models)
  model/weights.cpp
  model/gguf.cpp
  model/gguf_model.cpp
  model/safetensors.cpp
  model/hf.cpp
  model/loader.cpp
  model/describe.cpp
  model/chat_template.cpp  # chat templates: detection and rendering of each family
  model/gguf_writer.cpp)  # the GGUF writer and the model conversion (specdec convert)
list(APPEND PUBLIC_LIBS specdec_tokenizer)
list(APPEND PRIVATE_LIBS fmt::fmt nlohmann_json::nlohmann_json)

# The dequantisers reproduce ggml's float operations in ggml's order: no contraction into fused
# multiply-adds (GCC contracts in GNU mode, and with -march flags that enable FMA).
set_source_files_properties(model/quants.cpp PROPERTIES COMPILE_OPTIONS "-ffp-contract=off")
