#include "text/jinja/lexer.h"

#include <algorithm>
#include <charconv>
#include <limits>

#include "text/jinja/pystr.h"
#include "util/error.h"

namespace ernie::jinja {

std::string located(int line, int column, std::string_view message) {
  return str_cat("line ", line, ", column ", column, ": ", message);
}

namespace {

// The code point starting at `pos` and its length in bytes (invalid bytes: U+FFFD, 1).
char32_t code_point_at(std::string_view s, size_t pos, size_t& len) {
  const auto b = static_cast<unsigned char>(s[pos]);
  len = 1;
  if (b < 0x80) return b;
  const size_t want = (b & 0xE0) == 0xC0 ? 2 : (b & 0xF0) == 0xE0 ? 3 : (b & 0xF8) == 0xF0 ? 4 : 0;
  if (want == 0 || pos + want > s.size()) return 0xFFFD;
  const std::u32string one = pystr::decode(s.substr(pos, want));
  if (one.size() != 1) return 0xFFFD;
  len = want;
  return one[0];
}

// Byte length of the Python-whitespace code point at `pos`, or 0.
size_t space_at(std::string_view s, size_t pos) {
  if (pos >= s.size()) return 0;
  size_t len = 0;
  const char32_t cp = code_point_at(s, pos, len);
  return pystr::is_space(cp) ? len : 0;
}

size_t skip_spaces(std::string_view s, size_t pos) {
  while (size_t len = space_at(s, pos)) pos += len;
  return pos;
}

// str.rstrip(): the length of `s` without its trailing whitespace.
size_t rstrip_length(std::string_view s) {
  size_t end = s.size();
  while (end > 0) {
    size_t start = end - 1;
    while (start > 0 && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80 && end - start < 4) --start;
    size_t len = 0;
    const char32_t cp = code_point_at(s, start, len);
    if (start + len != end || !pystr::is_space(cp)) break;
    end = start;
  }
  return end;
}

bool all_spaces(std::string_view s) {
  if (s.empty()) return false;  // jinja2 tests \s+, which needs at least one character
  return skip_spaces(s, 0) == s.size();
}

bool is_ascii_digit(char c) { return c >= '0' && c <= '9'; }

// (\d+_)*\d+ at `pos`: the end of the match, or npos.
size_t match_digits(std::string_view s, size_t pos) {
  if (pos >= s.size() || !is_ascii_digit(s[pos])) return std::string_view::npos;
  while (pos < s.size() && is_ascii_digit(s[pos])) ++pos;
  while (pos + 1 < s.size() && s[pos] == '_' && is_ascii_digit(s[pos + 1])) {
    ++pos;
    while (pos < s.size() && is_ascii_digit(s[pos])) ++pos;
  }
  return pos;
}

// e[+-]?(\d+_)*\d+ at `pos`.
size_t match_exponent(std::string_view s, size_t pos) {
  if (pos >= s.size() || (s[pos] != 'e' && s[pos] != 'E')) return std::string_view::npos;
  ++pos;
  if (pos < s.size() && (s[pos] == '+' || s[pos] == '-')) ++pos;
  return match_digits(s, pos);
}

// jinja2's float_re: digits with a fraction and/or an exponent.
size_t match_float(std::string_view s, size_t pos) {
  if (pos > 0 && s[pos - 1] == '.') return std::string_view::npos;
  const size_t int_end = match_digits(s, pos);
  if (int_end == std::string_view::npos) return int_end;
  if (int_end < s.size() && s[int_end] == '.') {
    const size_t frac_end = match_digits(s, int_end + 1);
    if (frac_end != std::string_view::npos) {
      const size_t exp_end = match_exponent(s, frac_end);
      return exp_end != std::string_view::npos ? exp_end : frac_end;
    }
  }
  return match_exponent(s, int_end);
}

bool in_base(char c, int base) {
  if (base == 2) return c == '0' || c == '1';
  if (base == 8) return c >= '0' && c <= '7';
  if (base == 10) return is_ascii_digit(c);
  return is_ascii_digit(c) || (c >= 'a' && c <= 'f') || (c >= 'A' && c <= 'F');
}

// (_?D)+ for digit class D, at `pos`.
size_t match_based_digits(std::string_view s, size_t pos, int base) {
  size_t end = std::string_view::npos;
  while (true) {
    size_t p = pos;
    if (p < s.size() && s[p] == '_') ++p;
    if (p < s.size() && in_base(s[p], base)) {
      pos = end = p + 1;
    } else {
      return end;
    }
  }
}

// jinja2's integer_re: 0b.., 0o.., 0x.., decimal, or zeros.
size_t match_integer(std::string_view s, size_t pos, int& base) {
  if (pos >= s.size() || !is_ascii_digit(s[pos])) return std::string_view::npos;
  if (s[pos] == '0' && pos + 1 < s.size()) {
    const char p = static_cast<char>(s[pos + 1] | 0x20);
    const int prefixed = p == 'b' ? 2 : p == 'o' ? 8 : p == 'x' ? 16 : 0;
    if (prefixed != 0) {
      const size_t end = match_based_digits(s, pos + 2, prefixed);
      if (end != std::string_view::npos) {
        base = prefixed;
        return end;
      }
    }
  }
  base = 10;
  if (s[pos] != '0') {
    const size_t end = match_based_digits(s, pos + 1, 10);
    return end == std::string_view::npos ? pos + 1 : end;
  }
  size_t end = pos + 1;
  while (true) {
    size_t p = end;
    if (p < s.size() && s[p] == '_') ++p;
    if (p < s.size() && s[p] == '0') {
      end = p + 1;
    } else {
      return end;
    }
  }
}

bool is_name_start(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || c == '_' || static_cast<unsigned char>(c) >= 0x80;
}

bool is_name_char(char c) { return is_name_start(c) || is_ascii_digit(c); }

constexpr std::string_view kTwoCharOperators[] = {"//", "**", "==", "!=", ">=", "<="};
constexpr std::string_view kOneCharOperators = "+-/*%~[](){}><=.:|,;";

class Lexer {
 public:
  explicit Lexer(std::string_view source) : src_(normalize(source)) {
    line_starts_.push_back(0);
    for (size_t i = 0; i < src_.size(); ++i) {
      if (src_[i] == '\n') line_starts_.push_back(i + 1);
    }
  }

