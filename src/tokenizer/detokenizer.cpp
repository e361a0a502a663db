// IncrementalDetokenizer: see specdec/model/tokenizer.hpp. Replaced by the tokenizer work (issue 3).
#include "specdec/model/tokenizer.hpp"
