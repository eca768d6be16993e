#include "structured/regex.h"

#include <algorithm>
#include <string>
#include <vector>

#include "structured/ebnf.h"
#include "util/error.h"

namespace ernie::structured {
namespace {

constexpr int kMaxRepetition = 10000;

const CodePointRanges kDigits = {{'0', '9'}};
const CodePointRanges kWord = {{'0', '9'}, {'A', 'Z'}, {'_', '_'}, {'a', 'z'}};
const CodePointRanges kSpace = {{'\t', '\r'}, {' ', ' '}};

class RegexParser {
 public:
  RegexParser(GrammarBuilder& builder, std::string_view pattern, std::string name, bool json_string)
      : builder_(builder), pattern_(pattern), name_(std::move(name)), json_string_(json_string) {}

  int32_t parse() {
    if (pos_ < pattern_.size() && pattern_[pos_] == '^') ++pos_;
    const int32_t rule = builder_.add_rule(name_);
    parse_alternatives(rule);
    if (pos_ < pattern_.size()) error(pattern_[pos_] == ')' ? "unbalanced )" : "unexpected character");
    return rule;
  }

 private:
  [[noreturn]] void error(const std::string& message) const {
    fail("regex \"", std::string(pattern_), "\", position ", pos_, ": ", message);
  }
  bool at(char c) const { return pos_ < pattern_.size() && pattern_[pos_] == c; }

  void parse_alternatives(int32_t rule) {
    for (;;) {
      builder_.add_alternative(rule, parse_sequence());
      if (!at('|')) return;
      ++pos_;
    }
  }

  Sequence parse_sequence() {
    Sequence sequence;
    while (pos_ < pattern_.size() && !at('|') && !at(')')) {
      if (at('$')) {
        ++pos_;
        if (pos_ != pattern_.size() && !at(')') && !at('|')) error("$ is supported only at the end");
        continue;
      }
      if (at('^')) error("^ is supported only at the start");
      Element element = parse_atom();
      element = parse_quantifier(element);
      sequence.push_back(element);
    }
    return sequence;
  }

  Element parse_atom() {
    const char c = pattern_[pos_];
    if (c == '(') return parse_group();
    if (c == '[') return parse_class();
    if (c == '.') {
      ++pos_;
      return chars(code_point_ranges({{'\n', '\n'}}, true));
    }
    if (c == '\\') return parse_escape_atom();
    if (c == '*' || c == '+' || c == '?' || c == '{') error("a quantifier with nothing to repeat");
    return single(read_code_point());
  }

  Element single(uint32_t code_point) { return chars({{code_point, code_point}}); }

  Element parse_group() {
    ++pos_;
    if (at('?')) {
      ++pos_;
      if (at(':')) {
        ++pos_;
      } else if (at('P') && pos_ + 1 < pattern_.size() && pattern_[pos_ + 1] == '<') {
        pos_ += 2;
        skip_group_name();
      } else if (at('<') && pos_ + 1 < pattern_.size() && pattern_[pos_ + 1] != '=' && pattern_[pos_ + 1] != '!') {
        ++pos_;
        skip_group_name();
      } else if (at('=') || at('!') || at('<')) {
        error("lookaround assertions are not supported");
      } else {
        error("inline flags and other (? groups are not supported");
      }
    }
    const int32_t group = builder_.add_rule(name_ + "(group)");
    parse_alternatives(group);
    if (!at(')')) error("missing ) to close a group");
    ++pos_;
    return GrammarBuilder::ref(group);
  }

  void skip_group_name() {
    while (pos_ < pattern_.size() && pattern_[pos_] != '>') ++pos_;
    if (!at('>')) error("unterminated group name");
    ++pos_;
  }