  std::vector<Token> run() {
    size_t pos = 0;
    bool line_starting = true;
    while (pos < src_.size()) {
      const size_t tag = find_tag(pos);
      if (tag == std::string_view::npos) {
        emit_data(pos, src_.substr(pos));
        break;
      }
      const char kind = src_[tag + 1];  // '%', '{' or '#'
      const char sign = tag + 2 < src_.size() && (src_[tag + 2] == '-' || src_[tag + 2] == '+') ? src_[tag + 2] : 0;
      size_t raw_body = 0;
      const bool raw = kind == '%' && match_raw_begin(tag, raw_body);
      emit_data(pos, strip_before_tag(src_.substr(pos, tag - pos), sign, kind != '{', line_starting));
      line_starting = false;
      const size_t after_sign = tag + 2 + (sign ? 1 : 0);
      if (raw) {
        line_starting = raw_body > 0 && src_[raw_body - 1] == '\n';
        pos = lex_raw(tag, raw_body, line_starting);
      } else if (kind == '#') {
        pos = skip_comment(tag, after_sign, line_starting);
      } else {
        pos = lex_tag(tag, after_sign, kind == '%', line_starting);
      }
    }
    Token eof;
    eof.type = TokenType::Eof;
    position(src_.size(), eof.line, eof.column);
    tokens_.push_back(eof);
    return std::move(tokens_);
  }

 private:
  // Newlines become \n and one trailing newline goes, as jinja2's tokeniter does
  // (keep_trailing_newline=False).
  static std::string normalize(std::string_view source) {
    std::string out;
    out.reserve(source.size());
    for (size_t i = 0; i < source.size(); ++i) {
      if (source[i] == '\r') {
        out.push_back('\n');
        if (i + 1 < source.size() && source[i + 1] == '\n') ++i;
      } else {
        out.push_back(source[i]);
      }
    }
    if (!out.empty() && out.back() == '\n') out.pop_back();
    return out;
  }

