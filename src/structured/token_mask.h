// Which tokens a grammar allows next: the vocabulary's byte strings in a trie, walked
// once per step from the matcher's state, so tokens sharing a prefix share the work and
// a dead prefix cuts off every token below it.
#pragma once

#include <cstdint>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <vector>

#include "structured/matcher.h"
#include "text/tokenizer.h"

namespace ernie::structured {

// A token judged by its text rather than through the trie.
struct LiteralToken {
  int32_t id = 0;
  std::string text;
};

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
  // The mask of interned state `state` (not kDead), computed once per state and kept by
  // the matcher (valid until its masks are dropped). `literal_tokens` are tokens outside
  // the trie (special tokens whose text stays in the output) allowed when the grammar
  // takes their text; a matcher must always be asked with the same list.
  const std::vector<uint32_t>& mask(GrammarMatcher& matcher, int32_t state,
                                    std::span<const LiteralToken> literal_tokens = {}) const;

 private:
  struct Node {
    uint32_t first_child = 0, child_count = 0;  // children are contiguous in `nodes_`
    uint32_t first_token = 0, token_count = 0;  // tokens ending here, in `tokens_`
    uint8_t byte = 0;                           // the edge into this node
  };
  // For a set of bytes B that lead a state back to itself (a JSON string's characters):
  // the tokens made only of bytes in B, which such a state always allows, and per node
  // whether some token below it has a byte outside B, the only subtrees the walk from
  // that state must visit.
  struct LoopTokens {
    std::vector<uint32_t> inside;  // mask of the tokens whose every byte is in B
    std::vector<bool> mixed;       // per node: a token below has a byte outside B
  };
  const LoopTokens& loop_tokens(const ByteSet& loop) const;
  static constexpr size_t kMinLoopBytes = 64;  // fewer: an ordinary walk is as quick
  static constexpr size_t kMaxLoopSets = 64;
  // Sets the bits of the tokens whose bytes end at `node`.
  void allow_tokens_ending_at(uint32_t node, std::vector<uint32_t>& mask) const;
  // Walks the subtree under `node` from matcher state `state`, allowing what it reaches.
  void walk(GrammarMatcher& matcher, uint32_t node, int32_t state, std::vector<uint32_t>& mask) const;

  std::vector<Node> nodes_;  // nodes_[0] is the root
  std::vector<int32_t> tokens_;
  std::vector<int32_t> end_tokens_;
  size_t vocab_size_ = 0;
  // Loop sets met so far (few per grammar, and the same across grammars); bounded.
  mutable std::mutex loop_mutex_;
  mutable std::vector<std::pair<ByteSet, std::unique_ptr<LoopTokens>>> loops_;
};

// The trie of a model's vocabulary: each token's bytes as they appear in generated text
// (special tokens are never allowed by a constraint), `vocab_size` ids (the model's,
// which may exceed the tokenizer's), `end_tokens` allowed when the grammar accepts.
TokenTrie vocabulary_trie(const Tokenizer& tokenizer, int64_t vocab_size, std::vector<int32_t> end_tokens);
// The bytes of every token id below `vocab_size` as vocabulary_trie sees them (empty for
// special tokens and ids past the tokenizer's).
std::vector<std::string> vocabulary_bytes(const Tokenizer& tokenizer, int64_t vocab_size);

}  // namespace ernie::structured
