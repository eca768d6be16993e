#include "text/jinja/format.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <optional>

#include "text/jinja/access.h"
#include "text/jinja/args.h"
#include "text/jinja/pystr.h"
#include "util/error.h"

namespace ernie::jinja {

namespace {

std::string digits_in_base(uint64_t magnitude, int base, bool upper) {
  if (magnitude == 0) return "0";
  const char* alphabet = upper ? "0123456789ABCDEF" : "0123456789abcdef";
  std::string out;
  while (magnitude > 0) {
    out.insert(out.begin(), alphabet[magnitude % static_cast<uint64_t>(base)]);
    magnitude /= static_cast<uint64_t>(base);
  }
  return out;
}

uint64_t magnitude_of(int64_t v) {
  return v < 0 ? static_cast<uint64_t>(-(v + 1)) + 1 : static_cast<uint64_t>(v);
}

// A float's digits without its sign, printf-style ("%.*f" and friends).
std::string float_body(double x, char conversion, int precision, bool alternate) {
  const double a = std::fabs(x);
  if (std::isnan(a)) return (conversion >= 'A' && conversion <= 'Z') ? "NAN" : "nan";
  if (std::isinf(a)) return (conversion >= 'A' && conversion <= 'Z') ? "INF" : "inf";
  char fmt[16];
  std::snprintf(fmt, sizeof fmt, "%%%s.*%c", alternate ? "#" : "", conversion);
  const int n = std::snprintf(nullptr, 0, fmt, precision, a);
  std::string out(static_cast<size_t>(n) + 1, '\0');
  std::snprintf(out.data(), out.size(), fmt, precision, a);
  out.resize(static_cast<size_t>(n));
  return out;
}

std::string repeat(char32_t fill, size_t n) {
  std::string out;
  for (size_t i = 0; i < n; ++i) pystr::append_utf8(out, fill);
  return out;
}

// Lays out sign + prefix + body in `width` code points; align '=' pads between the
// prefix and the body (how zero padding works).
std::string lay_out(Runtime& runtime, const std::string& lead, const std::string& body, int64_t width, char32_t fill,
                    char align) {
  runtime.check_string(static_cast<size_t>(std::max<int64_t>(width, 0)));
  const auto len = static_cast<int64_t>(pystr::length(lead) + pystr::length(body));
  if (len >= width) return lead + body;
  const auto pad = static_cast<size_t>(width - len);
  switch (align) {
    case '<': return lead + body + repeat(fill, pad);
    case '^': return repeat(fill, pad / 2) + lead + body + repeat(fill, pad - pad / 2);
    case '=': return lead + repeat(fill, pad) + body;
    default: return repeat(fill, pad) + lead + body;
  }
}

// --- printf-style ----------------------------------------------------------------------

struct PercentSpec {
  bool left = false;
  bool zero = false;
  bool plus = false;
  bool space = false;
  bool alternate = false;
  int64_t width = 0;
  std::optional<int64_t> precision;
};

std::string sign_of(bool negative, const PercentSpec& spec) {
  if (negative) return "-";
  if (spec.plus) return "+";
  if (spec.space) return " ";
  return "";
}

std::string percent_number(Runtime& runtime, const std::string& lead, const std::string& body, const PercentSpec& spec) {
  if (spec.left) return lay_out(runtime, lead, body, spec.width, ' ', '<');
  if (spec.zero) return lay_out(runtime, lead, body, spec.width, '0', '=');
  return lay_out(runtime, lead, body, spec.width, ' ', '>');
}

std::string percent_one(Runtime& runtime, char conversion, const PercentSpec& spec, const Value& v) {
  if (v.is_undefined() && conversion != 's' && conversion != 'r' && conversion != 'a') fail_undefined(v);
  switch (conversion) {
    case 's':
    case 'r':
    case 'a': {
      std::string text = conversion == 's' ? to_str(v) : repr(v);
      if (spec.precision) {
        const std::u32string cps = pystr::decode(text);
        if (static_cast<int64_t>(cps.size()) > *spec.precision) {
          text = pystr::encode(std::u32string_view(cps).substr(0, static_cast<size_t>(std::max<int64_t>(*spec.precision, 0))));
        }
      }
      return lay_out(runtime, "", text, spec.width, ' ', spec.left ? '<' : '>');
    }
    case 'c': {
      std::string ch;
      if (v.is_integral()) {
        const int64_t cp = v.as_int();
        if (cp < 0 || cp > 0x10FFFF) fail("%c arg not in range(0x110000)");
        pystr::append_utf8(ch, static_cast<char32_t>(cp));
      } else if (v.is_string() && pystr::length(v.as_string()) == 1) {
        ch = v.as_string();
      } else {
        fail("%c requires an int or a unicode character, not ", type_name(v));
      }
      return lay_out(runtime, "", ch, spec.width, ' ', spec.left ? '<' : '>');
    }
    case 'd':
    case 'i':
    case 'u':
    case 'x':
    case 'X':
    case 'o': {
      int64_t n = 0;
      if (v.is_integral()) {
        n = v.as_int();
      } else if (v.is_float() && (conversion == 'd' || conversion == 'i' || conversion == 'u')) {
        const double f = v.as_double();
        if (!std::isfinite(f) || std::fabs(f) >= 9.2e18) fail("cannot convert float ", to_str(v), " to integer");
        n = static_cast<int64_t>(f);
      } else if (v.is_float()) {
        fail("%", conversion, " format: an integer is required, not float");
      } else {
        fail("%", conversion, " format: a real number is required, not ", type_name(v));
      }
      const int base = (conversion == 'x' || conversion == 'X') ? 16 : conversion == 'o' ? 8 : 10;
      std::string body = digits_in_base(magnitude_of(n), base, conversion == 'X');
      if (spec.precision && static_cast<int64_t>(body.size()) < *spec.precision) {
        body.insert(0, static_cast<size_t>(*spec.precision) - body.size(), '0');
      }
      std::string lead = sign_of(n < 0, spec);
      if (spec.alternate && base == 16) lead += conversion == 'X' ? "0X" : "0x";
      if (spec.alternate && base == 8) lead += "0o";
      return percent_number(runtime, lead, body, spec);
    }
    case 'e':
    case 'E':
    case 'f':
    case 'F':
    case 'g':
    case 'G': {
      if (!v.is_number()) fail("must be real number, not ", type_name(v));
      const double x = v.as_double();
      const int precision = static_cast<int>(std::min<int64_t>(spec.precision.value_or(6), 400));
      const std::string body = float_body(x, conversion, precision, spec.alternate);
      return percent_number(runtime, sign_of(std::signbit(x) && !std::isnan(x), spec), body, spec);
    }
    default:
      fail("unsupported format character '", conversion, "' (0x", digits_in_base(static_cast<unsigned char>(conversion), 16, false),
           ")");
  }
}

// --- format spec mini-language ------------------------------------------------------------

struct FormatSpec {
  char32_t fill = ' ';
  char align = 0;
  char sign = '-';
  bool alternate = false;
  int64_t width = 0;
  char grouping = 0;
  std::optional<int64_t> precision;
  char type = 0;
};

FormatSpec parse_spec(std::string_view text) {
  FormatSpec spec;
  const std::u32string s = pystr::decode(text);
  size_t i = 0;
  auto is_align = [](char32_t c) { return c == '<' || c == '>' || c == '=' || c == '^'; };
  if (s.size() >= 2 && is_align(s[1])) {
    spec.fill = s[0];
    spec.align = static_cast<char>(s[1]);
    i = 2;
  } else if (!s.empty() && is_align(s[0])) {
    spec.align = static_cast<char>(s[0]);
    i = 1;
  }
  if (i < s.size() && (s[i] == '+' || s[i] == '-' || s[i] == ' ')) spec.sign = static_cast<char>(s[i++]);
  if (i < s.size() && s[i] == '#') {
    spec.alternate = true;
    ++i;
  }
  if (i < s.size() && s[i] == '0') {
    if (!spec.align) {
      spec.fill = '0';
      spec.align = '=';
    }
    ++i;
  }
  while (i < s.size() && s[i] >= '0' && s[i] <= '9') spec.width = spec.width * 10 + (s[i++] - '0');
  if (i < s.size() && (s[i] == ',' || s[i] == '_')) spec.grouping = static_cast<char>(s[i++]);
  if (i < s.size() && s[i] == '.') {
    ++i;
    int64_t p = 0;
    bool any = false;
    while (i < s.size() && s[i] >= '0' && s[i] <= '9') {
      p = p * 10 + (s[i++] - '0');
      any = true;
    }
    if (!any) fail("Format specifier missing precision");
    spec.precision = p;
  }
  if (i < s.size()) spec.type = static_cast<char>(s[i++]);
  if (i != s.size()) fail("Invalid format specifier '", text, "'");
  return spec;
}

std::string group_digits(const std::string& digits, char separator, size_t every) {
  if (!separator) return digits;
  std::string out;
  const size_t n = digits.size();
  for (size_t i = 0; i < n; ++i) {
    if (i > 0 && (n - i) % every == 0) out.push_back(separator);
    out.push_back(digits[i]);
  }
  return out;
}

std::string spec_sign(bool negative, char sign) {
  if (negative) return "-";
  if (sign == '+') return "+";
  if (sign == ' ') return " ";
  return "";
}

std::string format_float_spec(Runtime& runtime, double x, const FormatSpec& spec) {
  char type = spec.type;
  std::string body;
  double shown = x;
  if (type == '%') shown = x * 100.0;
  if (type == 0 && !spec.precision) {
    body = pystr::format_float(std::fabs(x));
  } else if (type == 0) {
    body = float_body(shown, 'g', static_cast<int>(std::max<int64_t>(*spec.precision, 1)), spec.alternate);
    if (std::isfinite(x) && body.find_first_of(".e") == std::string::npos) body += ".0";
  } else {
    const char conversion = type == '%' ? 'f' : (type == 'n' ? 'g' : type);
    body = float_body(shown, conversion, static_cast<int>(std::min<int64_t>(spec.precision.value_or(6), 400)), spec.alternate);
    if (type == '%') body += "%";
  }
  if (spec.grouping && std::isfinite(x)) {
    const size_t int_end = body.find_first_not_of("0123456789");
    body = group_digits(body.substr(0, int_end), spec.grouping, 3) +
           (int_end == std::string::npos ? "" : body.substr(int_end));
  }
  return lay_out(runtime, spec_sign(std::signbit(x) && !std::isnan(x), spec.sign), body, spec.width, spec.fill,
                 spec.align ? spec.align : '>');
}

}  // namespace

std::string percent_format(Runtime& runtime, std::string_view fmt, const Value& args) {
  std::vector<Value> positional;
  const Dict* mapping = nullptr;
  if (args.is_list() && args.as_list().is_tuple()) {
    positional = args.as_list().items;
  } else {
    positional.push_back(args);
    if (args.is_dict()) mapping = &args.as_dict();
  }
  size_t next_arg = 0;
  auto take = [&]() -> const Value& {
    if (next_arg >= positional.size()) fail("not enough arguments for format string");
    return positional[next_arg++];
  };
  std::string out;
  size_t i = 0;
  while (i < fmt.size()) {
    const char c = fmt[i++];
    if (c != '%') {
      out.push_back(c);
      continue;
    }
    if (i >= fmt.size()) fail("incomplete format");
    std::optional<Value> keyed;
    if (fmt[i] == '(') {
      if (!mapping) fail("format requires a mapping");
      int depth = 1;
      const size_t key_start = ++i;
      while (i < fmt.size() && depth > 0) {
        if (fmt[i] == '(') ++depth;
        if (fmt[i] == ')') --depth;
        ++i;
      }
      if (depth > 0) fail("incomplete format key");
      const std::string key(fmt.substr(key_start, i - 1 - key_start));
      const Value* found = mapping->find(key);
      if (!found) fail("KeyError: '", key, "'");
      keyed = *found;
    }
    PercentSpec spec;
    for (; i < fmt.size(); ++i) {
      const char f = fmt[i];
      if (f == '-') spec.left = true;
      else if (f == '+') spec.plus = true;
      else if (f == ' ') spec.space = true;
      else if (f == '#') spec.alternate = true;
      else if (f == '0') spec.zero = true;
      else break;
    }
    if (i < fmt.size() && fmt[i] == '*') {
      spec.width = expect_int(take(), "* width");
      if (spec.width < 0) {
        spec.left = true;
        spec.width = -spec.width;
      }
      ++i;
    } else {
      while (i < fmt.size() && fmt[i] >= '0' && fmt[i] <= '9') spec.width = spec.width * 10 + (fmt[i++] - '0');
    }
    if (i < fmt.size() && fmt[i] == '.') {
      ++i;
      if (i < fmt.size() && fmt[i] == '*') {
        spec.precision = expect_int(take(), "* precision");
        ++i;
      } else {
        int64_t p = 0;
        while (i < fmt.size() && fmt[i] >= '0' && fmt[i] <= '9') p = p * 10 + (fmt[i++] - '0');
        spec.precision = p;
      }
    }
    while (i < fmt.size() && (fmt[i] == 'h' || fmt[i] == 'l' || fmt[i] == 'L')) ++i;
    if (i >= fmt.size()) fail("incomplete format");
    const char conversion = fmt[i++];
    if (conversion == '%') {
      out.push_back('%');
      continue;
    }
    out += percent_one(runtime, conversion, spec, keyed ? *keyed : take());
    runtime.check_string(out.size());
  }
  if (!mapping && next_arg < positional.size()) fail("not all arguments converted during string formatting");
  return out;
}

std::string format_with_spec(Runtime& runtime, const Value& v, std::string_view spec_text) {
  if (spec_text.empty()) return to_str(v);
  const FormatSpec spec = parse_spec(spec_text);
  if (v.is_string()) {
    if (spec.type != 0 && spec.type != 's') fail("Unknown format code '", spec.type, "' for object of type 'str'");
    if (spec.sign != '-') fail("Sign not allowed in string format specifier");
    if (spec.align == '=') fail("'=' alignment not allowed in string format specifier");
    std::string text = v.as_string();
    if (spec.precision) {
      const std::u32string cps = pystr::decode(text);
      if (static_cast<int64_t>(cps.size()) > *spec.precision) text = pystr::encode(std::u32string_view(cps).substr(0, static_cast<size_t>(*spec.precision)));
    }
    return lay_out(runtime, "", text, spec.width, spec.fill, spec.align ? spec.align : '<');
  }
  if (v.is_integral()) {
    const char type = spec.type;
    if (type == 'e' || type == 'E' || type == 'f' || type == 'F' || type == 'g' || type == 'G' || type == '%') {
      return format_float_spec(runtime, v.as_double(), spec);
    }
    const int64_t n = v.as_int();
    std::string body;
    std::string prefix;
    if (type == 0 || type == 'd' || type == 'n') {
      body = group_digits(digits_in_base(magnitude_of(n), 10, false), spec.grouping, 3);
    } else if (type == 'b' || type == 'o' || type == 'x' || type == 'X') {
      const int base = type == 'b' ? 2 : type == 'o' ? 8 : 16;
      body = group_digits(digits_in_base(magnitude_of(n), base, type == 'X'), spec.grouping, 4);
      if (spec.alternate) prefix = std::string("0") + type;
    } else if (type == 'c') {
      if (n < 0 || n > 0x10FFFF) fail("%c arg not in range(0x110000)");
      pystr::append_utf8(body, static_cast<char32_t>(n));
      return lay_out(runtime, "", body, spec.width, spec.fill, spec.align ? spec.align : '<');
    } else {
      fail("Unknown format code '", type, "' for object of type 'int'");
    }
    if (spec.precision) fail("Precision not allowed in integer format specifier");
    return lay_out(runtime, spec_sign(n < 0, spec.sign) + prefix, body, spec.width, spec.fill, spec.align ? spec.align : '>');
  }
  if (v.is_float()) {
    const char type = spec.type;
    if (type != 0 && type != 'e' && type != 'E' && type != 'f' && type != 'F' && type != 'g' && type != 'G' &&
        type != '%' && type != 'n') {
      fail("Unknown format code '", type, "' for object of type 'float'");
    }
    return format_float_spec(runtime, v.as_double(), spec);
  }
  if (v.is_undefined()) return to_str(v);
  fail("unsupported format string passed to ", type_name(v), ".__format__");
}

namespace {

struct BraceState {
  size_t auto_index = 0;
  int numbering = 0;  // 0 unknown, 1 automatic, 2 manual
};

Value resolve_field(std::string_view field, const CallArgs& args, BraceState& state) {
  size_t i = 0;
  while (i < field.size() && field[i] != '.' && field[i] != '[') ++i;
  const std::string_view first = field.substr(0, i);
  Value value;
  if (first.empty()) {
    if (state.numbering == 2) fail("cannot switch from manual field specification to automatic field numbering");
    state.numbering = 1;
    if (state.auto_index >= args.positional.size()) fail("Replacement index ", state.auto_index, " out of range for positional args tuple");
    value = args.positional[state.auto_index++];
  } else if (first.find_first_not_of("0123456789") == std::string_view::npos) {
    if (state.numbering == 1) fail("cannot switch from automatic field numbering to manual field specification");
    state.numbering = 2;
    const size_t index = first.size() > 9 ? args.positional.size() : std::stoul(std::string(first));
    if (index >= args.positional.size()) fail("Replacement index ", first, " out of range for positional args tuple");
    value = args.positional[index];
  } else {
    const Value* found = nullptr;
    for (const auto& [key, v] : args.keyword) {
      if (key == first) found = &v;
    }
    if (!found) fail("KeyError: '", first, "'");
    value = *found;
  }
  while (i < field.size()) {
    if (field[i] == '.') {
      size_t j = ++i;
      while (j < field.size() && field[j] != '.' && field[j] != '[') ++j;
      value = get_attribute(value, field.substr(i, j - i));
      i = j;
    } else {
      const size_t close = field.find(']', i);
      if (close == std::string_view::npos) fail("Missing ']' in format string");
      const std::string_view key = field.substr(i + 1, close - i - 1);
      const bool digits = !key.empty() && key.size() <= 18 && key.find_first_not_of("0123456789") == std::string_view::npos;
      value = get_item(value, digits ? Value(static_cast<int64_t>(std::stoll(std::string(key)))) : Value(key));
      i = close + 1;
    }
  }
  return value;
}

std::string brace_format_impl(Runtime& runtime, std::string_view fmt, const CallArgs& args, BraceState& state, int depth) {
  if (depth > 2) fail("Max string recursion exceeded");
  std::string out;
  size_t i = 0;
  while (i < fmt.size()) {
    const char c = fmt[i];
    if (c == '{') {
      if (i + 1 < fmt.size() && fmt[i + 1] == '{') {
        out.push_back('{');
        i += 2;
        continue;
      }
      size_t j = i + 1;
      int nesting = 1;
      while (j < fmt.size()) {
        if (fmt[j] == '{') ++nesting;
        if (fmt[j] == '}' && --nesting == 0) break;
        ++j;
      }
      if (j >= fmt.size()) fail("expected '}' before end of string");
      const std::string_view field = fmt.substr(i + 1, j - i - 1);
      size_t name_end = 0;
      int brackets = 0;
      while (name_end < field.size()) {
        const char f = field[name_end];
        if (f == '[') ++brackets;
        if (f == ']') --brackets;
        if (brackets == 0 && (f == '!' || f == ':')) break;
        ++name_end;
      }
      Value value = resolve_field(field.substr(0, name_end), args, state);
      std::string_view rest = field.substr(name_end);
      if (!rest.empty() && rest[0] == '!') {
        if (rest.size() < 2) fail("end of string while looking for conversion specifier");
        const char conversion = rest[1];
        if (conversion == 's') value = Value(to_str(value));
        else if (conversion == 'r' || conversion == 'a') value = Value(repr(value));
        else fail("Unknown conversion specifier ", conversion);
        rest = rest.substr(2);
        if (!rest.empty() && rest[0] != ':') fail("expected ':' after conversion specifier");
      }
      std::string spec;
      if (!rest.empty()) spec = brace_format_impl(runtime, rest.substr(1), args, state, depth + 1);
      out += format_with_spec(runtime, value, spec);
      runtime.check_string(out.size());
      i = j + 1;
    } else if (c == '}') {
      if (i + 1 < fmt.size() && fmt[i + 1] == '}') {
        out.push_back('}');
        i += 2;
        continue;
      }
      fail("Single '}' encountered in format string");
    } else {
      out.push_back(c);
      ++i;
    }
  }
  return out;
}

}  // namespace

std::string brace_format(Runtime& runtime, std::string_view fmt, const CallArgs& args) {
  BraceState state;
  return brace_format_impl(runtime, fmt, args, state, 0);
}

}  // namespace ernie::jinja
