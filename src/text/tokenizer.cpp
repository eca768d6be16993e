#include "text/tokenizer.h"

#include <sentencepiece_processor.h>

#include <algorithm>
#include <charconv>
#include <filesystem>
#include <map>
#include <nlohmann/json.hpp>

#include "util/error.h"
#include "util/log.h"
#include "util/text_file.h"

namespace ernie {

namespace fs = std::filesystem;
using nlohmann::json;

namespace {

// FastDeploy accepts these names too; the first one present wins.
constexpr std::array<const char*, 3> kModelFileNames = {"tokenizer.model", "spm.model",
                                                        "ernie_token_100k.model"};
constexpr std::string_view kSentencePieceSpace = "\xE2\x96\x81";  // U+2581 "▁"
constexpr std::string_view kReplacementCharacter = "\xEF\xBF\xBD";  // U+FFFD
// An added-token id beyond this is a corrupt file, not a vocabulary: the decode table
// is sized by the largest id.
constexpr int64_t kMaxAddedTokenId = 1 << 21;

// The named special tokens of the Hugging Face files, in the order they are reported.
constexpr std::array<const char*, 7> kNamedSpecialTokens = {
    "bos_token", "eos_token", "unk_token", "pad_token", "cls_token", "sep_token", "mask_token"};

json read_json_object(const fs::path& path) {
  json parsed;
  try {
    parsed = json::parse(read_text_file(path.string()));
  } catch (const json::exception& e) {
    fail("invalid JSON in ", path.string(), ": ", e.what());
  }
  if (!parsed.is_object()) {
    fail("unexpected JSON in ", path.string(), ": top level is a ", parsed.type_name(),
         ", expected an object");
  }
  return parsed;
}

// Token values are either a plain string or a serialized AddedToken {"content": ...}.
std::optional<std::string> token_string(const json& value, const fs::path& file,
                                        std::string_view key) {
  if (value.is_null()) return std::nullopt;
  if (value.is_string()) return value.get<std::string>();
  if (value.is_object() && value.contains("content") && value["content"].is_string()) {
    return value["content"].get<std::string>();
  }
  fail("unexpected value for \"", key, "\" in ", file.string(), ": ", value.dump(),
       ", expected a string or an object with a string \"content\"");
}

// SentencePiece spells a space as "▁" inside pieces.
std::string piece_text(std::string_view piece) {
  std::string text;
  size_t start = 0;
  for (size_t at = piece.find(kSentencePieceSpace); at != std::string_view::npos;
       at = piece.find(kSentencePieceSpace, start)) {
    text.append(piece.substr(start, at - start));
    text.push_back(' ');
    start = at + kSentencePieceSpace.size();
  }
  text.append(piece.substr(start));
  return text;
}

// Byte-fallback pieces are spelled "<0xAB>".
std::optional<char> byte_of_piece(std::string_view piece) {
  if (piece.size() != 6 || !piece.starts_with("<0x") || piece.back() != '>') return std::nullopt;
  unsigned value = 0;
  const char* first = piece.data() + 3;
  const char* last = piece.data() + 5;
  const auto [end, error] = std::from_chars(first, last, value, 16);
  if (error != std::errc() || end != last) return std::nullopt;
  return static_cast<char>(value);
}

size_t utf8_char_length(unsigned char lead) {
  if (lead >= 0xF0) return 4;
  if (lead >= 0xE0) return 3;
  if (lead >= 0xC0) return 2;
  return 1;
}

}  // namespace

// ---------------------------------------------------------------------------------------
// What the Hugging Face files say about added and special tokens, before ids are settled.
struct TokenizerFiles {
  struct AddedToken {
    std::string content;
    int32_t id = 0;
    bool special = false;
  };
  std::map<std::string, std::string> named_tokens;  // "bos_token" -> "<s>"
  std::vector<std::string> additional_special_tokens;
  std::vector<AddedToken> added_tokens;
  std::string chat_template;
  bool add_bos_token = false;  // ERNIE's tokenizer classes add none unless configured to
};

namespace {

void read_special_token_keys(const json& object, const fs::path& file,
                             std::map<std::string, std::string>& named,
                             std::vector<std::string>& additional) {
  for (const char* key : kNamedSpecialTokens) {
    if (!object.contains(key)) continue;
    if (auto token = token_string(object[key], file, key)) named[key] = *token;
  }
  if (!object.contains("additional_special_tokens")) return;
  const json& list = object["additional_special_tokens"];
  if (!list.is_array()) {
    fail("unexpected \"additional_special_tokens\" in ", file.string(), ": a ", list.type_name(),
         ", expected an array");
  }
  for (const json& entry : list) {
    if (auto token = token_string(entry, file, "additional_special_tokens")) {
      if (std::find(additional.begin(), additional.end(), *token) == additional.end()) {
        additional.push_back(*token);
      }
    }
  }
}

int32_t checked_token_id(int64_t id, std::string_view spelled, const fs::path& file) {
  if (id < 0 || id > kMaxAddedTokenId) {
    fail("bad token id ", spelled, " in ", file.string(), ": expected an integer in [0, ",
         kMaxAddedTokenId, "]");
  }
  return static_cast<int32_t>(id);
}

int32_t parse_token_id(std::string_view text, const fs::path& file) {
  int64_t id = -1;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), id);
  if (error != std::errc() || end != text.data() + text.size()) id = -1;
  return checked_token_id(id, str_cat("\"", text, "\""), file);
}

