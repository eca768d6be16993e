// The ERNIE 4.5 tokenizer: a SentencePiece BPE model (byte fallback, digits split, no
// dummy prefix) plus the added/special tokens that the Hugging Face files declare.
// Special tokens are cut out of the text as whole strings before SentencePiece sees it,
// because a chat prompt must turn "<|begin_of_sentence|>" into one id whatever the
// SentencePiece model thinks of that string. Decoding goes through a per-id byte table
// built once at load, so decoding a token is a lookup (see docs/tokenizer.md).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <vector>

namespace sentencepiece {
class SentencePieceProcessor;
}

namespace ernie {

// Finds whole-string token occurrences in text: at the leftmost position where any
// token starts, the longest token that matches there wins (so "<mask:10>" beats
// "<mask:1>").
class TokenStringMatcher {
 public:
  struct Match {
    size_t position = 0;
    size_t length = 0;
    int32_t id = 0;
  };

  void add(const std::string& token, int32_t id);
  bool empty() const { return count_ == 0; }
  std::optional<Match> find(std::string_view text, size_t from) const;

 private:
  // Tokens bucketed by first byte, longest first, so each text position only tries the
  // few tokens that can start there.
  std::array<std::vector<std::pair<std::string, int32_t>>, 256> by_first_byte_;
  size_t count_ = 0;
};

struct TokenizerFiles;  // what the JSON files declare; defined in tokenizer.cpp

class Tokenizer {
 public:
  // Returned by bos_id()/eos_id()/pad_id() when the tokenizer defines no such token.
  static constexpr int32_t kNoToken = -1;

  // Loads `model_dir`/tokenizer.model (or spm.model, ernie_token_100k.model) and the
  // Hugging Face JSON files next to it (tokenizer_config.json, special_tokens_map.json,
  // added_tokens.json, chat_template.jinja) where present.
  static Tokenizer load(const std::string& model_dir);

  Tokenizer(Tokenizer&&) noexcept;
  Tokenizer& operator=(Tokenizer&&) noexcept;
  ~Tokenizer();

  // Adds no BOS/EOS. With parse_special false, special token strings are ordinary text:
  // no special id can come out of it (added tokens that are not special still match).
  std::vector<int32_t> encode(std::string_view text, bool parse_special = true) const;

  // Valid UTF-8: byte sequences that are not UTF-8 come out as U+FFFD. Ids the tokenizer
  // does not know (embedding rows past the vocabulary) decode to nothing.
  std::string decode(std::span<const int32_t> ids, bool skip_special_tokens = true) const;

  // The raw bytes of one token: possibly a lone byte of a multi-byte character.
  const std::string& token_bytes(int32_t id, bool skip_special) const;
  bool is_special(int32_t id) const;

  // Number of ids the tokenizer knows: max(piece count, highest added id + 1).
  int32_t vocab_size() const { return static_cast<int32_t>(token_text_.size()); }
  int32_t piece_count() const { return piece_count_; }

  // The id of a string that is exactly one token (an added token or a piece, e.g.
  // "</think>" or "▁"); nullopt if no single token has that text.
  std::optional<int32_t> token_id(std::string_view exact_token) const;

  int32_t bos_id() const { return bos_id_; }
  // tokenizer_config.json's add_bos_token: whether a text's encoding starts with BOS for
  // tools that follow transformers (perplexity's second-half protocol, as llama.cpp).
  bool adds_bos() const { return adds_bos_; }
  int32_t eos_id() const { return eos_id_; }
  int32_t pad_id() const { return pad_id_; }
  int32_t unk_id() const { return unk_id_; }
  const std::string& cls_token() const { return cls_token_; }
  const std::string& sep_token() const { return sep_token_; }
  const std::string& chat_template() const { return chat_template_; }

 private:
  Tokenizer();

  void load_sentencepiece(const std::string& model_dir);
  void build_piece_table();
  void add_tokens(const TokenizerFiles& files);
  void resolve_named_tokens(const TokenizerFiles& files);
  void build_matchers();
  void set_token(int32_t id, const std::string& content, bool special);
  void warn_if_dummy_prefix() const;
  void append_pieces(std::string_view text, std::vector<int32_t>& ids) const;
  void append_literal(std::string_view text, std::vector<int32_t>& ids) const;
  bool sentencepiece_can_emit(std::string_view content) const;

  std::unique_ptr<sentencepiece::SentencePieceProcessor> processor_;
  int32_t piece_count_ = 0;

  // Indexed by id: the text a token decodes to, and whether skip_special hides it.
  std::vector<std::string> token_text_;
  std::vector<char> token_is_special_;

  // Every added or special token string with its id.
  std::unordered_map<std::string, int32_t> added_token_ids_;
  TokenStringMatcher all_added_matcher_;       // parse_special = true
  TokenStringMatcher non_special_matcher_;     // parse_special = false
  TokenStringMatcher emittable_special_matcher_;  // specials SentencePiece could produce

  int32_t bos_id_ = kNoToken;
  bool adds_bos_ = false;
  int32_t eos_id_ = kNoToken;
  int32_t pad_id_ = kNoToken;
  int32_t unk_id_ = kNoToken;
  std::string cls_token_;
  std::string sep_token_;
  std::string chat_template_;
};

// UTF-8 repair shared by decode() and the incremental detokenizer, so that streaming
// and whole decoding replace the same bytes. Appends `bytes` to `out`, replacing each
// maximal invalid subsequence with U+FFFD. When `at_end` is false, a trailing
// sequence that is incomplete but could still become valid is not consumed. Returns
// the number of bytes consumed.
size_t append_valid_utf8(std::string_view bytes, bool at_end, std::string& out);

}  // namespace ernie
