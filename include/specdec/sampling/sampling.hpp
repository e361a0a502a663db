#pragma once
// The whole sampling core: Philox RNG, logit processing, verify_chain (+ greedy and one-hot
// variants) and the batched entry points. Header-only, standard library only.

#include "specdec/sampling/batch.hpp"      // IWYU pragma: export
#include "specdec/sampling/penalties.hpp"  // IWYU pragma: export
#include "specdec/sampling/philox.hpp"     // IWYU pragma: export
#include "specdec/sampling/process.hpp"    // IWYU pragma: export
#include "specdec/sampling/verify.hpp"     // IWYU pragma: export
