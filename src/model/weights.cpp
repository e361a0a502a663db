// Tensor, MappedFile (POSIX mmap) and WeightStore: see specdec/model/weights.hpp.
#include "specdec/model/weights.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <utility>

#include <fmt/format.h>

namespace specdec {

std::uint64_t Tensor::elements() const noexcept {
  // Readers have checked that this product does not overflow before creating the tensor.
  std::uint64_t n = 1;
  for (std::uint64_t d : shape) n *= d;
  return n;
}

// ------------------------------------------------------------------------------ MappedFile

MappedFile::MappedFile(const std::string& path) : path_(path) {
  const int fd = ::open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) throw Error(fmt::format("{}: cannot open: {}", path, std::strerror(errno)));
  struct stat st {};
  if (::fstat(fd, &st) != 0) {
    const int err = errno;
    ::close(fd);
    throw Error(fmt::format("{}: cannot stat: {}", path, std::strerror(err)));
  }
  if (!S_ISREG(st.st_mode)) {
    ::close(fd);
    throw Error(fmt::format("{}: not a regular file", path));
  }
  size_ = static_cast<std::size_t>(st.st_size);
  // mmap of length 0 fails; an empty file is simply an empty span (the readers then report it
  // as truncated).
  if (size_ > 0) {
    void* p = ::mmap(nullptr, size_, PROT_READ, MAP_PRIVATE, fd, 0);
    if (p == MAP_FAILED) {
      const int err = errno;
      ::close(fd);
      throw Error(fmt::format("{}: cannot map {} bytes: {}", path, size_, std::strerror(err)));
    }
    data_ = static_cast<const std::byte*>(p);
  }
  ::close(fd);  // the mapping stays valid after the descriptor is closed
}

MappedFile::MappedFile(MappedFile&& other) noexcept
    : path_(std::move(other.path_)),
      data_(std::exchange(other.data_, nullptr)),
      size_(std::exchange(other.size_, 0)) {}

MappedFile& MappedFile::operator=(MappedFile&& other) noexcept {
  if (this != &other) {
    if (data_ != nullptr) ::munmap(const_cast<std::byte*>(data_), size_);
    path_ = std::move(other.path_);
    data_ = std::exchange(other.data_, nullptr);
    size_ = std::exchange(other.size_, 0);
  }
  return *this;
}

MappedFile::~MappedFile() {
  if (data_ != nullptr) ::munmap(const_cast<std::byte*>(data_), size_);
}

bool MappedFile::release(const std::byte* p, std::size_t n) const noexcept {
  const auto begin = reinterpret_cast<std::uintptr_t>(data_);
  const auto at = reinterpret_cast<std::uintptr_t>(p);
  if (data_ == nullptr || at < begin || at - begin > size_ || n > size_ - (at - begin))
    return false;
  const auto page = static_cast<std::uintptr_t>(::sysconf(_SC_PAGESIZE));
  const std::uintptr_t lo = (at + page - 1) / page * page, hi = (at + n) / page * page;
  // NOLINTNEXTLINE(performance-no-int-to-ptr): the map's own pages, from its address range
  if (lo < hi) ::madvise(reinterpret_cast<void*>(lo), hi - lo, MADV_DONTNEED);
  return true;
}

// ------------------------------------------------------------------------------ WeightStore

void WeightStore::add(Tensor t) {
  auto [it, inserted] = tensors_.try_emplace(t.name);
  if (!inserted) throw Error(fmt::format("duplicate tensor '{}'", it->first));
  it->second = std::move(t);
}

const Tensor* WeightStore::find(std::string_view name) const {
  auto it = tensors_.find(name);
  return it == tensors_.end() ? nullptr : &it->second;
}

const Tensor& WeightStore::get(std::string_view name) const {
  if (const Tensor* t = find(name)) return *t;
  throw Error(fmt::format("missing tensor '{}'", name));
}

std::size_t WeightStore::total_bytes() const noexcept {
  std::size_t total = 0;
  for (const auto& [name, t] : tensors_) total += t.nbytes;
  return total;
}

void WeightStore::release(const std::byte* p, std::size_t n) const noexcept {
  for (const auto& file : files_)
    if (file->release(p, n)) return;
}

}  // namespace specdec