// added_tokens.json: {"<|IMAGE_START|>": 101304, ...}
void read_added_tokens_json(const fs::path& file, std::vector<TokenizerFiles::AddedToken>& out) {
  const json tokens = read_json_object(file);
  for (const auto& [content, id] : tokens.items()) {
    if (!id.is_number_integer()) {
      fail("unexpected id for \"", content, "\" in ", file.string(), ": ", id.dump(),
           ", expected an integer");
    }
    out.push_back({content, checked_token_id(id.get<int64_t>(), id.dump(), file), false});
  }
}

// tokenizer_config.json: {"added_tokens_decoder": {"11": {"content": "<|im_start|>", "special": true}}}
void read_added_tokens_decoder(const json& decoder, const fs::path& file,
                               std::vector<TokenizerFiles::AddedToken>& out) {
  if (!decoder.is_object()) {
    fail("unexpected \"added_tokens_decoder\" in ", file.string(), ": a ", decoder.type_name(),
         ", expected an object {id: {content, special}}");
  }
  for (const auto& [id_text, entry] : decoder.items()) {
    const int32_t id = parse_token_id(id_text, file);
    if (!entry.is_object() || !entry.contains("content") || !entry["content"].is_string()) {
      fail("unexpected added_tokens_decoder entry ", id_text, " in ", file.string(), ": ",
           entry.dump(), ", expected an object with a string \"content\"");
    }
    const bool special = entry.contains("special") && entry["special"].is_boolean() &&
                         entry["special"].get<bool>();
    out.push_back({entry["content"].get<std::string>(), id, special});
  }
}

std::string read_chat_template_value(const json& value, const fs::path& file) {
  if (value.is_string()) return value.get<std::string>();
  // Newer files may hold several named templates; "default" is the chat one.
  if (value.is_array()) {
    std::string first;
    for (const json& entry : value) {
      if (!entry.is_object() || !entry.contains("template") || !entry["template"].is_string()) continue;
      if (entry.contains("name") && entry["name"] == "default") return entry["template"].get<std::string>();
      if (first.empty()) first = entry["template"].get<std::string>();
    }
    return first;
  }
  if (value.is_null()) return "";
  fail("unexpected \"chat_template\" in ", file.string(), ": a ", value.type_name(),
       ", expected a string or a list of {name, template}");
}

