// Streaming decode for generation: tokens arrive one at a time, and a character may be
// split over several byte-fallback tokens (an emoji is four "<0x..>" pieces). push()
// returns only whole characters, so a client never sees half a UTF-8 sequence.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "text/tokenizer.h"

namespace ernie {

class IncrementalDetokenizer {
 public:
  // Keeps a reference: `tokenizer` must outlive the detokenizer. With
  // skip_special_tokens, special tokens decode to nothing except `visible_special`
  // (the markers a reasoning or tool-call parser reads in the text).
  explicit IncrementalDetokenizer(const Tokenizer& tokenizer, bool skip_special_tokens = true,
                                  std::vector<int32_t> visible_special = {});

  // The text completed by this token: possibly empty while a character is incomplete.
  // Bytes that can never become valid UTF-8 come out as U+FFFD right away.
  std::string push(int32_t id);

  // Ends the stream: an incomplete trailing character comes out as U+FFFD.
  std::string flush();

  // Bytes held back waiting for the rest of a character (at most 3).
  size_t pending_bytes() const { return pending_.size(); }
  void reset() { pending_.clear(); }

 private:
  const Tokenizer* tokenizer_;
  bool skip_special_tokens_;
  std::vector<int32_t> visible_special_;
  std::string pending_;
};

}  // namespace ernie
