// Trains a small SentencePiece tokenizer that behaves like ERNIE 4.5's (BPE, byte
// fallback, split digits, no dummy prefix, spaces/tabs/newlines kept) and writes it with
// Hugging Face-style JSON files, so tests and synthetic checkpoints get a real
// tokenizer directory without downloading one. The pieces are learned from the
// corpus, so they are not ERNIE's; the special pieces sit at the same ids as in the
// golden test models (see docs/tokenizer.md).
#pragma once

#include <string>
#include <string_view>
#include <vector>

namespace ernie {

struct SyntheticTokenizerOptions {
  // Plain-text training files, one sentence per line. Empty: every file in
  // /usr/share/common-licenses (present on every Debian system).
  std::vector<std::string> corpus_files;
  // Total piece count, including the special and byte pieces.
  int vocab_size = 4096;
  // Single-piece markers added after the built-in special pieces and listed as special
  // in added_tokens_decoder, e.g. ernie_thinking_markers().
  std::vector<std::string> extra_markers;
  // Written as tokenizer_config.json "chat_template". Empty: the ERNIE 4.5 text template.
  std::string chat_template;
};

// Writes tokenizer.model, tokenizer_config.json and special_tokens_map.json into
// `out_dir` (created if needed). Throws ernie::Error if training fails.
void write_synthetic_tokenizer(const std::string& out_dir, const SyntheticTokenizerOptions& options);

// The ERNIE 4.5 Thinking markers, in the order that gives them ids 11..18.
const std::vector<std::string>& ernie_thinking_markers();

// ERNIE-4.5-VL's markers: <think>, </think>, then <|IMAGE_PLACEHOLDER|> and the image and
// video start/end markers, in that order (consecutive ids).
const std::vector<std::string>& ernie_vl_markers();
// The ERNIE-4.5-VL conversation format (spec §7.3) with image and video parts.
std::string_view ernie_vl_chat_template();

// The chat template of the ERNIE 4.5 text models (0.3B, 21B-A3B, 300B).
std::string_view ernie_text_chat_template();
// The ERNIE-4.5-21B-A3B-Thinking format (reconstructed, spec §7.2), with tools.
std::string_view ernie_thinking_chat_template();

}  // namespace ernie
