#include "text/tokenizer_trainer.h"

#include <sentencepiece_trainer.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <set>
#include <sstream>
#include <unordered_map>

#include "util/error.h"
#include "util/log.h"

namespace ernie {

namespace fs = std::filesystem;
using ordered_json = nlohmann::ordered_json;

namespace {

constexpr const char* kDefaultCorpusDir = "/usr/share/common-licenses";

// The ERNIE 4.5 text chat template as shipped in the models' tokenizer_config.json (a
// data format fact, kept byte for byte).
constexpr std::string_view kErnieTextChatTemplate = R"jinja({%- if not add_generation_prompt is defined -%}{%- set add_generation_prompt = true -%}{%- endif -%}
{%- if not cls_token is defined -%}{%- set cls_token = "<|begin_of_sentence|>" -%}{%- endif -%}
{%- if not sep_token is defined -%}{%- set sep_token = "<|end_of_sentence|>" -%}{%- endif -%}
{{- cls_token -}}
{%- for message in messages -%}
{%- if message["role"] == "user" -%}
{{- "User: " + message["content"] + "\n" -}}
{%- elif message["role"] == "assistant" -%}
{{- "Assistant: " + message["content"] + sep_token -}}
{%- elif message["role"] == "system" -%}
{{- message["content"] + "\n" -}}
{%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}
{{- "Assistant: " -}}
{%- endif -%}
)jinja";

// The Thinking model's conversation format as ernie45-model-spec.md §7.2 reconstructs it
// (Baidu's file was not available): a system block with the settings and the tools as
// JSON, <response> or <tool_call> blocks for past answers, tool results as "tool" turns,
// and a generation prompt that opens <think>. Past reasoning is not repeated.
constexpr std::string_view kErnieThinkingChatTemplate = R"jinja({%- set system = namespace(text="") -%}
{%- for message in messages if message["role"] == "system" -%}{%- set system.text = message["content"] -%}{%- endfor -%}
{{- "<|im_start|>system\n" -}}
{%- if system.text -%}{{- "<system_setting>\n" + system.text + "\n</system_setting>\n\n" -}}{%- endif -%}
{%- if tools -%}{{- "<tool_list>\n" + (tools | tojson) + "\n</tool_list>\n\n" -}}{%- endif -%}
{{- "<global_setting>\nthink_mode=True\n</global_setting><|im_end|>\n\n" -}}
{%- for message in messages -%}
{%- if message["role"] == "user" -%}
{{- "<|im_start|>user\n" + message["content"] + "<|im_end|>\n\n" -}}
{%- elif message["role"] == "tool" -%}
{{- "<|im_start|>tool\n" + message["content"] + "<|im_end|>\n\n" -}}
{%- elif message["role"] == "assistant" -%}
{{- "<|im_start|>assistant\n" -}}
{%- if message["tool_calls"] -%}
{%- for call in message["tool_calls"] -%}
{%- set arguments = call["function"]["arguments"] -%}
{{- "<tool_call>\n{\"name\": " + (call["function"]["name"] | tojson) + ", \"arguments\": " -}}
{{- arguments if arguments is string else (arguments | tojson) -}}
{{- "}\n</tool_call>\n" -}}
{%- endfor -%}
{%- else -%}
{{- "<response>\n" + message["content"] + "\n</response>\n" -}}
{%- endif -%}
{{- "<|im_end|>\n\n" -}}
{%- endif -%}
{%- endfor -%}
{{- "<|im_start|>assistant\n<think>\n" -}})jinja";

// ERNIE-4.5-VL's conversation format (spec §7.3, docs/vl-model-notes.md §9): image and
// video parts become "Picture N:" / "Video N:" and a start marker, a placeholder the
// server expands to the item's tokens, and an end marker, N counting across the whole
// conversation; past reasoning is kept in <think> blocks; the generation prompt opens an
// empty thought unless enable_thinking is true.
constexpr std::string_view kErnieVlChatTemplate = R"jinja({%- set counts = namespace(image=0, video=0) -%}
{{- "<|begin_of_sentence|>" -}}
{%- for message in messages -%}
{%- if message["role"] in ["system", "user"] -%}
{%- if message["role"] == "user" -%}{{- "User: " -}}{%- endif -%}
{%- if message["content"] is string -%}
{{- message["content"] -}}
{%- else -%}
{%- for part in message["content"] -%}
{%- if part["type"] == "text" -%}
{{- part["text"] -}}
{%- elif part["type"] in ["image_url", "image"] -%}
{%- set counts.image = counts.image + 1 -%}
{{- "Picture " ~ counts.image ~ ":<|IMAGE_START|><|image@placeholder|><|IMAGE_END|>" -}}
{%- elif part["type"] in ["video_url", "video"] -%}
{%- set counts.video = counts.video + 1 -%}
{{- "Video " ~ counts.video ~ ":<|VIDEO_START|><|video@placeholder|><|VIDEO_END|>" -}}
{%- endif -%}
{%- endfor -%}
{%- endif -%}
{%- if message["role"] == "system" -%}{{- "\n" -}}{%- endif -%}
{%- elif message["role"] == "assistant" -%}
{{- "\nAssistant: " -}}
{%- if message["reasoning_content"] -%}{{- "<think>\n" + message["reasoning_content"] + "\n</think>\n" -}}{%- endif -%}
{{- (message["content"] or "") + "<|end_of_sentence|>" -}}
{%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt is not defined or add_generation_prompt -%}
{{- "\nAssistant: " -}}
{%- if enable_thinking is defined and enable_thinking -%}{{- "<think>" -}}{%- else -%}{{- "<think>\n\n</think>\n\n" -}}{%- endif -%}
{%- endif -%})jinja";