// transformers prefers a template saved in its own file over the config's copy.
std::optional<std::string> read_separate_chat_template(const fs::path& dir) {
  const fs::path jinja_path = dir / "chat_template.jinja";
  if (fs::exists(jinja_path)) return read_text_file(jinja_path.string());
  const fs::path json_path = dir / "chat_template.json";
  if (!fs::exists(json_path)) return std::nullopt;
  const json holder = read_json_object(json_path);
  if (!holder.contains("chat_template")) return std::nullopt;
  return read_chat_template_value(holder["chat_template"], json_path);
}

TokenizerFiles read_tokenizer_files(const fs::path& dir) {
  TokenizerFiles files;
  const fs::path config_path = dir / "tokenizer_config.json";
  if (fs::exists(config_path)) {
    const json config = read_json_object(config_path);
    read_special_token_keys(config, config_path, files.named_tokens, files.additional_special_tokens);
    if (config.contains("added_tokens_decoder")) {
      read_added_tokens_decoder(config["added_tokens_decoder"], config_path, files.added_tokens);
    }
    if (config.contains("chat_template")) {
      files.chat_template = read_chat_template_value(config["chat_template"], config_path);
    }
    if (config.contains("add_bos_token") && config["add_bos_token"].is_boolean())
      files.add_bos_token = config["add_bos_token"].get<bool>();
  }
  // special_tokens_map.json is what transformers saves last, so it overrides the config.
  const fs::path map_path = dir / "special_tokens_map.json";
  if (fs::exists(map_path)) {
    read_special_token_keys(read_json_object(map_path), map_path, files.named_tokens,
                            files.additional_special_tokens);
  }
  const fs::path added_path = dir / "added_tokens.json";
  if (fs::exists(added_path)) read_added_tokens_json(added_path, files.added_tokens);
  if (auto separate = read_separate_chat_template(dir)) files.chat_template = *separate;
  return files;
}

}  // namespace

// ---------------------------------------------------------------------------------------
// TokenStringMatcher

void TokenStringMatcher::add(const std::string& token, int32_t id) {
  if (token.empty()) return;
  auto& bucket = by_first_byte_[static_cast<unsigned char>(token.front())];
  for (auto& [existing, existing_id] : bucket) {
    if (existing == token) {
      existing_id = id;
      return;
    }
  }
  bucket.emplace_back(token, id);
  std::stable_sort(bucket.begin(), bucket.end(),
                   [](const auto& a, const auto& b) { return a.first.size() > b.first.size(); });
  ++count_;
}

std::optional<TokenStringMatcher::Match> TokenStringMatcher::find(std::string_view text,
                                                                  size_t from) const {
  if (count_ == 0) return std::nullopt;
  for (size_t position = from; position < text.size(); ++position) {
    const auto& bucket = by_first_byte_[static_cast<unsigned char>(text[position])];
    for (const auto& [token, id] : bucket) {
      if (text.substr(position, token.size()) == token) return Match{position, token.size(), id};
    }
  }
  return std::nullopt;
}

// ---------------------------------------------------------------------------------------
// Tokenizer

Tokenizer::Tokenizer() = default;
Tokenizer::Tokenizer(Tokenizer&&) noexcept = default;
Tokenizer& Tokenizer::operator=(Tokenizer&&) noexcept = default;
Tokenizer::~Tokenizer() = default;

Tokenizer Tokenizer::load(const std::string& model_dir) {
  if (!fs::is_directory(model_dir)) {
    fail("tokenizer directory ", model_dir, " does not exist: expected a model directory with ",
         kModelFileNames[0]);
  }
  Tokenizer tokenizer;
  tokenizer.load_sentencepiece(model_dir);
  const TokenizerFiles files = read_tokenizer_files(model_dir);
  tokenizer.build_piece_table();
  tokenizer.add_tokens(files);
  tokenizer.resolve_named_tokens(files);
  tokenizer.build_matchers();
  tokenizer.chat_template_ = files.chat_template;
  tokenizer.warn_if_dummy_prefix();
  log_debug("tokenizer ", model_dir, ": ", tokenizer.piece_count_, " pieces, ",
            tokenizer.added_token_ids_.size(), " added/special tokens, vocab ",
            tokenizer.vocab_size(), tokenizer.chat_template_.empty() ? ", no chat template" : "");
  return tokenizer;
}

