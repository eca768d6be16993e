#include "engine/text_stream.h"

#include <algorithm>

namespace ernie {

TextStream::TextStream(const Tokenizer& tokenizer, std::vector<std::string> stop_strings, bool include_stop_string,
                       std::vector<int32_t> visible_special)
    : detokenizer_(tokenizer, /*skip_special_tokens=*/true, std::move(visible_special)), stops_(std::move(stop_strings)), include_stop_(include_stop_string) {
  std::erase_if(stops_, [](const std::string& stop) { return stop.empty(); });
}

size_t TextStream::held_back_length() const {
  size_t longest = 0;
  for (const std::string& stop : stops_) {
    for (size_t length = std::min(stop.size() - 1, pending_.size()); length > longest; --length) {
      if (pending_.compare(pending_.size() - length, length, stop, 0, length) == 0) {
        longest = length;
        break;
      }
    }
  }
  return longest;
}

TextStream::Update TextStream::push(int32_t token) {
  Update update;
  if (stopped_) return update;
  pending_ += detokenizer_.push(token);
  // The earliest stop string occurrence wins.
  size_t stop_at = std::string::npos, stop_length = 0;
  for (const std::string& stop : stops_) {
    const size_t found = pending_.find(stop);
    if (found < stop_at) {
      stop_at = found;
      stop_length = stop.size();
    }
  }
  if (stop_at != std::string::npos) {
    update.text = pending_.substr(0, include_stop_ ? stop_at + stop_length : stop_at);
    update.stopped = stopped_ = true;
    pending_.clear();
    return update;
  }
  const size_t keep = held_back_length();
  update.text = pending_.substr(0, pending_.size() - keep);
  pending_.erase(0, pending_.size() - keep);
  return update;
}

std::string TextStream::finish() {
  if (stopped_) return "";
  std::string rest = pending_ + detokenizer_.flush();
  pending_.clear();
  return rest;
}

}  // namespace ernie