// The special pieces that follow <unk> <s> </s>. <mask:2> and <mask:3> are absent, as
// in the golden test models, so that the Thinking markers get ids 11..18 there and here.
const std::vector<std::string>& builtin_special_pieces() {
  static const std::vector<std::string> pieces = {
      "<|begin_of_sentence|>", "<|end_of_sentence|>", "<mask:0>", "<mask:1>",
      "<mask:4>",              "<mask:5>",            "<mask:6>", "<mask:7>"};
  return pieces;
}

// Feeds the corpus to SentencePiece one line at a time, in a fixed order, so that
// training sees the same sentences in the same order on every run.
class LineIterator : public sentencepiece::SentenceIterator {
 public:
  explicit LineIterator(std::vector<std::string> lines) : lines_(std::move(lines)) {}
  bool done() const override { return index_ >= lines_.size(); }
  void Next() override { ++index_; }
  const std::string& value() const override { return lines_[index_]; }
  sentencepiece::util::Status status() const override { return {}; }

 private:
  std::vector<std::string> lines_;
  size_t index_ = 0;
};

std::vector<std::string> default_corpus_files() {
  if (!fs::is_directory(kDefaultCorpusDir)) {
    fail("default tokenizer corpus ", kDefaultCorpusDir,
         " does not exist: expected a Debian system, or pass corpus files explicitly");
  }
  // Symlinks (GPL -> GPL-3) would count a text twice; canonical paths dedupe them, and
  // the sorted set fixes the order.
  std::set<std::string> files;
  for (const auto& entry : fs::directory_iterator(kDefaultCorpusDir)) {
    if (entry.is_regular_file()) files.insert(fs::canonical(entry.path()).string());
  }
  return {files.begin(), files.end()};
}

std::vector<std::string> read_corpus_lines(const std::vector<std::string>& files) {
  std::vector<std::string> lines;
  for (const std::string& file : files) {
    std::ifstream in(file, std::ios::binary);
    if (!in) fail("cannot read tokenizer corpus file ", file, ": expected a readable text file");
    for (std::string line; std::getline(in, line);) {
      if (!line.empty()) lines.push_back(std::move(line));
    }
  }
  if (lines.empty()) fail("the tokenizer corpus is empty: expected text in the corpus files");
  return lines;
}

// Markers become SentencePiece user-defined symbols, passed as a comma-separated list.
void check_markers(const std::vector<std::string>& markers) {
  std::set<std::string> seen(builtin_special_pieces().begin(), builtin_special_pieces().end());
  seen.insert({"<unk>", "<s>", "</s>"});
  for (const std::string& marker : markers) {
    const bool has_separator = marker.find_first_of(", \t\n") != std::string::npos;
    if (marker.empty() || has_separator) {
      fail("bad tokenizer marker \"", marker, "\": expected a non-empty string without commas or whitespace");
    }
    if (!seen.insert(marker).second) {
      fail("duplicate tokenizer marker \"", marker, "\": expected each special piece once");
    }
  }
}

std::string join_with_commas(const std::vector<std::string>& parts) {
  std::string joined;
  for (const std::string& part : parts) {
    if (!joined.empty()) joined += ',';
    joined += part;
  }
  return joined;
}

