#pragma once

#define SPECDEC_VERSION_MAJOR 0
#define SPECDEC_VERSION_MINOR 1
#define SPECDEC_VERSION_PATCH 0
#define SPECDEC_VERSION_STRING "0.1.0"

namespace specdec {
/// The version of the compiled library (may differ from the headers' if mislinked).
const char* version_string() noexcept;
}  // namespace specdec
