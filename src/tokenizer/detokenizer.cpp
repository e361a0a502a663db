// IncrementalDetokenizer: see specdec/model/tokenizer.hpp. The tokenizer's own decode step does
// the work, so the streamed text is decode(all ids) by construction; this class only keeps the
// state between calls.
#include "specdec/model/tokenizer.hpp"

namespace specdec {

std::string IncrementalDetokenizer::push(token_t id) {
  std::string out;
  tok_->decode_step(state_, id, out);
  return out;
}

std::string IncrementalDetokenizer::flush() {
  std::string out;
  tok_->decode_finish(state_, out);
  return out;
}

}  // namespace specdec