  Element parse_quantifier(const Element& element) {
    if (pos_ >= pattern_.size()) return element;
    const char c = pattern_[pos_];
    int min = 0, max = -1;
    if (c == '*') {
      ++pos_;
    } else if (c == '+') {
      ++pos_;
      min = 1;
    } else if (c == '?') {
      ++pos_;
      max = 1;
    } else if (c == '{' && counted_repetition(min, max)) {
      // parsed
    } else {
      return element;
    }
    if (at('?')) ++pos_;  // lazy: the same strings
    if (at('+')) error("possessive quantifiers are not supported");
    if (min == 0 && max == -1) return GrammarBuilder::ref(builder_.star(element, name_ + "*"));
    if (min == 1 && max == -1) return GrammarBuilder::ref(builder_.plus(element, name_ + "+"));
    if (min == 0 && max == 1) return GrammarBuilder::ref(builder_.optional(element, name_ + "?"));
    return GrammarBuilder::ref(builder_.repeat(element, min, max, name_ + "{}"));
  }

  // {m}, {m,}, {m,n} and Python's {,n}; anything else after { is a literal brace, as in
  // Python.
  bool counted_repetition(int& min, int& max) {
    size_t p = pos_ + 1;
    const auto digits = [&](int& value) {
      const size_t start = p;
      while (p < pattern_.size() && pattern_[p] >= '0' && pattern_[p] <= '9') ++p;
      if (p == start || p - start > 6) return false;
      value = std::stoi(std::string(pattern_.substr(start, p - start)));
      return true;
    };
    const bool open_start = p < pattern_.size() && pattern_[p] == ',';
    if (open_start) {
      min = 0;
    } else if (!digits(min)) {
      return false;
    }
    max = min;
    if (p < pattern_.size() && pattern_[p] == ',') {
      ++p;
      max = -1;
      if (p < pattern_.size() && pattern_[p] != '}' && !digits(max)) return false;
      if (open_start && max < 0) return false;  // "{,}" is literal text
    }
    if (p >= pattern_.size() || pattern_[p] != '}') return false;
    pos_ = p + 1;
    if (max >= 0 && max < min) error("repetition {m,n} needs m <= n");
    if (std::max(min, max) > kMaxRepetition) error("repetition counts above 10000 are not supported");
    return true;
  }

  Element parse_escape_atom() {
    CodePointRanges ranges;
    bool negated = false;
    if (class_escape(ranges, negated)) return chars(code_point_ranges(ranges, negated));
    return single(escaped_code_point());
  }

  // \d \w \s and their negations; true when the escape at pos_ is one.
  bool class_escape(CodePointRanges& ranges, bool& negated) {
    if (pos_ + 1 >= pattern_.size()) return false;
    const char e = pattern_[pos_ + 1];
    const CodePointRanges* set = e == 'd' || e == 'D' ? &kDigits : e == 'w' || e == 'W' ? &kWord
                                 : e == 's' || e == 'S'                                 ? &kSpace
                                                                                        : nullptr;
    if (set == nullptr) return false;
    pos_ += 2;
    ranges.insert(ranges.end(), set->begin(), set->end());
    negated = e == 'D' || e == 'W' || e == 'S';
    return true;
  }

  uint32_t escaped_code_point() {
    ++pos_;  // the backslash
    if (pos_ >= pattern_.size()) error("a trailing backslash");
    const char e = pattern_[pos_++];
    switch (e) {
      case 'n': return '\n';
      case 'r': return '\r';
      case 't': return '\t';
      case 'f': return '\f';
      case 'v': return '\v';
      case '0': return 0;
      case 'x': return hex(2);
      case 'u': return hex(4);
      case 'U': return hex(8);
      case 'b': case 'B': error("word boundaries (\\b, \\B) are not supported");
      case 'A': case 'Z': case 'z': case 'G': error("anchors other than ^ and $ are not supported");
      default: break;
    }
    if (e >= '1' && e <= '9') error("backreferences are not supported");
    if ((e >= 'a' && e <= 'z') || (e >= 'A' && e <= 'Z')) error(std::string("unknown escape \\") + e);
    --pos_;
    return read_code_point();  // escaped punctuation or a UTF-8 character stands for itself
  }

  uint32_t hex(int digits) {
    if (const std::optional<uint32_t> value = read_hex_code_point(pattern_, pos_, digits)) return *value;
    error("an escape needs that many hex digits, up to U+10FFFF");
  }