std::unordered_map<std::string, std::string> trainer_arguments(const SyntheticTokenizerOptions& options) {
  std::vector<std::string> user_defined = builtin_special_pieces();
  user_defined.insert(user_defined.end(), options.extra_markers.begin(), options.extra_markers.end());
  return {
      {"model_type", "bpe"},
      {"vocab_size", std::to_string(options.vocab_size)},
      {"character_coverage", "1.0"},
      {"byte_fallback", "true"},
      {"split_digits", "true"},
      // ERNIE keeps text as typed: no leading space added, runs of spaces, tabs and
      // newlines preserved, no Unicode normalization.
      {"add_dummy_prefix", "false"},
      {"remove_extra_whitespaces", "false"},
      {"normalization_rule_name", "identity"},
      {"allow_whitespace_only_pieces", "true"},
      {"unk_id", "0"},
      {"bos_id", "1"},
      {"eos_id", "2"},
      {"pad_id", "-1"},
      {"user_defined_symbols", join_with_commas(user_defined)},
      // One thread and no sampling or shuffling: the same corpus gives the same model.
      {"num_threads", "1"},
      {"input_sentence_size", "0"},
      {"shuffle_input_sentence", "false"},
      {"max_sentence_length", "16384"},
      {"minloglevel", "2"},
  };
}

std::string train_model(const SyntheticTokenizerOptions& options) {
  const auto files = options.corpus_files.empty() ? default_corpus_files() : options.corpus_files;
  LineIterator lines(read_corpus_lines(files));
  std::string serialized_model;
  const auto status =
      sentencepiece::SentencePieceTrainer::Train(trainer_arguments(options), &lines, &serialized_model);
  if (!status.ok()) {
    fail("SentencePiece training failed (vocab_size ", options.vocab_size, ", ", files.size(),
         " corpus files): ", status.ToString(), "; expected a corpus large enough for the vocabulary");
  }
  return serialized_model;
}

void write_file(const fs::path& path, std::string_view content) {
  std::ofstream out(path, std::ios::binary | std::ios::trunc);
  out.write(content.data(), static_cast<std::streamsize>(content.size()));
  out.close();
  if (!out) fail("cannot write ", path.string(), ": expected a writable directory");
}

ordered_json special_tokens_map() {
  return ordered_json{{"bos_token", "<s>"},
                      {"eos_token", "</s>"},
                      {"pad_token", "<unk>"},
                      {"unk_token", "<unk>"},
                      {"cls_token", "<|begin_of_sentence|>"},
                      {"sep_token", "<|end_of_sentence|>"},
                      {"mask_token", "<mask:1>"}};
}

// Markers follow <unk> <s> </s> and the built-in pieces, in the order given.
ordered_json added_tokens_decoder(const std::vector<std::string>& markers) {
  ordered_json decoder = ordered_json::object();
  const size_t first_id = 3 + builtin_special_pieces().size();
  for (size_t i = 0; i < markers.size(); ++i) {
    decoder[std::to_string(first_id + i)] = ordered_json{{"content", markers[i]}, {"special", true}};
  }
  return decoder;
}

ordered_json tokenizer_config(const SyntheticTokenizerOptions& options) {
  ordered_json config = special_tokens_map();
  config["add_bos_token"] = false;
  config["add_eos_token"] = false;
  config["model_max_length"] = 131072;
  config["tokenizer_class"] = "Ernie4_5_Tokenizer";
  config["chat_template"] =
      options.chat_template.empty() ? std::string(kErnieTextChatTemplate) : options.chat_template;
  if (!options.extra_markers.empty()) config["added_tokens_decoder"] = added_tokens_decoder(options.extra_markers);
  return config;
}

}  // namespace

const std::vector<std::string>& ernie_thinking_markers() {
  static const std::vector<std::string> markers = {"<|im_start|>", "<|im_end|>", "<think>",     "</think>",
                                                   "<response>",   "</response>", "<tool_call>", "</tool_call>"};
  return markers;
}

const std::vector<std::string>& ernie_vl_markers() {
  static const std::vector<std::string> markers = {"<think>",         "</think>",      "<|IMAGE_PLACEHOLDER|>",
                                                   "<|IMAGE_START|>", "<|IMAGE_END|>", "<|VIDEO_START|>",
                                                   "<|VIDEO_END|>"};
  return markers;
}

std::string_view ernie_vl_chat_template() { return kErnieVlChatTemplate; }
std::string_view ernie_text_chat_template() { return kErnieTextChatTemplate; }
std::string_view ernie_thinking_chat_template() { return kErnieThinkingChatTemplate; }

void write_synthetic_tokenizer(const std::string& out_dir, const SyntheticTokenizerOptions& options) {
  check_markers(options.extra_markers);
  const std::string model = train_model(options);
  std::error_code error;
  fs::create_directories(out_dir, error);
  if (error) fail("cannot create tokenizer directory ", out_dir, ": ", error.message());
  const fs::path dir(out_dir);
  write_file(dir / "tokenizer.model", model);
  write_file(dir / "tokenizer_config.json", tokenizer_config(options).dump(2) + "\n");
  write_file(dir / "special_tokens_map.json", special_tokens_map().dump(2) + "\n");
  log_info("wrote a ", options.vocab_size, "-piece SentencePiece tokenizer to ", out_dir);
}

}  // namespace ernie