void Tokenizer::load_sentencepiece(const std::string& model_dir) {
  std::optional<fs::path> model_path;
  for (const char* name : kModelFileNames) {
    if (fs::exists(fs::path(model_dir) / name)) {
      model_path = fs::path(model_dir) / name;
      break;
    }
  }
  if (!model_path) {
    fail("no tokenizer model in ", model_dir, ": expected one of ", kModelFileNames[0], ", ",
         kModelFileNames[1], ", ", kModelFileNames[2]);
  }
  processor_ = std::make_unique<sentencepiece::SentencePieceProcessor>();
  // Reading the bytes ourselves gives unreadable files our error message, naming the path.
  const auto status = processor_->LoadFromSerializedProto(read_text_file(model_path->string()));
  if (!status.ok()) {
    fail("cannot load SentencePiece model ", model_path->string(), ": ", status.ToString(),
         " (expected a SentencePiece model file)");
  }
  piece_count_ = processor_->GetPieceSize();
}

void Tokenizer::build_piece_table() {
  token_text_.assign(static_cast<size_t>(piece_count_), std::string());
  token_is_special_.assign(static_cast<size_t>(piece_count_), 0);
  for (int32_t id = 0; id < piece_count_; ++id) {
    const std::string& piece = processor_->IdToPiece(id);
    const auto index = static_cast<size_t>(id);
    if (processor_->IsUnused(id)) continue;
    if (processor_->IsControl(id) || processor_->IsUnknown(id)) {
      token_text_[index] = piece;
      token_is_special_[index] = 1;
    } else if (const auto byte = processor_->IsByte(id) ? byte_of_piece(piece) : std::nullopt) {
      token_text_[index] = std::string(1, *byte);
    } else {
      token_text_[index] = piece_text(piece);
    }
  }
}

void Tokenizer::set_token(int32_t id, const std::string& content, bool special) {
  const auto index = static_cast<size_t>(id);
  if (index >= token_text_.size()) {
    token_text_.resize(index + 1);
    token_is_special_.resize(index + 1, 0);
  }
  token_text_[index] = content;
  token_is_special_[index] = special ? 1 : 0;
  added_token_ids_[content] = id;
}

void Tokenizer::add_tokens(const TokenizerFiles& files) {
  for (const auto& token : files.added_tokens) {
    const auto known = added_token_ids_.find(token.content);
    if (known != added_token_ids_.end()) {
      if (known->second != token.id) {
        log_warning("tokenizer: added token \"", token.content, "\" has id ", known->second,
                    " and also id ", token.id, "; keeping ", known->second);
      }
      continue;
    }
    set_token(token.id, token.content, token.special);
  }
  std::vector<std::string> special_strings = files.additional_special_tokens;
  for (const auto& [key, content] : files.named_tokens) special_strings.push_back(content);
  for (const std::string& content : special_strings) {
    const auto id = token_id(content);
    if (!id) {
      log_warning("tokenizer: special token \"", content,
                  "\" is neither an added token nor a SentencePiece piece; it will be encoded as text");
      continue;
    }
    set_token(*id, content, true);
  }
}

