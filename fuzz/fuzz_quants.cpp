// libFuzzer target: arbitrary bytes as the blocks of every weight type, through the dequantisers
// (specdec/model/quants.hpp). The first byte picks the type; the rest is cut to whole blocks.
// Findings: any sanitizer report (out-of-bounds reads of a block, undefined shifts), or a
// dequantisation that depends on how the row was split (one call for the whole row must give
// the bits of one call per block).
#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <vector>

#include "specdec/model/dtype.hpp"

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  if (size < 1) return 0;
  const auto types = specdec::all_dtypes();
  const specdec::DType t = types[data[0] % types.size()];
  const std::size_t elems = specdec::dtype_block_elems(t), bytes = specdec::dtype_block_bytes(t);
  const std::size_t blocks = (size - 1) / bytes;
  if (blocks == 0) return 0;
  // An exact-size copy, so that ASan sees a read past the last block.
  std::vector<std::byte> in(blocks * bytes);
  std::memcpy(in.data(), data + 1, in.size());
  std::vector<float> whole(blocks * elems), parts(blocks * elems);
  specdec::dequantize(t, in.data(), whole.data(), whole.size());
  for (std::size_t b = 0; b < blocks; ++b)
    specdec::dequantize(t, in.data() + b * bytes, parts.data() + b * elems, elems);
  if (std::memcmp(whole.data(), parts.data(), whole.size() * sizeof(float)) != 0) std::abort();
  return 0;
}
