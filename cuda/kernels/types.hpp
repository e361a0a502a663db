#pragma once
// Host-visible vocabulary of the kernels' launch functions (no CUDA header needed).

#include <cstdint>

namespace specdec::cuda {

/// Storage type of the weight matrices and embedding table on the device.
enum class WeightType : std::uint8_t { f16, bf16 };

/// Storage type of the KV cache.
enum class KvType : std::uint8_t { f16, f32 };

/// Bytes per element.
constexpr int weight_bytes(WeightType) { return 2; }
constexpr int kv_bytes(KvType t) { return t == KvType::f16 ? 2 : 4; }

}  // namespace specdec::cuda