  uint32_t read_code_point() {
    if (const std::optional<uint32_t> value = read_utf8(pattern_, pos_)) return *value;
    error("invalid UTF-8");
  }

  Element parse_class() {
    ++pos_;
    bool negated = false;
    if (at('^')) {
      negated = true;
      ++pos_;
    }
    CodePointRanges ranges;
    bool first_item = true;
    while (pos_ < pattern_.size() && (!at(']') || first_item)) {
      first_item = false;
      CodePointRanges escaped;
      bool escaped_negated = false;
      if (at('\\') && class_escape(escaped, escaped_negated)) {
        const CodePointRanges set = code_point_ranges(escaped, escaped_negated);
        ranges.insert(ranges.end(), set.begin(), set.end());
        continue;
      }
      if (at('[') && pos_ + 1 < pattern_.size() && pattern_[pos_ + 1] == ':') error("POSIX classes are not supported");
      const uint32_t first = at('\\') ? escaped_code_point() : read_code_point();
      uint32_t last = first;
      if (at('-') && pos_ + 1 < pattern_.size() && pattern_[pos_ + 1] != ']') {
        ++pos_;
        last = at('\\') ? escaped_code_point() : read_code_point();
        if (last < first) error("class range out of order");
      }
      ranges.push_back({first, last});
    }
    if (!at(']')) error("missing ] to close a class");
    ++pos_;
    const CodePointRanges set = code_point_ranges(ranges, negated);
    if (set.empty()) error("a class that matches nothing");
    return chars(set);
  }

  // One character of `set`, as written in the output: itself, or inside a JSON string
  // the JSON escape of `"`, `\` and control characters.
  Element chars(const CodePointRanges& set) {
    if (!json_string_) return code_point_class(builder_, set, name_);
    static const CodePointRanges specials = {{0, 0x1F}, {'"', '"'}, {'\\', '\\'}};
    static const CodePointRanges others = code_point_ranges(specials, true);
    const CodePointRanges plain = intersection(set, others), escaped = intersection(set, specials);
    if (escaped.empty()) return code_point_class(builder_, plain, name_);
    const int32_t rule = builder_.add_rule(name_ + "[json]");
    for (const auto& [first, last] : plain) add_code_point_range(builder_, rule, first, last);
    for (const auto& [first, last] : escaped)
      for (uint32_t c = first; c <= last; ++c) builder_.add_alternative(rule, GrammarBuilder::literal(json_escape(c)));
    return GrammarBuilder::ref(rule);
  }

  // The code points in both sets.
  static CodePointRanges intersection(const CodePointRanges& a, const CodePointRanges& b) {
    CodePointRanges out;
    for (const auto& [first, last] : a)
      for (const auto& [lo, hi] : b)
        if (std::max(first, lo) <= std::min(last, hi)) out.push_back({std::max(first, lo), std::min(last, hi)});
    return out;
  }

  static std::string json_escape(uint32_t c) {
    switch (c) {
      case '"': return "\\\"";
      case '\\': return "\\\\";
      case '\n': return "\\n";
      case '\r': return "\\r";
      case '\t': return "\\t";
      case '\b': return "\\b";
      case '\f': return "\\f";
      default: break;
    }
    static const char* kHex = "0123456789abcdef";
    return std::string("\\u00") + kHex[c >> 4] + kHex[c & 15];
  }

  GrammarBuilder& builder_;
  std::string_view pattern_;
  std::string name_;
  bool json_string_;
  size_t pos_ = 0;
};

}  // namespace

int32_t add_regex_rule(GrammarBuilder& builder, std::string_view pattern, const std::string& name, bool json_string) {
  return RegexParser(builder, pattern, name, json_string).parse();
}

Grammar compile_regex(std::string_view pattern) {
  GrammarBuilder builder;
  const int32_t root = add_regex_rule(builder, pattern, "regex");
  return builder.build(root);
}

}  // namespace ernie::structured
