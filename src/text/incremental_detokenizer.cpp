#include "text/incremental_detokenizer.h"

#include <algorithm>

namespace ernie {

IncrementalDetokenizer::IncrementalDetokenizer(const Tokenizer& tokenizer, bool skip_special_tokens,
                                               std::vector<int32_t> visible_special)
    : tokenizer_(&tokenizer), skip_special_tokens_(skip_special_tokens), visible_special_(std::move(visible_special)) {}

std::string IncrementalDetokenizer::push(int32_t id) {
  const bool visible = std::find(visible_special_.begin(), visible_special_.end(), id) != visible_special_.end();
  pending_ += tokenizer_->token_bytes(id, skip_special_tokens_ && !visible);
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
