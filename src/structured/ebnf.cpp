#include "structured/ebnf.h"

#include <algorithm>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "util/error.h"

namespace ernie::structured {
namespace {

constexpr uint32_t kMaxCodePoint = 0x10FFFF;

// One UTF-8 byte-range sequence per call of `emit`: [first, last] is split until both
// ends encode to the same length and every continuation byte below the point where they
// differ spans its whole range (the classic construction of RE2 and utf8-ranges).
template <typename Emit>
void split_utf8(uint32_t first, uint32_t last, const Emit& emit) {
  if (first > last) return;
  for (uint32_t boundary : {0x7Fu, 0x7FFu, 0xFFFFu}) {
    if (first <= boundary && boundary < last) {
      split_utf8(first, boundary, emit);
      split_utf8(boundary + 1, last, emit);
      return;
    }
  }
  if (last < 0x80) {
    emit(std::vector<std::pair<uint8_t, uint8_t>>{{static_cast<uint8_t>(first), static_cast<uint8_t>(last)}});
    return;
  }
  const int length = last <= 0x7FF ? 2 : last <= 0xFFFF ? 3 : 4;
  for (int i = 1; i < length; ++i) {
    const uint32_t mask = (1u << (6 * i)) - 1;
    if ((first & ~mask) != (last & ~mask)) {
      if ((first & mask) != 0) {
        split_utf8(first, first | mask, emit);
        split_utf8((first | mask) + 1, last, emit);
        return;
      }
      if ((last & mask) != mask) {
        split_utf8(first, (last & ~mask) - 1, emit);
        split_utf8(last & ~mask, last, emit);
        return;
      }
    }
  }
  const std::string a = utf8_encode(first), b = utf8_encode(last);
  std::vector<std::pair<uint8_t, uint8_t>> ranges;
  for (size_t k = 0; k < a.size(); ++k) ranges.push_back({static_cast<uint8_t>(a[k]), static_cast<uint8_t>(b[k])});
  emit(ranges);
}

class Parser {
 public:
  Parser(std::string_view text, const ExternalRules& external) : text_(text), external_(external) {}

  Grammar parse() {
    for (const auto& [name, build] : external_) {
      rules_[name] = build(builder_);
      defined_[rules_[name]] = true;
    }
    skip_space();
    while (pos_ < text_.size()) {
      const std::string name = identifier();
      skip_space();
      if (text_.substr(pos_, 3) != "::=") error("expected ::= after the rule name \"" + name + "\"");
      pos_ += 3;
      const int32_t rule = rule_named(name);
      if (!defined_.insert({rule, true}).second) error("rule \"" + name + "\" is defined twice");
      parse_alternatives(rule, name);
      skip_space();
    }
    for (const auto& [name, rule] : rules_)
      if (!defined_.count(rule)) fail("grammar: rule \"", name, "\" is used but never defined");
    const auto root = rules_.find("root");
    if (root == rules_.end()) fail("grammar: there is no rule named \"root\" to start from");
    return builder_.build(root->second);
  }

 private:
  [[noreturn]] void error(const std::string& message) const {
    size_t line = 1, column = 1;
    for (size_t i = 0; i < pos_ && i < text_.size(); ++i) {
      if (text_[i] == '\n') {
        ++line;
        column = 1;
      } else {
        ++column;
      }
    }
    fail("grammar: line ", line, ", column ", column, ": ", message);
  }

  void skip_space() {
    while (pos_ < text_.size()) {
      const char c = text_[pos_];
      if (c == '#') {
        while (pos_ < text_.size() && text_[pos_] != '\n') ++pos_;
      } else if (c == ' ' || c == '\t' || c == '\n' || c == '\r') {
        ++pos_;
      } else {
        return;
      }
    }
  }

  static bool name_char(char c) {
    return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9') || c == '_' || c == '-';
  }

  std::string identifier() {
    const size_t start = pos_;
    while (pos_ < text_.size() && name_char(text_[pos_])) ++pos_;
    if (start == pos_) error("expected a rule name");
    return std::string(text_.substr(start, pos_ - start));
  }