  // Tokens are positioned in source order, so counting resumes where the previous
  // position left off on the same line: from the line start, a template written on
  // one long line would take quadratic time.
  void position(size_t offset, int& line, int& column) const {
    const auto it = std::upper_bound(line_starts_.begin(), line_starts_.end(), offset);
    const auto index = static_cast<size_t>(it - line_starts_.begin()) - 1;
    line = static_cast<int>(index) + 1;
    size_t from = line_starts_[index];
    column = 1;
    if (last_offset_ >= from && last_offset_ <= offset) {
      from = last_offset_;
      column = last_column_;
    }
    for (size_t i = from; i < offset; ++i) {
      if ((static_cast<unsigned char>(src_[i]) & 0xC0) != 0x80) ++column;  // count code points
    }
    last_offset_ = offset;
    last_column_ = column;
  }

  [[noreturn]] void error_at(size_t offset, std::string_view message) const {
    int line = 0;
    int column = 0;
    position(offset, line, column);
    throw Error(located(line, column, message));
  }

  Token make(TokenType type, size_t offset) const {
    Token t;
    t.type = type;
    position(offset, t.line, t.column);
    return t;
  }

  void emit_data(size_t offset, std::string_view text) {
    if (text.empty()) return;
    Token t = make(TokenType::Data, offset);
    t.text = std::string(text);
    tokens_.push_back(std::move(t));
  }

  size_t find_tag(size_t pos) const {
    while (true) {
      const size_t brace = src_.find('{', pos);
      if (brace == std::string::npos || brace + 1 >= src_.size()) return std::string::npos;
      const char next = src_[brace + 1];
      if (next == '%' || next == '{' || next == '#') return brace;
      pos = brace + 1;
    }
  }

  // `-` strips all whitespace before the tag; otherwise lstrip_blocks drops the
  // indentation of a block or comment tag that starts its line.
  static std::string_view strip_before_tag(std::string_view text, char sign, bool lstrip, bool line_starting) {
    if (sign == '-') return text.substr(0, rstrip_length(text));
    if (sign == '+' || !lstrip) return text;
    const size_t newline = text.rfind('\n');
    const size_t line_start = newline == std::string_view::npos ? 0 : newline + 1;
    if ((line_start > 0 || line_starting) && all_spaces(text.substr(line_start))) return text.substr(0, line_start);
    return text;
  }

  // {%[-+]?\s*raw\s*(-%}\s*|%}) at `tag`; sets `body` to where the raw text starts.
  bool match_raw_begin(size_t tag, size_t& body) const {
    size_t p = tag + 2;
    if (p < src_.size() && (src_[p] == '-' || src_[p] == '+')) ++p;
    p = skip_spaces(src_, p);
    if (src_.compare(p, 3, "raw") != 0) return false;
    p = skip_spaces(src_, p + 3);
    if (src_.compare(p, 3, "-%}") == 0) {
      body = skip_spaces(src_, p + 3);
      return true;
    }
    if (src_.compare(p, 2, "%}") == 0) {
      body = p + 2;  // no trim_blocks after a raw opening tag, as in jinja2
      return true;
    }
    return false;
  }

  // Finds {%[-+]?\s*endraw\s*(+%}|-%}\s*|%}\n?) and emits the text before it.
  size_t lex_raw(size_t tag, size_t body, bool& line_starting) {
    size_t search = body;
    while (true) {
      const size_t open = src_.find("{%", search);
      if (open == std::string::npos) error_at(tag, "missing end of raw directive: expected {% endraw %}");
      size_t p = open + 2;
      const char sign = p < src_.size() && (src_[p] == '-' || src_[p] == '+') ? src_[p] : 0;
      if (sign) ++p;
      p = skip_spaces(src_, p);
      if (src_.compare(p, 6, "endraw") == 0) {
        p = skip_spaces(src_, p + 6);
        size_t end = std::string::npos;
        if (src_.compare(p, 3, "+%}") == 0) {
          end = p + 3;
        } else if (src_.compare(p, 3, "-%}") == 0) {
          end = skip_spaces(src_, p + 3);
        } else if (src_.compare(p, 2, "%}") == 0) {
          end = p + 2;
          if (end < src_.size() && src_[end] == '\n') ++end;
        }
        if (end != std::string::npos) {
          emit_data(body, strip_before_tag(std::string_view(src_).substr(body, open - body), sign, true, line_starting));
          line_starting = src_[end - 1] == '\n';
          return end;
        }
      }
      search = open + 2;
    }
  }

