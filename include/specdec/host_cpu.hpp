#pragma once
// What the host CPU (and its OS) can run: detected once, for every part of specdec that has code
// per instruction set. The rule for such code, everywhere:
//
//   * per-ISA code is compiled for its ISA alone (the CPU backend's kernels_<isa>.cpp files with
//     their -m flags, src/cpu/sources.cmake; the header-only sampling core's weight pass under a
//     target pragma, sampling/process.hpp, since a header cannot carry per-file flags), and
//   * it is called only after host_cpu() says the CPU and the OS support that ISA: the CPU
//     backend's cpu::cpu_features() / cpu::Isa (which adds the AMX permission request) and the
//     sampling core's pass_isa() both read host_cpu(); nothing else probes the CPU.
//
// Detection reads cpuid and, for the register state the OS saves, xgetbv (AVX state for AVX2,
// opmask/zmm state for AVX-512, tile state for AMX). Non-x86 hosts report nothing.

#if defined(__x86_64__) || defined(__i386__)
#include <cpuid.h>
#define SPECDEC_HOST_X86 1
#else
#define SPECDEC_HOST_X86 0
#endif

#include <cstdint>

namespace specdec {

struct HostCpu {
  bool avx2 = false;      ///< AVX2, FMA, F16C, and the OS saves ymm state
  bool avx_vnni = false;  ///< AVX-VNNI (VEX vpdpbusd)
  bool avx512 = false;    ///< AVX-512 F, BW, VL, DQ, and the OS saves zmm state
  bool avx512_vnni = false;
  bool avx512_bf16 = false;
  /// AMX-TILE, -BF16, -INT8 and the OS saves tile state; Linux also wants a per-process
  /// permission request before the first tile instruction (the CPU backend makes it).
  bool amx_tiles = false;
};

namespace detail {

inline HostCpu detect_host_cpu() {
  HostCpu f;
#if SPECDEC_HOST_X86
  unsigned a = 0, b = 0, c = 0, d = 0;
  if (!__get_cpuid(1, &a, &b, &c, &d)) return f;
  const bool osxsave = (c >> 27) & 1, fma = (c >> 12) & 1, f16c = (c >> 29) & 1,
             avx = (c >> 28) & 1;
  if (!osxsave || !avx) return f;
  std::uint32_t xcr0_lo = 0, xcr0_hi = 0;
  __asm__ volatile("xgetbv" : "=a"(xcr0_lo), "=d"(xcr0_hi) : "c"(0));
  const std::uint64_t xcr0 = (static_cast<std::uint64_t>(xcr0_hi) << 32) | xcr0_lo;
  const bool ymm_state = (xcr0 & 0x6) == 0x6;
  const bool zmm_state = (xcr0 & 0xe6) == 0xe6;
  const bool tile_state = (xcr0 & 0x60000) == 0x60000;
  unsigned a7 = 0, b7 = 0, c7 = 0, d7 = 0;
  __get_cpuid_count(7, 0, &a7, &b7, &c7, &d7);
  unsigned a71 = 0, b71 = 0, c71 = 0, d71 = 0;
  __get_cpuid_count(7, 1, &a71, &b71, &c71, &d71);
  const bool avx2 = (b7 >> 5) & 1;
  f.avx2 = ymm_state && avx2 && fma && f16c;
  f.avx_vnni = f.avx2 && ((a71 >> 4) & 1);
  const bool avx512f = (b7 >> 16) & 1, avx512dq = (b7 >> 17) & 1, avx512bw = (b7 >> 30) & 1,
             avx512vl = (b7 >> 31) & 1;
  f.avx512 = f.avx2 && zmm_state && avx512f && avx512dq && avx512bw && avx512vl;
  f.avx512_vnni = f.avx512 && ((c7 >> 11) & 1);
  f.avx512_bf16 = f.avx512 && ((a71 >> 5) & 1);
  const bool amx_bf16 = (d7 >> 22) & 1, amx_tile = (d7 >> 24) & 1, amx_int8 = (d7 >> 25) & 1;
  f.amx_tiles = f.avx512 && tile_state && amx_bf16 && amx_tile && amx_int8;
#endif
  return f;
}

}  // namespace detail

/// The host's features, detected on the first call.
inline const HostCpu& host_cpu() {
  static const HostCpu cpu = detail::detect_host_cpu();
  return cpu;
}

}  // namespace specdec