  // Whether a new rule definition (`name ::=`) starts at the current position.
  bool at_definition() const {
    size_t p = pos_;
    while (p < text_.size() && name_char(text_[p])) ++p;
    if (p == pos_) return false;
    while (p < text_.size() && (text_[p] == ' ' || text_[p] == '\t' || text_[p] == '\n' || text_[p] == '\r')) ++p;
    return text_.substr(p, 3) == "::=";
  }

  int32_t rule_named(const std::string& name) {
    const auto found = rules_.find(name);
    if (found != rules_.end()) return found->second;
    const int32_t rule = builder_.add_rule(name);
    rules_[name] = rule;
    return rule;
  }

  void parse_alternatives(int32_t rule, const std::string& name) {
    for (;;) {
      builder_.add_alternative(rule, parse_sequence(name));
      skip_space();
      if (pos_ < text_.size() && text_[pos_] == '|') {
        ++pos_;
        continue;
      }
      return;
    }
  }

  Sequence parse_sequence(const std::string& name) {
    Sequence sequence;
    for (;;) {
      skip_space();
      if (pos_ >= text_.size() || text_[pos_] == '|' || text_[pos_] == ')' || at_definition()) return sequence;
      Sequence item = parse_item(name);
      skip_space();
      item = parse_repetition(std::move(item), name);
      sequence.insert(sequence.end(), item.begin(), item.end());
    }
  }

  // One element's worth of grammar: a literal (several bytes), a class, `.`, a group or
  // a rule reference.
  Sequence parse_item(const std::string& name) {
    const char c = text_[pos_];
    if (c == '"' || c == '\'') return parse_literal(c);
    if (c == '[') return {parse_class(name)};
    if (c == '.') {
      ++pos_;
      return {class_element({{0, kMaxCodePoint}}, false, name)};  // any character
    }
    if (c == '(') {
      ++pos_;
      const int32_t group = builder_.add_rule(name + "(group)");
      parse_alternatives(group, name);
      skip_space();
      if (pos_ >= text_.size() || text_[pos_] != ')') error("expected ) to close the group");
      ++pos_;
      return {GrammarBuilder::ref(group)};
    }
    if (name_char(c)) return {GrammarBuilder::ref(rule_named(identifier()))};
    error(std::string("unexpected character '") + c + "'");
  }

  Sequence parse_repetition(Sequence item, const std::string& name) {
    if (pos_ >= text_.size()) return item;
    const char c = text_[pos_];
    if (c != '*' && c != '+' && c != '?' && c != '{') return item;
    // Repetition applies to one element: wrap a multi-byte literal in a rule first.
    Element element = item.size() == 1 ? item.front() : wrap(std::move(item), name);
    ++pos_;
    int32_t rule = -1;
    if (c == '*') {
      rule = builder_.star(element, name + "*");
    } else if (c == '+') {
      rule = builder_.plus(element, name + "+");
    } else if (c == '?') {
      rule = builder_.optional(element, name + "?");
    } else {
      const int min = number();
      int max = min;
      skip_space();
      if (pos_ < text_.size() && text_[pos_] == ',') {
        ++pos_;
        skip_space();
        max = pos_ < text_.size() && text_[pos_] == '}' ? -1 : number();
      }
      skip_space();
      if (pos_ >= text_.size() || text_[pos_] != '}') error("expected } to close the repetition");
      ++pos_;
      if (max >= 0 && max < min) error("repetition {m,n} needs m <= n");
      if (std::max(min, max) > kMaxRepetition) error("repetition counts above " + std::to_string(kMaxRepetition) + " are not supported");
      rule = builder_.repeat(element, min, max, name + "{}");
    }
    return {GrammarBuilder::ref(rule)};
  }

  int number() {
    skip_space();
    const size_t start = pos_;
    while (pos_ < text_.size() && text_[pos_] >= '0' && text_[pos_] <= '9') ++pos_;
    if (start == pos_ || pos_ - start > 6) error("expected a repetition count");
    return std::stoi(std::string(text_.substr(start, pos_ - start)));
  }