  size_t skip_comment(size_t tag, size_t pos, bool& line_starting) {
    const size_t close = src_.find("#}", pos);
    if (close == std::string::npos) error_at(tag, "missing end of comment tag: expected #}");
    // The first "#}" ends the comment; a '-' or '+' right before it is its sign.
    size_t end = close + 2;
    if (close > pos && src_[close - 1] == '-') {
      end = skip_spaces(src_, end);
    } else if (close > pos && src_[close - 1] == '+') {
      // no trim_blocks
    } else if (end < src_.size() && src_[end] == '\n') {
      ++end;
    }
    line_starting = src_[end - 1] == '\n';
    return end;
  }

  // Tokens inside {% %} or {{ }}, up to and including the closing tag.
  size_t lex_tag(size_t tag, size_t pos, bool block, bool& line_starting) {
    tokens_.push_back(make(block ? TokenType::BlockBegin : TokenType::VariableBegin, tag));
    std::string brackets;  // closing brackets still expected
    while (true) {
      if (pos >= src_.size()) {
        error_at(tag, block ? "unexpected end of template: this '{%' tag is never closed by '%}'"
                            : "unexpected end of template: this '{{' is never closed by '}}'");
      }
      if (brackets.empty()) {
        size_t end = std::string::npos;
        if (block) {
          if (src_.compare(pos, 3, "+%}") == 0) {
            end = pos + 3;
          } else if (src_.compare(pos, 3, "-%}") == 0) {
            end = skip_spaces(src_, pos + 3);
          } else if (src_.compare(pos, 2, "%}") == 0) {
            end = pos + 2;
            if (end < src_.size() && src_[end] == '\n') ++end;  // trim_blocks
          }
        } else {
          if (src_.compare(pos, 3, "-}}") == 0) {
            end = skip_spaces(src_, pos + 3);
          } else if (src_.compare(pos, 2, "}}") == 0) {
            end = pos + 2;
          }
        }
        if (end != std::string::npos) {
          tokens_.push_back(make(block ? TokenType::BlockEnd : TokenType::VariableEnd, pos));
          line_starting = src_[end - 1] == '\n';
          return end;
        }
      }
      if (const size_t space = space_at(src_, pos)) {
        pos = skip_spaces(src_, pos + space);
        continue;
      }
      pos = lex_token(pos, brackets);
    }
  }

  size_t lex_token(size_t pos, std::string& brackets) {
    const char c = src_[pos];
    if (const size_t end = match_float(src_, pos); end != std::string_view::npos) {
      Token t = make(TokenType::Float, pos);
      std::string text;
      for (size_t i = pos; i < end; ++i) {
        if (src_[i] != '_') text.push_back(src_[i]);
      }
      std::from_chars(text.data(), text.data() + text.size(), t.float_value);
      tokens_.push_back(std::move(t));
      return end;
    }
    int base = 10;
    if (const size_t end = match_integer(src_, pos, base); end != std::string_view::npos) {
      Token t = make(TokenType::Integer, pos);
      const size_t digits_start = base == 10 ? pos : pos + 2;
      int64_t value = 0;
      for (size_t i = digits_start; i < end; ++i) {
        const char d = src_[i];
        if (d == '_') continue;
        const int digit = is_ascii_digit(d) ? d - '0' : (d | 0x20) - 'a' + 10;
        if (value > (std::numeric_limits<int64_t>::max() - digit) / base) {
          error_at(pos, "integer literal too large: this engine's integers are 64-bit");
        }
        value = value * base + digit;
      }
      t.int_value = value;
      tokens_.push_back(std::move(t));
      return end;
    }
    if (is_name_start(c)) {
      size_t end = pos;
      while (end < src_.size() && is_name_char(src_[end])) ++end;
      Token t = make(TokenType::Name, pos);
      t.text = src_.substr(pos, end - pos);
      tokens_.push_back(std::move(t));
      return end;
    }
    if (c == '\'' || c == '"') return lex_string(pos);
    for (std::string_view op : kTwoCharOperators) {
      if (src_.compare(pos, 2, op) == 0) {
        Token t = make(TokenType::Operator, pos);
        t.text = std::string(op);
        tokens_.push_back(std::move(t));
        return pos + 2;
      }
    }
    if (kOneCharOperators.find(c) != std::string_view::npos) {
      if (c == '(' || c == '[' || c == '{') {
        brackets.push_back(c == '(' ? ')' : c == '[' ? ']' : '}');
      } else if (c == ')' || c == ']' || c == '}') {
        if (brackets.empty()) error_at(pos, str_cat("unexpected '", c, "'"));
        if (brackets.back() != c) error_at(pos, str_cat("unexpected '", c, "', expected '", brackets.back(), "'"));
        brackets.pop_back();
      }
      Token t = make(TokenType::Operator, pos);
      t.text = std::string(1, c);
      tokens_.push_back(std::move(t));
      return pos + 1;
    }
    size_t len = 0;
    const char32_t cp = code_point_at(src_, pos, len);
    std::string shown;
    pystr::append_utf8(shown, cp);
    error_at(pos, str_cat("unexpected character '", shown, "' inside a tag"));
  }

