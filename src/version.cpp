// The library's version, compiled once so that a consumer can check which specdec it linked.
#include "specdec/version.hpp"

namespace specdec {
const char* version_string() noexcept { return SPECDEC_VERSION_STRING; }
}  // namespace specdec