  Element wrap(Sequence sequence, const std::string& name) {
    const int32_t rule = builder_.add_rule(name);
    builder_.add_alternative(rule, std::move(sequence));
    return GrammarBuilder::ref(rule);
  }

  // One character of a literal or class, escapes resolved.
  uint32_t code_point() {
    if (pos_ >= text_.size()) error("unexpected end inside a literal or class");
    const auto lead = static_cast<uint8_t>(text_[pos_]);
    if (lead == '\\') {
      if (++pos_ >= text_.size()) error("unexpected end after \\");
      const char e = text_[pos_++];
      switch (e) {
        case 'n': return '\n';
        case 'r': return '\r';
        case 't': return '\t';
        case '\\': case '"': case '\'': case '[': case ']': case '-': case '^': return static_cast<uint8_t>(e);
        case 'x': return hex(2);
        case 'u': return hex(4);
        case 'U': return hex(8);
        default: error(std::string("unknown escape \\") + e);
      }
    }
    // A UTF-8 character as written in the grammar.
    if (const std::optional<uint32_t> value = read_utf8(text_, pos_)) return *value;
    error("invalid UTF-8 in the grammar");
  }

  uint32_t hex(int digits) {
    if (const std::optional<uint32_t> value = read_hex_code_point(text_, pos_, digits)) return *value;
    error("a \\x, \\u or \\U escape needs that many hex digits, up to U+10FFFF");
  }

  Sequence parse_literal(char quote) {
    ++pos_;
    Sequence sequence;
    while (pos_ < text_.size() && text_[pos_] != quote) {
      const std::string bytes = utf8_encode(code_point());
      const Sequence part = GrammarBuilder::literal(bytes);
      sequence.insert(sequence.end(), part.begin(), part.end());
    }
    if (pos_ >= text_.size()) error("unterminated string literal");
    ++pos_;
    if (sequence.empty()) {
      // "" matches nothing: an empty rule keeps the sequence well formed.
      const int32_t rule = builder_.add_rule("\"\"");
      builder_.add_alternative(rule, {});
      sequence.push_back(GrammarBuilder::ref(rule));
    }
    return sequence;
  }

  Element parse_class(const std::string& name) {
    ++pos_;
    const bool negated = pos_ < text_.size() && text_[pos_] == '^';
    if (negated) ++pos_;
    std::vector<std::pair<uint32_t, uint32_t>> ranges;
    while (pos_ < text_.size() && text_[pos_] != ']') {
      const uint32_t first = code_point();
      uint32_t last = first;
      if (pos_ + 1 < text_.size() && text_[pos_] == '-' && text_[pos_ + 1] != ']') {
        ++pos_;
        last = code_point();
        if (last < first) error("class range out of order");
      }
      ranges.push_back({first, last});
    }
    if (pos_ >= text_.size()) error("unterminated character class");
    ++pos_;
    return class_element(std::move(ranges), negated, name);
  }

  Element class_element(std::vector<std::pair<uint32_t, uint32_t>> ranges, bool negated, const std::string& name) {
    const CodePointRanges set = code_point_ranges(std::move(ranges), negated);
    if (set.empty()) error("a character class that matches nothing");
    return code_point_class(builder_, set, name);
  }

  static constexpr int kMaxRepetition = 10000;

  std::string_view text_;
  const ExternalRules& external_;
  size_t pos_ = 0;
  GrammarBuilder builder_;
  std::map<std::string, int32_t> rules_;
  std::map<int32_t, bool> defined_;
};

}  // namespace

std::string utf8_encode(uint32_t c) {
  std::string out;
  if (c < 0x80) {
    out += static_cast<char>(c);
  } else if (c < 0x800) {
    out += static_cast<char>(0xC0 | (c >> 6));
    out += static_cast<char>(0x80 | (c & 0x3F));
  } else if (c < 0x10000) {
    out += static_cast<char>(0xE0 | (c >> 12));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (c & 0x3F));
  } else {
    out += static_cast<char>(0xF0 | (c >> 18));
    out += static_cast<char>(0x80 | ((c >> 12) & 0x3F));
    out += static_cast<char>(0x80 | ((c >> 6) & 0x3F));
    out += static_cast<char>(0x80 | (c & 0x3F));
  }
  return out;
}

