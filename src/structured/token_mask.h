// Which tokens a grammar allows next: the vocabulary's byte strings in a trie, walked
// once per step from the matcher's state, so tokens sharing a prefix share the work and
// a dead prefix cuts off every token below it.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "structured/matcher.h"
#include "text/tokenizer.h"

namespace ernie::structured {

class TokenTrie {
 public:
  // `token_bytes[id]`: the bytes token id stands for in generated text; an empty string
  // marks a token a constraint never allows (control tokens). `end_tokens` are allowed
  // exactly when the grammar accepts the text so far.
  TokenTrie(const std::vector<std::string>& token_bytes, std::vector<int32_t> end_tokens);

  size_t vocab_size() const { return vocab_size_; }
  size_t node_count() const { return nodes_.size(); }

  // Sets bit id of `mask` (one bit per token, 32 per word) for every allowed token and
  // clears the others.
  void allowed(GrammarMatcher& matcher, const MatchState& state, std::vector<uint32_t>& mask) const;

 private:
  struct Node {
    uint32_t first_child = 0, child_count = 0;  // children are contiguous in `nodes_`
    uint32_t first_token = 0, token_count = 0;  // tokens ending here, in `tokens_`
    uint8_t byte = 0;                           // the edge into this node
  };
  std::vector<Node> nodes_;  // nodes_[0] is the root
  std::vector<int32_t> tokens_;
  std::vector<int32_t> end_tokens_;
  size_t vocab_size_ = 0;
};

// The trie of a model's vocabulary: each token's bytes as they appear in generated text
// (special tokens are never allowed by a constraint), `vocab_size` ids (the model's,
// which may exceed the tokenizer's), `end_tokens` allowed when the grammar accepts.
TokenTrie vocabulary_trie(const Tokenizer& tokenizer, int64_t vocab_size, std::vector<int32_t> end_tokens);

}  // namespace ernie::structured
