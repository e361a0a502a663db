// The CPU Transformer's memory estimate and its check before allocating: a context that cannot
// fit gives a specdec::Error naming the bytes and Options::context_length (not std::bad_alloc),
// and the estimate is what the constructor allocates.
#include <sys/resource.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstddef>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <optional>
#include <string>
#include <vector>

#include "specdec/common.hpp"
#include "specdec/cpu/transformer.hpp"
#include "specdec/model/loader.hpp"
#include "specdec/model/weights.hpp"
#include "specdec_test.hpp"

using specdec::KvType;
using specdec::cpu::Options;
using specdec::cpu::Transformer;

namespace {

const specdec::LoadedModel& tiny() {
  static const specdec::LoadedModel m =
      specdec::load_model(std::string(SPECDEC_TEST_DATA) + "/model/tiny-llama-q8_0.gguf");
  return m;
}

/// Runs fn() in a forked child and returns what it wrote to the pipe (fn's result string).
template <class F>
std::string in_child(F fn) {
  int fds[2];
  REQUIRE(pipe(fds) == 0);
  const pid_t pid = fork();
  REQUIRE(pid >= 0);
  if (pid == 0) {
    close(fds[0]);
    const std::string message = fn();
    const ssize_t written = write(fds[1], message.data(), message.size());
    _exit(written == static_cast<ssize_t>(message.size()) ? 0 : 1);
  }
  close(fds[1]);
  std::string message;
  char buffer[512];
  for (ssize_t n; (n = read(fds[0], buffer, sizeof buffer)) > 0;)
    message.append(buffer, static_cast<std::size_t>(n));
  close(fds[0]);
  int status = 0;
  REQUIRE(waitpid(pid, &status, 0) == pid);
  REQUIRE(WIFEXITED(status));
  CHECK(WEXITSTATUS(status) == 0);
  return message;
}

}  // namespace

TEST_CASE("estimate_memory is what the constructor allocates", "[cpu][memory]") {
  const auto& c = tiny().config;
  for (const KvType type : {KvType::f32, KvType::f16}) {
    Options o;
    o.threads = 2;
    o.kv_type = type;
    o.context_length = 100;
    const auto e = Transformer::estimate_memory(c, o);
    const std::size_t element = type == KvType::f16 ? 2 : 4;
    CHECK(e.context_length == 100);
    CHECK(e.threads == 2);
    CHECK(e.kv_cache_bytes == c.n_layers * 2 * c.n_kv_heads * 100 * c.head_dim * element);
    // Per thread: the scores of the query heads sharing a K/V head.
    CHECK(e.scratch_bytes == 2 * (c.n_heads / c.n_kv_heads * 100) * sizeof(float));
    const Transformer lm(tiny(), o);
    CHECK(lm.kv_cache_bytes() == e.kv_cache_bytes);
    CHECK(lm.scratch_bytes() == e.scratch_bytes);
    CHECK(lm.context_length() == 100);
  }
  Options o;  // context 0: the model's own
  CHECK(Transformer::estimate_memory(c, o).context_length == c.context_length);
}

TEST_CASE("a context that does not fit is a specdec::Error with the numbers", "[cpu][memory]") {
  Options o;
  o.threads = 1;
  o.context_length = std::size_t{1} << 40;  // ~10^12 positions: terabytes of KV cache
  try {
    Transformer lm(tiny(), o);
    FAIL("no exception");
  } catch (const specdec::Error& e) {
    const std::string m = e.what();
    INFO(m);
    CHECK(m.find("1099511627776 positions") != std::string::npos);
    CHECK(m.find("TiB") != std::string::npos);
    CHECK(m.find("Options::context_length") != std::string::npos);
  }
  // Sizes that overflow 64 bits are an error too, not a wrapped-around small allocation.
  o.context_length = std::size_t{1} << 62;
  CHECK_THROWS_WITH(Transformer(tiny(), o), Catch::Contains("overflows"));
  CHECK_THROWS_AS(Transformer::estimate_memory(tiny().config, o), specdec::Error);
}