  size_t lex_string(size_t pos) {
    const char quote = src_[pos];
    size_t p = pos + 1;
    while (p < src_.size() && src_[p] != quote) {
      p += src_[p] == '\\' ? 2 : 1;
    }
    if (p >= src_.size()) error_at(pos, str_cat("unterminated string literal: expected a closing ", quote));
    Token t = make(TokenType::String, pos);
    t.text = unescape(std::string_view(src_).substr(pos + 1, p - pos - 1), pos);
    tokens_.push_back(std::move(t));
    return p + 1;
  }

  // Python's "unicode-escape" decoding, which jinja2 applies to string literals.
  std::string unescape(std::string_view s, size_t offset) const {
    std::string out;
    out.reserve(s.size());
    auto hex_value = [&](size_t at, size_t digits, const char* what) {
      if (at + digits > s.size()) error_at(offset, str_cat("truncated \\", what, " escape in a string literal"));
      uint32_t v = 0;
      for (size_t k = 0; k < digits; ++k) {
        const char d = s[at + k];
        if (!in_base(d, 16)) error_at(offset, str_cat("truncated \\", what, " escape in a string literal"));
        v = v * 16 + static_cast<uint32_t>(is_ascii_digit(d) ? d - '0' : (d | 0x20) - 'a' + 10);
      }
      return v;
    };
    for (size_t i = 0; i < s.size(); ++i) {
      if (s[i] != '\\' || i + 1 >= s.size()) {
        out.push_back(s[i]);
        continue;
      }
      const char e = s[++i];
      switch (e) {
        case '\\': out.push_back('\\'); break;
        case '\'': out.push_back('\''); break;
        case '"': out.push_back('"'); break;
        case 'a': out.push_back('\a'); break;
        case 'b': out.push_back('\b'); break;
        case 'f': out.push_back('\f'); break;
        case 'n': out.push_back('\n'); break;
        case 'r': out.push_back('\r'); break;
        case 't': out.push_back('\t'); break;
        case 'v': out.push_back('\v'); break;
        case '\n': break;  // line continuation
        case 'x':
          pystr::append_utf8(out, hex_value(i + 1, 2, "xXX"));
          i += 2;
          break;
        case 'u':
          pystr::append_utf8(out, hex_value(i + 1, 4, "uXXXX"));
          i += 4;
          break;
        case 'U': {
          const uint32_t v = hex_value(i + 1, 8, "UXXXXXXXX");
          if (v > 0x10FFFF) error_at(offset, "illegal Unicode character in a \\U escape");
          pystr::append_utf8(out, v);
          i += 8;
          break;
        }
        case 'N': error_at(offset, "\\N{...} escapes are not supported; write the character itself");
        default:
          if (e >= '0' && e <= '7') {
            uint32_t v = static_cast<uint32_t>(e - '0');
            for (int k = 0; k < 2 && i + 1 < s.size() && s[i + 1] >= '0' && s[i + 1] <= '7'; ++k) {
              v = v * 8 + static_cast<uint32_t>(s[++i] - '0');
            }
            pystr::append_utf8(out, v);
          } else {
            out.push_back('\\');  // unknown escapes stay as written
            out.push_back(e);
          }
      }
    }
    return out;
  }

  std::string src_;
  std::vector<size_t> line_starts_;
  mutable size_t last_offset_ = 0;  // the last position computed, see position()
  mutable int last_column_ = 1;
  std::vector<Token> tokens_;
};

}  // namespace

std::vector<Token> tokenize(std::string_view source) { return Lexer(source).run(); }

}  // namespace ernie::jinja
