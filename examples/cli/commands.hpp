#pragma once
// The subcommands of the specdec CLI. Each add_* function registers one subcommand on the app
// (its options and the callback that runs it); main.cpp parses and reports errors.

namespace CLI {
class App;
}

namespace specdec::cli {

void add_generate(CLI::App& app);  // generate.cpp
void add_chat(CLI::App& app);      // chat.cpp
void add_bench(CLI::App& app);     // bench.cpp
void add_demo(CLI::App& app);      // demo.cpp
void add_info(CLI::App& app);      // tools.cpp
void add_logits(CLI::App& app);    // tools.cpp
void add_convert(CLI::App& app);   // tools.cpp
void add_tokenize(CLI::App& app);  // tools.cpp
void add_serve(CLI::App& app);     // serve.cpp

}  // namespace specdec::cli
