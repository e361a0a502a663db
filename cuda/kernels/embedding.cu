// Row decoders (see embedding.hpp): the embedding gather (one block per token) and the prefill
// path's dequantisation of a weight matrix to 16 bits (one block per row). Both walk a row piece
// by piece with the weight traits of common/weights.cuh, thread i taking pieces i, i + 128, ...,
// and store each decoded group of 8 weights with 16-byte stores. F32 / F16 / BF16 rows whose
// length is not a multiple of 8 are decoded element by element. Memory-bound and small.
#include <cstdint>
#include <string>

#include "common/check.hpp"
#include "common/weights.cuh"
#include "kernels/embedding.hpp"

namespace specdec::cuda::kernels {

namespace {

constexpr int kThreads = 128;

/// Stores 8 consecutive values (16- or 32-byte aligned) as Out.
SPECDEC_DEVICE void store8(float* dst, const float (&v)[8]) {
  auto* d4 = reinterpret_cast<float4*>(dst);
  d4[0] = make_float4(v[0], v[1], v[2], v[3]);
  d4[1] = make_float4(v[4], v[5], v[6], v[7]);
}
template <class T>
SPECDEC_DEVICE void store8(T* dst, const float (&v)[8]) {
  *reinterpret_cast<uint4*>(dst) = pack8<T>(v);
}

/// dst[0, cols) = the decoded row (all threads of the block call it).
template <class Traits, bool kElementwise, class Out>
SPECDEC_DEVICE void decode_row(const std::uint8_t* row, int cols, Out* dst) {
  if constexpr (kElementwise) {
    for (int k = static_cast<int>(threadIdx.x); k < cols; k += kThreads)
      dst[k] = from_float<Out>(Traits::element(row, k));
  } else {
    constexpr PieceLayout kLayout = piece_layout(Traits::kType);
    const int pieces = cols / kLayout.block_elems * kLayout.pieces;
    for (int p = static_cast<int>(threadIdx.x); p < pieces; p += kThreads) {
      const int block = p / kLayout.pieces, in_block = p % kLayout.pieces;
      const auto piece =
          Traits::load(row + static_cast<std::size_t>(block) * kLayout.block_bytes, in_block);
      SPECDEC_UNROLL
      for (int g = 0; g < kLayout.groups; ++g) {
        float w[8];
        Traits::group(piece, g, w);
        store8(dst + block * kLayout.block_elems + group_column(Traits::kType, in_block, g), w);
      }
    }
  }
}

template <class Traits, bool kElementwise>
__global__ void __launch_bounds__(kThreads)
    embedding_kernel(const std::uint8_t* table, std::size_t row_bytes, int vocab, int dim,
                     const token_t* tokens, float* out) {
  const int t = static_cast<int>(blockIdx.x);
  const token_t id = tokens[t];
  float* dst = out + static_cast<std::size_t>(t) * dim;
  if (id < 0 || id >= vocab) {  // uniform for the block: every thread returns
    for (int i = static_cast<int>(threadIdx.x); i < dim; i += kThreads) dst[i] = NAN;
    return;
  }
  decode_row<Traits, kElementwise>(table + static_cast<std::size_t>(id) * row_bytes, dim, dst);
}

template <class Traits, bool kElementwise, class Out>
__global__ void __launch_bounds__(kThreads)
    dequantize_kernel(const std::uint8_t* w, std::size_t row_bytes, int cols, Out* out) {
  const auto r = static_cast<std::size_t>(blockIdx.x);
  decode_row<Traits, kElementwise>(w + r * row_bytes, cols, out + r * cols);
}

bool aligned16(const void* p) { return reinterpret_cast<std::uintptr_t>(p) % 16 == 0; }

/// Bytes per row, after checking that `cols` holds whole blocks and w is aligned as blocks are.
std::size_t checked_row_bytes(const char* what, DType type, const void* w, int cols) {
  const PieceLayout layout = piece_layout(type);
  if (is_float_dtype(type))
    return static_cast<std::size_t>(cols) * (layout.block_bytes / layout.block_elems);
  if (reinterpret_cast<std::uintptr_t>(w) % static_cast<unsigned>(layout.align) != 0) {
    throw Error(std::string(what) + ": " + dtype_name(type) + " weights must be " +
                std::to_string(layout.align) + "-byte aligned");
  }
  if (cols % layout.block_elems != 0)
    throw Error(std::string(what) + ": " + dtype_name(type) + " rows of " + std::to_string(cols) +
                " weights are not whole blocks of " + std::to_string(layout.block_elems));
  return static_cast<std::size_t>(cols / layout.block_elems) * layout.block_bytes;
}

}  // namespace

void embedding_gather(DType type, const void* table, int vocab, int dim, const token_t* tokens,
                      int n, float* out, cudaStream_t stream) {
  if (n <= 0) return;
  const std::size_t row_bytes = checked_row_bytes("embedding_gather", type, table, dim);
  const bool vector = dim % 8 == 0 && aligned16(table) && aligned16(out);
  if (!is_float_dtype(type) && !aligned16(out))
    throw Error("embedding_gather: out must be 16-byte aligned for quantised tables");
  const auto* bytes = static_cast<const std::uint8_t*>(table);
  const dim3 grid(static_cast<unsigned>(n)), block(kThreads);
  const bool found = with_weight_traits(type, [&](auto tag) {
    using Traits = typename decltype(tag)::type;
    if (vector || !Traits::kFloat) {
      launch(embedding_kernel<Traits, false>, grid, block, 0, stream, bytes, row_bytes, vocab, dim,
             tokens, out);
    } else if constexpr (Traits::kFloat) {
      launch(embedding_kernel<Traits, true>, grid, block, 0, stream, bytes, row_bytes, vocab, dim,
             tokens, out);
    }
  });
  if (!found) throw Error(std::string("embedding_gather: no kernel for ") + dtype_name(type));
  SPECDEC_CUDA_CHECK_LAUNCH("embedding_kernel");
}

void dequantize_rows(DType type, const void* w, int rows, int cols, DType to, void* out,
                     cudaStream_t stream) {
  if (!is_16bit(to)) throw Error("dequantize_rows: the output type must be F16 or BF16");
  if (rows <= 0) return;
  const std::size_t row_bytes = checked_row_bytes("dequantize_rows", type, w, cols);
  const bool vector = cols % 8 == 0 && aligned16(w) && aligned16(out);
  if (!is_float_dtype(type) && !aligned16(out))
    throw Error("dequantize_rows: out must be 16-byte aligned");
  const auto* bytes = static_cast<const std::uint8_t*>(w);
  const dim3 grid(static_cast<unsigned>(rows)), block(kThreads);
  const bool found = with_weight_traits(type, [&](auto tag) {
    using Traits = typename decltype(tag)::type;
    auto go = [&](auto* typed_out) {
      using Out = std::remove_pointer_t<decltype(typed_out)>;
      if (vector || !Traits::kFloat) {
        launch(dequantize_kernel<Traits, false, Out>, grid, block, 0, stream, bytes, row_bytes,
               cols, typed_out);
      } else if constexpr (Traits::kFloat) {
        launch(dequantize_kernel<Traits, true, Out>, grid, block, 0, stream, bytes, row_bytes, cols,
               typed_out);
      }
    };
    if (to == DType::f16) {
      go(static_cast<__half*>(out));
    } else {
      go(static_cast<__nv_bfloat16*>(out));
    }
  });
  if (!found) throw Error(std::string("dequantize_rows: no kernel for ") + dtype_name(type));
  SPECDEC_CUDA_CHECK_LAUNCH("dequantize_kernel");
}

}  // namespace specdec::cuda::kernels
