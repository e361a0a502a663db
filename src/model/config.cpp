// ModelConfig::validate. Completed by the model-files work (issue 3).
#include "specdec/model/config.hpp"