CodePointRanges code_point_ranges(CodePointRanges ranges, bool negated) {
  std::sort(ranges.begin(), ranges.end());
  CodePointRanges merged;
  for (const auto& range : ranges) {
    if (!merged.empty() && range.first <= merged.back().second + 1)
      merged.back().second = std::max(merged.back().second, range.second);
    else
      merged.push_back(range);
  }
  if (!negated) return merged;
  CodePointRanges complement;
  uint32_t next = 0;
  for (const auto& [first, last] : merged) {
    if (first > next) complement.push_back({next, first - 1});
    next = last + 1;
  }
  if (next <= kMaxCodePoint) complement.push_back({next, kMaxCodePoint});
  return complement;
}

Element code_point_class(GrammarBuilder& builder, const CodePointRanges& ranges, const std::string& name) {
  if (!ranges.empty() && ranges.back().second < 0x80) {
    ByteSet set;
    for (const auto& [first, last] : ranges) set.add_range(static_cast<uint8_t>(first), static_cast<uint8_t>(last));
    return GrammarBuilder::bytes(set);
  }
  const int32_t rule = builder.add_rule(name + "[class]");
  for (const auto& [first, last] : ranges) add_code_point_range(builder, rule, first, last);
  return GrammarBuilder::ref(rule);
}

std::optional<uint32_t> read_utf8(std::string_view text, size_t& pos) {
  if (pos >= text.size()) return std::nullopt;
  const auto lead = static_cast<uint8_t>(text[pos]);
  const int length = lead < 0x80 ? 1 : lead >= 0xF8 ? 0 : lead >= 0xF0 ? 4 : lead >= 0xE0 ? 3 : lead >= 0xC0 ? 2 : 0;
  if (length == 0 || pos + static_cast<size_t>(length) > text.size()) return std::nullopt;
  uint32_t value = length == 1 ? lead : lead & (0x7F >> length);
  for (int i = 1; i < length; ++i) {
    const auto next = static_cast<uint8_t>(text[pos + static_cast<size_t>(i)]);
    if ((next & 0xC0) != 0x80) return std::nullopt;
    value = (value << 6) | (next & 0x3F);
  }
  pos += static_cast<size_t>(length);
  return value;
}

std::optional<uint32_t> read_hex_code_point(std::string_view text, size_t& pos, int digits) {
  if (pos + static_cast<size_t>(digits) > text.size()) return std::nullopt;
  uint32_t value = 0;
  for (int i = 0; i < digits; ++i) {
    const char h = text[pos + static_cast<size_t>(i)];
    const int digit = h >= '0' && h <= '9' ? h - '0' : h >= 'a' && h <= 'f' ? h - 'a' + 10 : h >= 'A' && h <= 'F' ? h - 'A' + 10 : -1;
    if (digit < 0) return std::nullopt;
    value = value * 16 + static_cast<uint32_t>(digit);
  }
  if (value > kMaxCodePoint) return std::nullopt;
  pos += static_cast<size_t>(digits);
  return value;
}

void add_code_point_range(GrammarBuilder& builder, int32_t rule, uint32_t first, uint32_t last) {
  const auto emit = [&](const std::vector<std::pair<uint8_t, uint8_t>>& ranges) {
    Sequence sequence;
    for (const auto& [lo, hi] : ranges) sequence.push_back(GrammarBuilder::bytes(ByteSet::range(lo, hi)));
    builder.add_alternative(rule, std::move(sequence));
  };
  // Surrogates have no UTF-8 encoding.
  if (first < 0xD800 && last >= 0xD800) {
    split_utf8(first, std::min(last, 0xD7FFu), emit);
    if (last > 0xDFFF) split_utf8(0xE000, last, emit);
    return;
  }
  if (first >= 0xD800 && first <= 0xDFFF) first = 0xE000;
  split_utf8(first, last, emit);
}

Grammar parse_ebnf(std::string_view text, const ExternalRules& external) { return Parser(text, external).parse(); }

}  // namespace ernie::structured
