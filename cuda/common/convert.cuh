#pragma once
// Conversions between the storage types (f16, bf16, f32) and f32 registers, one element or eight
// at a time (one 128-bit load holds eight 16-bit values).

#include "prelude.cuh"

namespace specdec::cuda {

SPECDEC_DEVICE float to_float(float v) { return v; }
SPECDEC_DEVICE float to_float(__half v) { return __half2float(v); }
SPECDEC_DEVICE float to_float(__nv_bfloat16 v) { return __bfloat162float(v); }

template <class T>
SPECDEC_DEVICE T from_float(float v);
template <>
SPECDEC_DEVICE float from_float<float>(float v) {
  return v;
}
template <>
SPECDEC_DEVICE __half from_float<__half>(float v) {
  return __float2half_rn(v);
}
template <>
SPECDEC_DEVICE __nv_bfloat16 from_float<__nv_bfloat16>(float v) {
  return __float2bfloat16_rn(v);
}

/// The eight 16-bit values of a 128-bit word, in memory order, as floats.
SPECDEC_DEVICE void unpack8(const uint4& packed, float (&out)[8], __half /*tag*/) {
  const unsigned words[4] = {packed.x, packed.y, packed.z, packed.w};
  SPECDEC_UNROLL
  for (int i = 0; i < 4; ++i) {
    __half2 pair;
    static_assert(sizeof(pair) == sizeof(words[i]));
    memcpy(static_cast<void*>(&pair), &words[i], sizeof(pair));
    const float2 f = __half22float2(pair);
    out[2 * i] = f.x;
    out[2 * i + 1] = f.y;
  }
}
SPECDEC_DEVICE void unpack8(const uint4& packed, float (&out)[8], __nv_bfloat16 /*tag*/) {
  // bf16 is the upper half of an f32: widening is a shift.
  const unsigned words[4] = {packed.x, packed.y, packed.z, packed.w};
  SPECDEC_UNROLL
  for (int i = 0; i < 4; ++i) {
    out[2 * i] = __uint_as_float(words[i] << 16);
    out[2 * i + 1] = __uint_as_float(words[i] & 0xffff0000u);
  }
}

/// Eight floats rounded to T (__half or __nv_bfloat16, nearest even) as one 128-bit word, in
/// memory order.
template <class T>
SPECDEC_DEVICE uint4 pack8(const float (&v)[8]) {
  unsigned words[4];
  SPECDEC_UNROLL
  for (int i = 0; i < 4; ++i) {
    const T pair[2] = {from_float<T>(v[2 * i]), from_float<T>(v[2 * i + 1])};
    static_assert(sizeof(pair) == sizeof(words[i]));
    memcpy(&words[i], static_cast<const void*>(pair), sizeof(pair));
  }
  return make_uint4(words[0], words[1], words[2], words[3]);
}

/// A 128-bit load that bypasses L1 (the weights are streamed once per forward pass).
SPECDEC_DEVICE uint4 load_streaming(const uint4* p) {
#if defined(__CUDA_ARCH__)
  uint4 v;
  asm("ld.global.nc.L1::no_allocate.v4.u32 {%0, %1, %2, %3}, [%4];"
      : "=r"(v.x), "=r"(v.y), "=r"(v.z), "=r"(v.w)
      : "l"(p));
  return v;
#else
  return *p;
#endif
}

}  // namespace specdec::cuda