TEST_CASE("the check honours RLIMIT_AS (ulimit -v)", "[cpu][memory]") {
  // In a child: the address space may grow by 64 MiB; a context needing ~256 MiB of KV cache is
  // refused by name, one needing ~1 MiB is built.
  const std::string message = in_child([] {
    std::size_t pages = 0;
    std::ifstream("/proc/self/statm") >> pages;
    const auto in_use = static_cast<rlim_t>(pages * static_cast<std::size_t>(getpagesize()));
    const rlimit limit{in_use + (rlim_t{64} << 20), RLIM_INFINITY};
    if (setrlimit(RLIMIT_AS, &limit) != 0) return std::string("setrlimit failed");
    const auto available = specdec::cpu::available_memory();
    if (!available || available->limit != "RLIMIT_AS (ulimit -v)")
      return std::string("available_memory() does not report RLIMIT_AS");
    Options o;
    o.threads = 1;
    const auto& c = tiny().config;
    const std::size_t per_position = c.n_layers * 2 * c.n_kv_heads * c.head_dim * 4;
    o.context_length = (std::size_t{256} << 20) / per_position;
    std::string result;
    try {
      Transformer lm(tiny(), o);
      result = "no exception";
    } catch (const specdec::Error& e) {
      result = e.what();
    }
    o.context_length = (std::size_t{1} << 20) / per_position;
    try {
      Transformer lm(tiny(), o);
    } catch (const std::exception& e) {
      result += std::string(" | small context failed: ") + e.what();
    }
    return result;
  });
  INFO(message);
  CHECK(message.find("cpu::Transformer: a context of ") == 0);
  CHECK(message.find("but RLIMIT_AS (ulimit -v) allows") != std::string::npos);
  CHECK(message.find("small context failed") == std::string::npos);
}

namespace {

/// Resident file-backed pages of this process, in bytes (/proc/self/statm's third field).
std::size_t resident_file_bytes() {
  std::ifstream in("/proc/self/statm");
  std::size_t size = 0, resident = 0, shared = 0;
  in >> size >> resident >> shared;
  return shared * static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
}

}  // namespace

TEST_CASE("releasing a mapped range drops its resident pages and keeps its contents",
          "[cpu][memory]") {
  // 32 MiB of a pattern in a file, mapped and read whole (resident), then released.
  const std::string path = (std::filesystem::temp_directory_path() /
                            ("specdec-test-release-" + std::to_string(getpid()) + ".bin"))
                               .string();
  constexpr std::size_t bytes = std::size_t{32} << 20;
  {
    std::ofstream out(path, std::ios::binary);
    for (std::size_t i = 0; i < bytes / 4; ++i) {
      const auto v = static_cast<std::uint32_t>(i * 2654435761u);
      out.write(reinterpret_cast<const char*>(&v), 4);
    }
  }
  const specdec::MappedFile file(path);
  auto checksum = [&] {
    std::uint64_t sum = 0;
    for (std::size_t i = 0; i < bytes; i += 64)
      sum += std::to_integer<std::uint64_t>(file.data()[i]) * (i + 1);
    return sum;
  };
  const std::uint64_t before = checksum();
  const std::size_t resident = resident_file_bytes();
  CHECK(file.release(file.data() + 4096, bytes - 8192));
  const std::size_t dropped = resident - resident_file_bytes();
  CHECK(dropped >= bytes - (std::size_t{2} << 20));  // all but the two edge pages, about
  CHECK(checksum() == before);                       // read again from the file
  // A range outside the map, or running past its end, is not this map's.
  const std::byte other[16] = {};
  CHECK_FALSE(file.release(other, sizeof other));
  CHECK_FALSE(file.release(file.data() + bytes - 16, 32));
  std::remove(path.c_str());
}

TEST_CASE("Transformers over one store share one repacked copy while one of them lives",
          "[cpu][memory]") {
  const specdec::LoadedModel& m = tiny();  // Q8_0: repacked where the kernels are AVX512-VNNI
  auto logits = [](Transformer& t) {
    t.reset();
    const specdec::LogitsView l = t.forward(std::vector<specdec::token_t>{1, 5, 9, 2});
    return std::vector<float>(l.data, l.data + l.rows * l.vocab);
  };
  std::optional<Transformer> first(std::in_place, m, Options{.threads = 1, .context_length = 64});
  if (first->repacked_bytes() == 0) {
    WARN("SKIPPED: the kernels here read the file's layout (no AVX512-VNNI)");
    return;
  }
  CHECK(first->repack_seconds() > 0);
  const std::vector<float> expected = logits(*first);
  // A server's slots: a second Transformer of the model reads the same copy, made once.
  std::optional<Transformer> second(std::in_place, m, Options{.threads = 1, .context_length = 64});
  CHECK(second->repacked_weights() == first->repacked_weights());
  CHECK(second->repacked_bytes() == first->repacked_bytes());
  CHECK(second->repack_seconds() == 0);
  // Another head is another copy.
  const Transformer restricted(
      m, {.threads = 1, .context_length = 64, .head_tokens = specdec::cpu::first_tokens(16)});
  CHECK(restricted.repacked_weights() != first->repacked_weights());
  CHECK(restricted.repack_seconds() > 0);
  // The copy outlives the Transformer that made it...
  first.reset();
  CHECK(logits(*second) == expected);
  // ... and goes with the last one: the next Transformer makes a new one.
  second.reset();
  second.emplace(m, Options{.threads = 1, .context_length = 64});
  CHECK(second->repack_seconds() > 0);
  CHECK(logits(*second) == expected);
}
