// Host definitions of CUDA's fast-math intrinsics for the emulation build.
//
// glibc's <math.h> declares __expf, __logf, ... (its internal aliases) but the shared library
// does not export them, so code compiled as host C++ that calls them fails to link unless they
// are defined somewhere. They are defined as the exact functions: the device's approximations
// differ by a few ulp (documented in the CUDA programming guide, appendix "Intrinsic functions"),
// which every kernel test covers with its tolerance.
#include <math.h>

extern "C" {
float __expf(float x) noexcept { return expf(x); }
float __exp10f(float x) noexcept { return exp10f(x); }
float __logf(float x) noexcept { return logf(x); }
float __log2f(float x) noexcept { return log2f(x); }
float __log10f(float x) noexcept { return log10f(x); }
float __powf(float x, float y) noexcept { return powf(x, y); }
float __sinf(float x) noexcept { return sinf(x); }
float __cosf(float x) noexcept { return cosf(x); }
float __tanf(float x) noexcept { return tanf(x); }
void __sincosf(float x, float* s, float* c) noexcept { sincosf(x, s, c); }
}
