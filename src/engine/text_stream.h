// The text side of one request's output: incremental detokenization and stop strings.
// Text that might be the beginning of a stop string is held back until it is known
// not to be one, so a streamed response never shows part of a stop string it then
// retracts.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "text/incremental_detokenizer.h"
#include "text/tokenizer.h"

namespace ernie {

class TextStream {
 public:
  // `visible_special`: special tokens whose text is kept (see IncrementalDetokenizer).
  TextStream(const Tokenizer& tokenizer, std::vector<std::string> stop_strings, bool include_stop_string,
             std::vector<int32_t> visible_special = {});

  struct Update {
    std::string text;      // safe to emit now
    bool stopped = false;  // a stop string completed; the request must finish
  };
  Update push(int32_t token);
  // At the end of the request: whatever was held back (nothing after a stop).
  std::string finish();

 private:
  // Length of the longest suffix of pending_ that is a proper prefix of a stop string.
  size_t held_back_length() const;

  IncrementalDetokenizer detokenizer_;
  std::vector<std::string> stops_;
  bool include_stop_;
  std::string pending_;
  bool stopped_ = false;
};

}  // namespace ernie
