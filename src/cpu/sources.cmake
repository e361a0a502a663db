# Sources of specdec_cpu (paths relative to src/).
list(APPEND SOURCES
  cpu/kernels.cpp
  cpu/kernels_avx2.cpp
  cpu/kernels_avx512.cpp
  cpu/kernels_avx512vnni.cpp
  cpu/kernels_amx.cpp
  cpu/memory.cpp
  cpu/kernels_quant.cpp
  cpu/kernels_quant_avx2.cpp
  cpu/kernels_quant_avx512vnni.cpp
  cpu/kernels_quant_avxvnni.cpp
  cpu/kernels_quant_avx2_rows16.cpp
  cpu/kernels_quant_avx512_rows16.cpp
  cpu/thread_pool.cpp
  cpu/transformer.cpp)
list(APPEND PUBLIC_LIBS specdec_model)
list(APPEND PRIVATE_LIBS fmt::fmt Threads::Threads)

# Every kernel reproduces a documented reduction order bit for bit, so the compiler must not fuse
# a * b + c on its own (GCC does in GNU mode). The per-instruction-set files get their -m flags
# here and are only called after a CPU check (kernels.cpp); see kernels_impl.hpp.
set(_specdec_cpu_avx2 -mavx2 -mfma -mf16c)
# GCC 12's AVX-512 headers trip -Wuninitialized on their own _mm512_undefined_*() (GCC bug 105593).
set(_specdec_cpu_avx512 ${_specdec_cpu_avx2} -mavx512f -mavx512bw -mavx512vl -mavx512dq
    -Wno-uninitialized -Wno-maybe-uninitialized)
set_source_files_properties(cpu/kernels.cpp cpu/kernels_quant.cpp cpu/thread_pool.cpp
  cpu/transformer.cpp PROPERTIES COMPILE_OPTIONS "-ffp-contract=off")
# kernels_quant_avx2_rows16.cpp: the rows16 layout on AVX2 CPUs without VNNI (no -mavxvnni).
set_source_files_properties(cpu/kernels_avx2.cpp cpu/kernels_quant_avx2.cpp
  cpu/kernels_quant_avx2_rows16.cpp
  PROPERTIES COMPILE_OPTIONS "-ffp-contract=off;${_specdec_cpu_avx2}")
# kernels_quant_avx512_rows16.cpp: the rows16 layout on AVX-512 CPUs without VNNI.
set_source_files_properties(cpu/kernels_avx512.cpp cpu/kernels_quant_avx512_rows16.cpp
  PROPERTIES COMPILE_OPTIONS "-ffp-contract=off;${_specdec_cpu_avx512}")
# Called only when cpu_features() reports AVX512_VNNI (Q8_0 and the other quantised types) or
# AVX512_BF16 (BF16) respectively.
set_source_files_properties(cpu/kernels_avx512vnni.cpp cpu/kernels_quant_avx512vnni.cpp
  PROPERTIES COMPILE_OPTIONS "-ffp-contract=off;${_specdec_cpu_avx512};-mavx512vnni;-mavx512bf16")
# Called only for Isa::avx2 when cpu_features() reports AVX-VNNI, on weights in the rows16 layout.
set_source_files_properties(cpu/kernels_quant_avxvnni.cpp
  PROPERTIES COMPILE_OPTIONS "-ffp-contract=off;${_specdec_cpu_avx2};-mavxvnni")
set_source_files_properties(cpu/kernels_amx.cpp
  PROPERTIES COMPILE_OPTIONS "-ffp-contract=off;${_specdec_cpu_avx512};-mamx-tile;-mamx-bf16;-mamx-int8")
