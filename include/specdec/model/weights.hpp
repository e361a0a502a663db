#pragma once
// WeightStore: named tensors that point into read-only memory maps. Loading never copies or
// converts weights; backends read them in place.
//
// Naming: every reader stores tensors under the GGUF (llama.cpp) names, whatever the file format:
//   token_embd.weight, output_norm.weight, output.weight (absent when tied),
//   blk.{i}.attn_norm.weight, blk.{i}.attn_q.weight, .attn_k, .attn_v, .attn_output,
//   blk.{i}.attn_q.bias/.attn_k.bias/.attn_v.bias (Qwen2), blk.{i}.attn_q_norm/.attn_k_norm
//   (Qwen3), blk.{i}.ffn_norm.weight, blk.{i}.ffn_gate.weight (w1), .ffn_up (w3), .ffn_down (w2).
// Shapes are in PyTorch order, outermost first: a linear layer mapping in -> out is [out, in]
// (GGUF stores ne[] innermost first; the GGUF reader reverses it).

#include <cstddef>
#include <cstdint>
#include <map>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "specdec/common.hpp"
#include "specdec/model/dtype.hpp"

namespace specdec {

struct Tensor {
  std::string name;
  DType dtype = DType::f32;
  std::vector<std::uint64_t> shape;  ///< outermost first; rows = shape[0] for a matrix
  const std::byte* data = nullptr;   ///< into the memory map, never owned
  std::size_t nbytes = 0;

  [[nodiscard]] std::uint64_t elements() const noexcept;
  [[nodiscard]] std::uint64_t rows() const noexcept { return shape.empty() ? 1 : shape.front(); }
  [[nodiscard]] std::uint64_t cols() const noexcept { return shape.empty() ? 1 : shape.back(); }
};

/// A read-only memory-mapped file. Move-only; unmaps on destruction.
class MappedFile {
 public:
  explicit MappedFile(const std::string& path);  ///< throws specdec::Error naming the file
  MappedFile(MappedFile&&) noexcept;
  MappedFile& operator=(MappedFile&&) noexcept;
  MappedFile(const MappedFile&) = delete;
  MappedFile& operator=(const MappedFile&) = delete;
  ~MappedFile();

  [[nodiscard]] const std::byte* data() const noexcept { return data_; }
  [[nodiscard]] std::size_t size() const noexcept { return size_; }
  [[nodiscard]] const std::string& path() const noexcept { return path_; }
  /// Drops the resident pages wholly inside [p, p + n) when that range lies in this map
  /// (madvise MADV_DONTNEED): for a reader that copied those bytes elsewhere. A later read of
  /// them faults the file's pages in again, so this changes memory use, never contents.
  /// Returns whether the range was in this map.
  bool release(const std::byte* p, std::size_t n) const noexcept;

 private:
  std::string path_;
  const std::byte* data_ = nullptr;
  std::size_t size_ = 0;
};

/// Named tensors plus the memory maps that keep them alive. Share it (std::shared_ptr) between
/// several model instances: the weights exist once in RAM.
class WeightStore {
 public:
  void add_file(std::shared_ptr<const MappedFile> file) { files_.push_back(std::move(file)); }
  void add(Tensor t);  ///< throws on a duplicate name

  [[nodiscard]] const Tensor* find(std::string_view name) const;  ///< nullptr when absent
  [[nodiscard]] const Tensor& get(std::string_view name) const;   ///< throws naming the tensor
  [[nodiscard]] const std::map<std::string, Tensor, std::less<>>& tensors() const noexcept {
    return tensors_;
  }
  [[nodiscard]] std::size_t total_bytes() const noexcept;
  /// MappedFile::release on the file whose map holds [p, p + n), if any.
  void release(const std::byte* p, std::size_t n) const noexcept;
  /// The memory maps the tensors point into (several for a sharded checkpoint).
  [[nodiscard]] const std::vector<std::shared_ptr<const MappedFile>>& files() const noexcept {
    return files_;
  }

 private:
  std::vector<std::shared_ptr<const MappedFile>> files_;
  std::map<std::string, Tensor, std::less<>> tensors_;
};

}  // namespace specdec
