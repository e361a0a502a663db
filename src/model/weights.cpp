// DType tables, MappedFile (POSIX mmap) and WeightStore: see specdec/model/weights.hpp.
#include "specdec/model/weights.hpp"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <utility>

#include <fmt/format.h>

namespace specdec {

// Block layouts as in ggml (ggml-common.h):
//   Q8_0: fp16 scale + 32 int8                       = 34 bytes per 32 weights
//   Q4_0: fp16 scale + 16 bytes of 4-bit pairs       = 18 bytes per 32 weights
//   Q4_K: fp16 d, fp16 dmin, 12 bytes of 6-bit scales, 128 bytes of nibbles = 144 per 256
std::size_t dtype_block_elems(DType t) noexcept {
  switch (t) {
    case DType::f32:
    case DType::f16:
    case DType::bf16:
      return 1;
    case DType::q8_0:
    case DType::q4_0:
      return 32;
    case DType::q4_k:
      return 256;
  }
  return 1;
}

std::size_t dtype_block_bytes(DType t) noexcept {
  switch (t) {
    case DType::f32:
      return 4;
    case DType::f16:
    case DType::bf16:
      return 2;
    case DType::q8_0:
      return 34;
    case DType::q4_0:
      return 18;
    case DType::q4_k:
      return 144;
  }
  return 1;
}

const char* dtype_name(DType t) noexcept {
  switch (t) {
    case DType::f32:
      return "F32";
    case DType::f16:
      return "F16";
    case DType::bf16:
      return "BF16";
    case DType::q8_0:
      return "Q8_0";
    case DType::q4_0:
      return "Q4_0";
    case DType::q4_k:
      return "Q4_K";
  }
  return "?";
}

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

// ------------------------------------------------------------------------------ WeightStore

void WeightStore::add(Tensor t) {
  std::string name = t.name;
  auto [it, inserted] = tensors_.try_emplace(std::move(name), std::move(t));
  if (!inserted) throw Error(fmt::format("duplicate tensor '{}'", it->first));
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

}  // namespace specdec