void Tokenizer::resolve_named_tokens(const TokenizerFiles& files) {
  const auto id_of = [&](const char* key, int sentencepiece_default) -> int32_t {
    const auto named = files.named_tokens.find(key);
    if (named == files.named_tokens.end()) return sentencepiece_default >= 0 ? sentencepiece_default : kNoToken;
    return token_id(named->second).value_or(kNoToken);
  };
  bos_id_ = id_of("bos_token", processor_->bos_id());
  eos_id_ = id_of("eos_token", processor_->eos_id());
  unk_id_ = id_of("unk_token", processor_->unk_id());
  pad_id_ = id_of("pad_token", processor_->pad_id());
  const auto string_of = [&](const char* key) {
    const auto named = files.named_tokens.find(key);
    return named == files.named_tokens.end() ? std::string() : named->second;
  };
  cls_token_ = string_of("cls_token");
  adds_bos_ = files.add_bos_token && bos_id_ != kNoToken;
  sep_token_ = string_of("sep_token");
}

bool Tokenizer::sentencepiece_can_emit(std::string_view content) const {
  const int id = processor_->PieceToId(content);
  if (id < 0 || id >= piece_count_ || processor_->IdToPiece(id) != content) return false;
  return !processor_->IsControl(id) && !processor_->IsUnknown(id) && !processor_->IsUnused(id) &&
         !processor_->IsByte(id);
}

void Tokenizer::build_matchers() {
  for (const auto& [content, id] : added_token_ids_) {
    all_added_matcher_.add(content, id);
    if (!is_special(id)) {
      non_special_matcher_.add(content, id);
    } else if (sentencepiece_can_emit(content)) {
      emittable_special_matcher_.add(content, id);
    }
  }
}

void Tokenizer::warn_if_dummy_prefix() const {
  std::vector<std::string> pieces;
  if (!processor_->Encode("a", &pieces).ok() || pieces.empty()) return;
  if (pieces.front().starts_with(kSentencePieceSpace)) {
    log_warning("tokenizer: the SentencePiece model inserts a dummy prefix (\"a\" encodes as \"",
                pieces.front(), "\"); ERNIE's tokenizer does not, so prompts will not match ",
                "the model's training");
  }
}

std::vector<int32_t> Tokenizer::encode(std::string_view text, bool parse_special) const {
  std::vector<int32_t> ids;
  const TokenStringMatcher& matcher = parse_special ? all_added_matcher_ : non_special_matcher_;
  size_t position = 0;
  while (position < text.size()) {
    const auto match = matcher.find(text, position);
    const size_t plain_end = match ? match->position : text.size();
    const std::string_view plain = text.substr(position, plain_end - position);
    if (parse_special) {
      append_pieces(plain, ids);
    } else {
      append_literal(plain, ids);
    }
    if (!match) break;
    ids.push_back(match->id);
    position = match->position + match->length;
  }
  return ids;
}

void Tokenizer::append_pieces(std::string_view text, std::vector<int32_t>& ids) const {
  if (text.empty()) return;
  std::vector<int> piece_ids;
  const auto status = processor_->Encode(text, &piece_ids);
  if (!status.ok()) {
    fail("SentencePiece could not encode ", text.size(), " bytes of text: ", status.ToString());
  }
  ids.insert(ids.end(), piece_ids.begin(), piece_ids.end());
}

// SentencePiece matches its user-defined pieces (where ERNIE keeps most special tokens)
// anywhere in the text. To keep such a string literal, the text is cut after the
// string's first character, so no segment holds the whole string. (A one-character
// special cannot be cut and is left to SentencePiece.)
void Tokenizer::append_literal(std::string_view text, std::vector<int32_t>& ids) const {
  size_t segment_start = 0;
  size_t search_from = 0;
  while (true) {
    const auto match = emittable_special_matcher_.find(text, search_from);
    if (!match) break;
    const size_t first_char = utf8_char_length(static_cast<unsigned char>(text[match->position]));
    const size_t cut = std::min(match->position + first_char, text.size());
    append_pieces(text.substr(segment_start, cut - segment_start), ids);
    segment_start = cut;
    search_from = cut;
  }
  append_pieces(text.substr(segment_start), ids);
}

