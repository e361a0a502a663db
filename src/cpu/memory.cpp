// How much memory this process may still allocate (for Transformer's check before it allocates
// a KV cache), and byte counts for messages.
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include <fmt/format.h>

#include <fstream>
#include <limits>
#include <optional>
#include <string>
#include <utility>

#include "specdec/common.hpp"
#include "specdec/cpu/kernels.hpp"
#include "specdec/cpu/transformer.hpp"

namespace specdec::cpu {

namespace {

/// The number after `key` in /proc/meminfo ("MemAvailable:   123456 kB"), in bytes.
std::optional<std::size_t> meminfo_bytes(const std::string& key) {
  std::ifstream in("/proc/meminfo");
  for (std::string name; in >> name;) {
    std::size_t kib = 0;
    std::string unit;
    if (!(in >> kib >> unit)) return std::nullopt;
    if (name == key + ":") return kib * 1024;
  }
  return std::nullopt;
}

/// The first number in a file ("max" and unreadable files: nullopt).
std::optional<std::size_t> file_number(const char* path) {
  std::ifstream in(path);
  std::size_t value = 0;
  if (in >> value) return value;
  return std::nullopt;
}

/// Address space in use by this process (/proc/self/statm's first field, in pages).
std::optional<std::size_t> address_space_in_use() {
  const auto pages = file_number("/proc/self/statm");
  if (!pages) return std::nullopt;
  return *pages * static_cast<std::size_t>(sysconf(_SC_PAGESIZE));
}

std::size_t left(std::size_t limit, std::size_t used) { return limit > used ? limit - used : 0; }

}  // namespace

std::optional<AvailableMemory> available_memory() {
  std::optional<AvailableMemory> best;
  const auto consider = [&](std::size_t bytes, const char* limit) {
    if (!best || bytes < best->bytes) best = AvailableMemory{bytes, limit};
  };
  if (const auto bytes = meminfo_bytes("MemAvailable")) consider(*bytes, "MemAvailable");
  rlimit as{};
  if (getrlimit(RLIMIT_AS, &as) == 0 && as.rlim_cur != RLIM_INFINITY)
    if (const auto used = address_space_in_use())
      consider(left(static_cast<std::size_t>(as.rlim_cur), *used), "RLIMIT_AS (ulimit -v)");
  // cgroup v2 (the process's own cgroup is mounted at /sys/fs/cgroup in a container), then v1.
  // An unlimited cgroup reads "max" (v2) or a huge number (v1) and changes nothing.
  if (const auto max = file_number("/sys/fs/cgroup/memory.max"))
    consider(left(*max, file_number("/sys/fs/cgroup/memory.current").value_or(0)),
             "the cgroup's memory.max");
  else if (const auto limit = file_number("/sys/fs/cgroup/memory/memory.limit_in_bytes"))
    consider(left(*limit, file_number("/sys/fs/cgroup/memory/memory.usage_in_bytes").value_or(0)),
             "the cgroup's memory.limit_in_bytes");
  return best;
}

std::string format_bytes(std::size_t bytes) {
  constexpr const char* units[] = {"KiB", "MiB", "GiB", "TiB", "PiB", "EiB"};
  if (bytes < 1024) return fmt::format("{} bytes", bytes);
  double value = static_cast<double>(bytes) / 1024;
  std::size_t unit = 0;
  while (value >= 1024 && unit + 1 < std::size(units)) {
    value /= 1024;
    ++unit;
  }
  return fmt::format("{:.{}f} {}", value, value < 10 ? 1 : 0, units[unit]);
}

WeightBuffer::WeightBuffer(std::size_t bytes) {
  if (bytes == 0) return;
  // Map 2 MiB more than asked and trim both ends, so that the buffer starts on a 2 MiB boundary
  // (a huge page can only back a 2 MiB-aligned range).
  constexpr std::size_t huge = std::size_t{2} << 20;
  const std::size_t size = (bytes + huge - 1) / huge * huge;
  void* p =
      ::mmap(nullptr, size + huge, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (p == MAP_FAILED)
    throw Error(fmt::format("cannot map {} for repacked weights", format_bytes(bytes)));
  auto* raw = static_cast<std::byte*>(p);
  const std::size_t lead = (huge - reinterpret_cast<std::uintptr_t>(raw) % huge) % huge;
  if (lead != 0) ::munmap(raw, lead);
  if (huge - lead != 0) ::munmap(raw + lead + size, huge - lead);
  data_ = raw + lead;
  size_ = size;
  ::madvise(data_, size_, MADV_HUGEPAGE);  // a hint: without it the kernels only run slower
}

WeightBuffer::WeightBuffer(WeightBuffer&& other) noexcept
    : data_(std::exchange(other.data_, nullptr)), size_(std::exchange(other.size_, 0)) {}

WeightBuffer& WeightBuffer::operator=(WeightBuffer&& other) noexcept {
  if (this != &other) {
    if (data_ != nullptr) ::munmap(data_, size_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

WeightBuffer::~WeightBuffer() {
  if (data_ != nullptr) ::munmap(data_, size_);
}

}  // namespace specdec::cpu
