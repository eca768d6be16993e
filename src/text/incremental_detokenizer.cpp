#include "text/incremental_detokenizer.h"

namespace ernie {

IncrementalDetokenizer::IncrementalDetokenizer(const Tokenizer& tokenizer, bool skip_special_tokens)
    : tokenizer_(&tokenizer), skip_special_tokens_(skip_special_tokens) {}

std::string IncrementalDetokenizer::push(int32_t id) {
  pending_ += tokenizer_->token_bytes(id, skip_special_tokens_);
  std::string completed;
  const size_t consumed = append_valid_utf8(pending_, /*at_end=*/false, completed);
  pending_.erase(0, consumed);
  return completed;
}

std::string IncrementalDetokenizer::flush() {
  std::string rest;
  append_valid_utf8(pending_, /*at_end=*/true, rest);
  pending_.clear();
  return rest;
}

}  // namespace ernie