std::string Tokenizer::decode(std::span<const int32_t> ids, bool skip_special_tokens) const {
  std::string bytes;
  for (const int32_t id : ids) bytes += token_bytes(id, skip_special_tokens);
  std::string text;
  text.reserve(bytes.size());
  append_valid_utf8(bytes, true, text);
  return text;
}

const std::string& Tokenizer::token_bytes(int32_t id, bool skip_special) const {
  static const std::string kNothing;
  if (id < 0 || static_cast<size_t>(id) >= token_text_.size()) return kNothing;
  const auto index = static_cast<size_t>(id);
  if (skip_special && token_is_special_[index]) return kNothing;
  return token_text_[index];
}

bool Tokenizer::is_special(int32_t id) const {
  return id >= 0 && static_cast<size_t>(id) < token_is_special_.size() &&
         token_is_special_[static_cast<size_t>(id)] != 0;
}

std::optional<int32_t> Tokenizer::token_id(std::string_view exact_token) const {
  const auto added = added_token_ids_.find(std::string(exact_token));
  if (added != added_token_ids_.end()) return added->second;
  if (!processor_ || exact_token.empty()) return std::nullopt;
  const int id = processor_->PieceToId(exact_token);
  if (id < 0 || id >= piece_count_ || processor_->IdToPiece(id) != exact_token) return std::nullopt;
  return id;
}

// ---------------------------------------------------------------------------------------
// UTF-8 repair. Follows the Unicode "maximal subpart" practice (as Python's
// errors="replace" does): a lead byte with its valid continuation bytes so far becomes
// one U+FFFD, so streaming and whole decoding replace identically.

namespace {

struct Utf8Lead {
  size_t continuation_bytes = 0;  // 0 with valid == false: not a lead byte
  unsigned char second_min = 0x80;  // the second byte's range excludes overlongs and surrogates
  unsigned char second_max = 0xBF;
  bool valid = false;
};

Utf8Lead classify_lead(unsigned char byte) {
  if (byte >= 0xC2 && byte <= 0xDF) return {1, 0x80, 0xBF, true};
  if (byte == 0xE0) return {2, 0xA0, 0xBF, true};
  if (byte == 0xED) return {2, 0x80, 0x9F, true};
  if (byte >= 0xE1 && byte <= 0xEF) return {2, 0x80, 0xBF, true};
  if (byte == 0xF0) return {3, 0x90, 0xBF, true};
  if (byte >= 0xF1 && byte <= 0xF3) return {3, 0x80, 0xBF, true};
  if (byte == 0xF4) return {3, 0x80, 0x8F, true};
  return {};
}

}  // namespace

size_t append_valid_utf8(std::string_view bytes, bool at_end, std::string& out) {
  size_t position = 0;
  while (position < bytes.size()) {
    const auto lead_byte = static_cast<unsigned char>(bytes[position]);
    if (lead_byte < 0x80) {
      out.push_back(static_cast<char>(lead_byte));
      ++position;
      continue;
    }
    const Utf8Lead lead = classify_lead(lead_byte);
    if (!lead.valid) {
      out += kReplacementCharacter;
      ++position;
      continue;
    }
    size_t next = position + 1;
    size_t seen = 0;
    while (seen < lead.continuation_bytes && next < bytes.size()) {
      const auto byte = static_cast<unsigned char>(bytes[next]);
      const unsigned char low = seen == 0 ? lead.second_min : 0x80;
      const unsigned char high = seen == 0 ? lead.second_max : 0xBF;
      if (byte < low || byte > high) break;
      ++next;
      ++seen;
    }
    if (seen == lead.continuation_bytes) {
      out.append(bytes.substr(position, next - position));
    } else if (next == bytes.size() && !at_end) {
      return position;  // incomplete: the next token may finish the character
    } else {
      out += kReplacementCharacter;
    }
    position = next;
  }
  return position;
}

}  // namespace ernie
