#include "text/jinja/pystr.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <cstdlib>

#include "util/error.h"

namespace ernie::jinja::pystr {

// --- UTF-8 ---------------------------------------------------------------------------

std::u32string decode(std::string_view text) {
  std::u32string out;
  out.reserve(text.size());
  size_t i = 0;
  const size_t n = text.size();
  while (i < n) {
    const auto byte = static_cast<unsigned char>(text[i]);
    if (byte < 0x80) {
      out.push_back(byte);
      ++i;
      continue;
    }
    int extra = 0;
    char32_t cp = 0;
    char32_t min = 0;
    if ((byte & 0xE0) == 0xC0) {
      extra = 1;
      cp = byte & 0x1F;
      min = 0x80;
    } else if ((byte & 0xF0) == 0xE0) {
      extra = 2;
      cp = byte & 0x0F;
      min = 0x800;
    } else if ((byte & 0xF8) == 0xF0) {
      extra = 3;
      cp = byte & 0x07;
      min = 0x10000;
    } else {
      out.push_back(0xFFFD);
      ++i;
      continue;
    }
    bool ok = i + static_cast<size_t>(extra) < n;
    for (int k = 1; ok && k <= extra; ++k) {
      const auto next = static_cast<unsigned char>(text[i + k]);
      if ((next & 0xC0) != 0x80) {
        ok = false;
      } else {
        cp = (cp << 6) | (next & 0x3F);
      }
    }
    if (!ok || cp < min || cp > 0x10FFFF || (cp >= 0xD800 && cp <= 0xDFFF)) {
      out.push_back(0xFFFD);
      ++i;
      continue;
    }
    out.push_back(cp);
    i += static_cast<size_t>(extra) + 1;
  }
  return out;
}

void append_utf8(std::string& out, char32_t cp) {
  if (cp < 0x80) {
    out.push_back(static_cast<char>(cp));
  } else if (cp < 0x800) {
    out.push_back(static_cast<char>(0xC0 | (cp >> 6)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else if (cp < 0x10000) {
    out.push_back(static_cast<char>(0xE0 | (cp >> 12)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  } else {
    out.push_back(static_cast<char>(0xF0 | (cp >> 18)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 12) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | ((cp >> 6) & 0x3F)));
    out.push_back(static_cast<char>(0x80 | (cp & 0x3F)));
  }
}

std::string encode(std::u32string_view code_points) {
  std::string out;
  out.reserve(code_points.size());
  for (char32_t cp : code_points) append_utf8(out, cp);
  return out;
}

bool is_ascii(std::string_view text) {
  return std::all_of(text.begin(), text.end(), [](char c) { return static_cast<unsigned char>(c) < 0x80; });
}

size_t length(std::string_view text) {
  if (is_ascii(text)) return text.size();
  return decode(text).size();  // invalid bytes count one each, as decode() maps them
}

// --- character classes ----------------------------------------------------------------

bool is_space(char32_t c) {
  return (c >= 0x09 && c <= 0x0D) || (c >= 0x1C && c <= 0x20) || c == 0x85 || c == 0xA0 || c == 0x1680 ||
         (c >= 0x2000 && c <= 0x200A) || c == 0x2028 || c == 0x2029 || c == 0x202F || c == 0x205F ||
         c == 0x3000;
}

bool is_linebreak(char32_t c) {
  return c == '\n' || c == '\r' || c == 0x0B || c == 0x0C || c == 0x1C || c == 0x1D || c == 0x1E || c == 0x85 ||
         c == 0x2028 || c == 0x2029;
}

namespace {

// Upper/lower pairs laid out as alternating code points (upper even, lower odd, or the
// reverse), the common shape of the Latin and Cyrillic extension blocks.
struct AlternatingRange {
  char32_t first;
  char32_t last;
  bool upper_even;
};

constexpr AlternatingRange kAlternating[] = {
    {0x0100, 0x012F, true},  {0x0132, 0x0137, true},  {0x0139, 0x0148, false}, {0x014A, 0x0177, true},
    {0x0179, 0x017E, false}, {0x01CD, 0x01DC, false}, {0x01DE, 0x01EF, true},  {0x01F4, 0x01F5, true},
    {0x01F8, 0x021F, true},  {0x0222, 0x0233, true},  {0x0460, 0x0481, true},  {0x048A, 0x04BF, true},  {0x04C1, 0x04CE, false},
    {0x04D0, 0x052F, true},  {0x1E00, 0x1E95, true},  {0x1EA0, 0x1EFF, true},
};

// Upper range [first, last] maps to lower by adding `offset`.
struct OffsetRange {
  char32_t first;
  char32_t last;
  char32_t offset;
};

constexpr OffsetRange kOffsets[] = {
    {'A', 'Z', 0x20},         {0x00C0, 0x00D6, 0x20},  {0x00D8, 0x00DE, 0x20}, {0x0391, 0x03A1, 0x20},
    {0x03A3, 0x03AB, 0x20},   {0x0388, 0x038A, 0x25},  {0x038E, 0x038F, 0x3F}, {0x0400, 0x040F, 0x50},
    {0x0410, 0x042F, 0x20},   {0x0531, 0x0556, 0x30},  {0xFF21, 0xFF3A, 0x20},
};

}  // namespace

namespace {

// The Latin digraphs with three cases (Ǆ ǅ ǆ): the first code point of each triple.
char32_t digraph_base(char32_t c) {
  for (char32_t base : {char32_t{0x01C4}, char32_t{0x01C7}, char32_t{0x01CA}, char32_t{0x01F1}}) {
    if (c >= base && c < base + 3) return base;
  }
  return 0;
}

}  // namespace

char32_t to_title(char32_t c) {
  if (const char32_t base = digraph_base(c)) return base + 1;
  return to_upper(c);
}

char32_t to_lower(char32_t c) {
  if (c < 0x80) return (c >= 'A' && c <= 'Z') ? c + 0x20 : c;
  if (const char32_t base = digraph_base(c)) return base + 2;
  for (const auto& r : kOffsets) {
    if (c >= r.first && c <= r.last) return c + r.offset;
  }
  for (const auto& r : kAlternating) {
    if (c >= r.first && c <= r.last) {
      const bool even = (c % 2) == 0;
      return even == r.upper_even ? c + 1 : c;
    }
  }
  switch (c) {
    case 0x0130: return 'i';
    case 0x0178: return 0x00FF;
    case 0x0386: return 0x03AC;
    case 0x038C: return 0x03CC;
    case 0x04C0: return 0x04CF;
    case 0x1E9E: return 0x00DF;
    default: return c;
  }
}

char32_t to_upper(char32_t c) {
  if (c < 0x80) return (c >= 'a' && c <= 'z') ? c - 0x20 : c;
  if (const char32_t base = digraph_base(c)) return base;
  for (const auto& r : kOffsets) {
    if (c >= r.first + r.offset && c <= r.last + r.offset) return c - r.offset;
  }
  for (const auto& r : kAlternating) {
    if (c >= r.first && c <= r.last) {
      const bool even = (c % 2) == 0;
      return even == r.upper_even ? c : c - 1;
    }
  }
  switch (c) {
    case 0x00B5: return 0x039C;
    case 0x00FF: return 0x0178;
    case 0x0131: return 'I';
    case 0x017F: return 'S';
    case 0x03C2: return 0x03A3;
    case 0x03AC: return 0x0386;
    case 0x03CC: return 0x038C;
    case 0x04CF: return 0x04C0;
    default: return c;
  }
}

bool is_lower_char(char32_t c) {
  if (const char32_t base = digraph_base(c)) return c == base + 2;
  return to_upper(c) != c || c == 0x00DF || c == 0x0138 || c == 0x0149 || c == 0x00AA || c == 0x00BA;
}

bool is_upper_char(char32_t c) {
  const char32_t base = digraph_base(c);
  if (base) return c == base;  // ǅ is titlecase: neither upper nor lower
  return to_lower(c) != c;
}

bool is_cased(char32_t c) { return digraph_base(c) != 0 || is_lower_char(c) || is_upper_char(c); }

bool is_digit(char32_t c) {
  return (c >= '0' && c <= '9') || c == 0xB2 || c == 0xB3 || c == 0xB9 || (c >= 0x0660 && c <= 0x0669) ||
         (c >= 0x06F0 && c <= 0x06F9) || (c >= 0x0966 && c <= 0x096F) || c == 0x2070 ||
         (c >= 0x2074 && c <= 0x2079) || (c >= 0x2080 && c <= 0x2089) || (c >= 0x2460 && c <= 0x2468) ||
         (c >= 0xFF10 && c <= 0xFF19);
}

bool is_alpha(char32_t c) {
  if (c < 0x80) return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
  if (is_cased(c)) return true;
  struct Range {
    char32_t first, last;
  };
  static constexpr Range kLetters[] = {
      {0x0180, 0x024F}, {0x0250, 0x02C1}, {0x05D0, 0x05EA}, {0x0620, 0x064A}, {0x0671, 0x06D3},
      {0x0904, 0x0939}, {0x0E01, 0x0E30}, {0x0E40, 0x0E46}, {0x1100, 0x11FF}, {0x3005, 0x3006},
      {0x3031, 0x3035}, {0x3041, 0x3096}, {0x309D, 0x309F}, {0x30A1, 0x30FA}, {0x30FC, 0x30FF},
      {0x3131, 0x318E}, {0x3400, 0x4DBF}, {0x4E00, 0x9FFF}, {0xAC00, 0xD7A3}, {0xF900, 0xFAFF},
      {0xFF66, 0xFF9D}, {0x20000, 0x2FFFF},
  };
  return std::any_of(std::begin(kLetters), std::end(kLetters),
                     [c](const Range& r) { return c >= r.first && c <= r.last; });
}

bool is_word(char32_t c) { return c == '_' || is_alpha(c) || is_digit(c) || c == 0x3007; }

// --- helpers --------------------------------------------------------------------------

namespace {

template <typename Map>
std::string map_code_points(std::string_view s, Map map) {
  std::string out;
  out.reserve(s.size());
  if (is_ascii(s)) {
    for (char ch : s) out.push_back(static_cast<char>(map(static_cast<char32_t>(ch))));
    return out;
  }
  for (char32_t cp : decode(s)) append_utf8(out, map(cp));
  return out;
}

// Python's slice-index adjustment for find/count/startswith (str.find(sub, start, end)).
void adjust_indices(int64_t n, std::optional<int64_t> start_in, std::optional<int64_t> end_in, int64_t& start,
                    int64_t& end) {
  start = start_in.value_or(0);
  end = end_in.value_or(n);
  if (end > n) {
    end = n;
  } else if (end < 0) {
    end += n;
    if (end < 0) end = 0;
  }
  if (start < 0) {
    start += n;
    if (start < 0) start = 0;
  }
}

}  // namespace

// --- str methods ----------------------------------------------------------------------

std::string upper(std::string_view s) {
  if (is_ascii(s)) return map_code_points(s, [](char32_t c) { return to_upper(c); });
  std::string out;
  for (char32_t cp : decode(s)) {
    if (cp == 0x00DF) {
      out += "SS";  // Python's full case mapping: 'ß'.upper() == 'SS'
    } else {
      append_utf8(out, to_upper(cp));
    }
  }
  return out;
}

std::string lower(std::string_view s) {
  return map_code_points(s, [](char32_t c) { return to_lower(c); });
}

std::string swapcase(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char32_t c : decode(s)) {
    if (c == 0x00DF) {
      out += "SS";
    } else if (is_upper_char(c)) {
      append_utf8(out, to_lower(c));
    } else if (is_lower_char(c)) {
      append_utf8(out, to_upper(c));
    } else {
      append_utf8(out, c);
    }
  }
  return out;
}

std::string title(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  bool previous_cased = false;
  for (char32_t cp : decode(s)) {
    append_utf8(out, previous_cased ? to_lower(cp) : to_title(cp));
    previous_cased = is_cased(cp);
  }
  return out;
}

std::string capitalize(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  bool first = true;
  for (char32_t cp : decode(s)) {
    append_utf8(out, first ? to_title(cp) : to_lower(cp));
    first = false;
  }
  return out;
}

namespace {

// The code point that ends right before byte `end`, and where it starts.
char32_t code_point_before(std::string_view s, size_t end, size_t& start) {
  start = end - 1;
  while (start > 0 && end - start < 4 && (static_cast<unsigned char>(s[start]) & 0xC0) == 0x80) --start;
  const std::u32string one = decode(s.substr(start, end - start));
  if (one.size() != 1) {
    start = end - 1;
    return 0xFFFD;
  }
  return one[0];
}

char32_t code_point_after(std::string_view s, size_t begin, size_t& next) {
  const auto b = static_cast<unsigned char>(s[begin]);
  const size_t len = b < 0x80 ? 1 : (b & 0xE0) == 0xC0 ? 2 : (b & 0xF0) == 0xE0 ? 3 : (b & 0xF8) == 0xF0 ? 4 : 1;
  const std::u32string one = decode(s.substr(begin, len));
  if (one.size() != 1 || begin + len > s.size()) {
    next = begin + 1;
    return 0xFFFD;
  }
  next = begin + len;
  return one[0];
}

}  // namespace

std::string strip(std::string_view s, const std::optional<std::string>& chars, bool left, bool right) {
  // Only the ends are decoded: contents can be long. The set is sorted because it can
  // be long too (a client's text), and a linear search per character would be
  // |s| x |chars| work.
  std::u32string set;
  if (chars) set = decode(*chars);
  std::sort(set.begin(), set.end());
  auto strippable = [&](char32_t c) { return chars ? std::binary_search(set.begin(), set.end(), c) : is_space(c); };
  size_t begin = 0;
  size_t end = s.size();
  while (left && begin < end) {
    size_t next = 0;
    if (!strippable(code_point_after(s, begin, next))) break;
    begin = next;
  }
  while (right && end > begin) {
    size_t start = 0;
    if (!strippable(code_point_before(s, end, start))) break;
    end = start;
  }
  return std::string(s.substr(begin, end - begin));
}

namespace {

// Needles up to this long are searched with string_view (at most this many compares
// per position, and its first-character scan is fast); longer ones with KMP.
constexpr size_t kShortNeedle = 16;

// Knuth-Morris-Pratt over sequences given by accessors, so one routine searches
// forwards and (reading both sequences back to front) backwards: the index in `hay`
// where `needle` first starts, or npos. O(hay + needle) time.
template <typename HayAt, typename NeedleAt>
size_t kmp_search(size_t hay_size, HayAt hay, size_t needle_size, NeedleAt needle) {
  // border[i]: length of the longest proper prefix of needle[0..i] that is also its suffix.
  std::vector<size_t> border(needle_size, 0);
  for (size_t i = 1, k = 0; i < needle_size; ++i) {
    while (k > 0 && needle(i) != needle(k)) k = border[k - 1];
    if (needle(i) == needle(k)) ++k;
    border[i] = k;
  }
  for (size_t i = 0, k = 0; i < hay_size; ++i) {
    while (k > 0 && hay(i) != needle(k)) k = border[k - 1];
    if (hay(i) == needle(k)) ++k;
    if (k == needle_size) return i + 1 - needle_size;
  }
  return static_cast<size_t>(-1);
}

template <typename Char>
size_t find_text_impl(std::basic_string_view<Char> hay, std::basic_string_view<Char> needle, size_t pos) {
  using View = std::basic_string_view<Char>;
  if (needle.size() <= kShortNeedle || pos > hay.size()) return hay.find(needle, pos);
  const View window = hay.substr(pos);
  const size_t hit = kmp_search(
      window.size(), [&](size_t i) { return window[i]; }, needle.size(), [&](size_t i) { return needle[i]; });
  return hit == static_cast<size_t>(-1) ? View::npos : pos + hit;
}

template <typename Char>
size_t find_last_impl(std::basic_string_view<Char> hay, std::basic_string_view<Char> needle, size_t pos) {
  using View = std::basic_string_view<Char>;
  if (needle.size() <= kShortNeedle || needle.size() > hay.size()) return hay.rfind(needle, pos);
  // The matches that start at or before pos lie in hay[0, pos + |needle|); search that
  // window back to front for the needle back to front.
  const View window = hay.substr(0, std::min(pos, hay.size() - needle.size()) + needle.size());
  const size_t w = window.size();
  const size_t m = needle.size();
  const size_t hit = kmp_search(
      w, [&](size_t i) { return window[w - 1 - i]; }, m, [&](size_t i) { return needle[m - 1 - i]; });
  return hit == static_cast<size_t>(-1) ? View::npos : w - hit - m;
}

}  // namespace

size_t find_text(std::string_view hay, std::string_view needle, size_t pos) { return find_text_impl(hay, needle, pos); }
size_t find_text(std::u32string_view hay, std::u32string_view needle, size_t pos) {
  return find_text_impl(hay, needle, pos);
}
size_t find_last(std::string_view hay, std::string_view needle, size_t pos) { return find_last_impl(hay, needle, pos); }
size_t find_last(std::u32string_view hay, std::u32string_view needle, size_t pos) {
  return find_last_impl(hay, needle, pos);
}

std::vector<std::string> split(std::string_view s, const std::optional<std::string>& sep, int64_t maxsplit) {
  std::vector<std::string> parts;
  if (sep) {
    if (sep->empty()) fail("empty separator: str.split() needs a non-empty separator or none");
    size_t pos = 0;
    while (maxsplit < 0 || static_cast<int64_t>(parts.size()) < maxsplit) {
      const size_t hit = find_text(s, *sep, pos);
      if (hit == std::string_view::npos) break;
      parts.emplace_back(s.substr(pos, hit - pos));
      pos = hit + sep->size();
    }
    parts.emplace_back(s.substr(pos));
    return parts;
  }
  const std::u32string text = decode(s);
  size_t i = 0;
  const size_t n = text.size();
  while (true) {
    while (i < n && is_space(text[i])) ++i;
    if (i == n) break;
    if (maxsplit >= 0 && static_cast<int64_t>(parts.size()) == maxsplit) {
      parts.push_back(encode(std::u32string_view(text).substr(i)));  // remainder keeps trailing space
      break;
    }
    size_t j = i;
    while (j < n && !is_space(text[j])) ++j;
    parts.push_back(encode(std::u32string_view(text).substr(i, j - i)));
    i = j;
  }
  return parts;
}

std::vector<std::string> rsplit(std::string_view s, const std::optional<std::string>& sep, int64_t maxsplit) {
  std::vector<std::string> parts;
  if (sep) {
    if (sep->empty()) fail("empty separator: str.rsplit() needs a non-empty separator or none");
    size_t end = s.size();
    while (maxsplit < 0 || static_cast<int64_t>(parts.size()) < maxsplit) {
      if (end < sep->size()) break;
      const size_t hit = find_last(s, *sep, end - sep->size());
      if (hit == std::string_view::npos) break;
      parts.emplace_back(s.substr(hit + sep->size(), end - hit - sep->size()));
      end = hit;
    }
    parts.emplace_back(s.substr(0, end));
    std::reverse(parts.begin(), parts.end());
    return parts;
  }
  const std::u32string text = decode(s);
  size_t j = text.size();
  while (true) {
    while (j > 0 && is_space(text[j - 1])) --j;
    if (j == 0) break;
    if (maxsplit >= 0 && static_cast<int64_t>(parts.size()) == maxsplit) {
      parts.push_back(encode(std::u32string_view(text).substr(0, j)));
      break;
    }
    size_t i = j;
    while (i > 0 && !is_space(text[i - 1])) --i;
    parts.push_back(encode(std::u32string_view(text).substr(i, j - i)));
    j = i;
  }
  std::reverse(parts.begin(), parts.end());
  return parts;
}

std::vector<std::string> splitlines(std::string_view s, bool keepends) {
  std::vector<std::string> lines;
  const std::u32string text = decode(s);
  size_t start = 0;
  size_t i = 0;
  while (i < text.size()) {
    if (!is_linebreak(text[i])) {
      ++i;
      continue;
    }
    size_t eol = i + 1;
    if (text[i] == '\r' && eol < text.size() && text[eol] == '\n') ++eol;
    const size_t end = keepends ? eol : i;
    lines.push_back(encode(std::u32string_view(text).substr(start, end - start)));
    start = i = eol;
  }
  if (start < text.size()) lines.push_back(encode(std::u32string_view(text).substr(start)));
  return lines;
}

std::string replace(std::string_view s, std::string_view old, std::string_view replacement, int64_t count) {
  std::string out;
  if (old.empty()) {
    const std::u32string text = decode(s);
    int64_t done = 0;
    for (char32_t cp : text) {
      if (count < 0 || done < count) {
        out += replacement;
        ++done;
      }
      append_utf8(out, cp);
    }
    if (count < 0 || done < count) out += replacement;
    return out;
  }
  size_t pos = 0;
  int64_t done = 0;
  while (count < 0 || done < count) {
    const size_t hit = find_text(s, old, pos);
    if (hit == std::string_view::npos) break;
    out.append(s.substr(pos, hit - pos));
    out.append(replacement);
    pos = hit + old.size();
    ++done;
  }
  out.append(s.substr(pos));
  return out;
}

namespace {
// str.find / str.rfind: the first or last occurrence of `sub` inside s[start:end], in
// code points, or -1.
int64_t find_in_window(std::string_view s, std::string_view sub, std::optional<int64_t> start_in,
                       std::optional<int64_t> end_in, bool from_right) {
  const std::u32string text = decode(s);
  const std::u32string needle = decode(sub);
  int64_t start = 0;
  int64_t end = 0;
  adjust_indices(static_cast<int64_t>(text.size()), start_in, end_in, start, end);
  if (start > static_cast<int64_t>(text.size()) || end - start < static_cast<int64_t>(needle.size())) return -1;
  const std::u32string_view window = std::u32string_view(text).substr(start, end - start);
  const size_t hit = from_right ? find_last(window, needle) : find_text(window, needle);
  return hit == std::u32string_view::npos ? -1 : start + static_cast<int64_t>(hit);
}
}  // namespace

int64_t find(std::string_view s, std::string_view sub, std::optional<int64_t> start_in,
             std::optional<int64_t> end_in) {
  return find_in_window(s, sub, start_in, end_in, /*from_right=*/false);
}

int64_t rfind(std::string_view s, std::string_view sub, std::optional<int64_t> start_in,
              std::optional<int64_t> end_in) {
  return find_in_window(s, sub, start_in, end_in, /*from_right=*/true);
}

int64_t count(std::string_view s, std::string_view sub, std::optional<int64_t> start_in,
              std::optional<int64_t> end_in) {
  const std::u32string text = decode(s);
  const std::u32string needle = decode(sub);
  int64_t start = 0;
  int64_t end = 0;
  adjust_indices(static_cast<int64_t>(text.size()), start_in, end_in, start, end);
  if (start > static_cast<int64_t>(text.size()) || end < start) return 0;
  if (needle.empty()) return end - start + 1;
  const std::u32string_view window = std::u32string_view(text).substr(start, end - start);
  int64_t n = 0;
  size_t pos = 0;
  while ((pos = find_text(window, needle, pos)) != std::u32string_view::npos) {
    ++n;
    pos += needle.size();
  }
  return n;
}

namespace {

bool tail_match(std::string_view s, std::string_view sub, std::optional<int64_t> start_in,
                std::optional<int64_t> end_in, bool at_end) {
  const std::u32string text = decode(s);
  const std::u32string needle = decode(sub);
  int64_t start = 0;
  int64_t end = 0;
  adjust_indices(static_cast<int64_t>(text.size()), start_in, end_in, start, end);
  const auto sub_len = static_cast<int64_t>(needle.size());
  if (start > static_cast<int64_t>(text.size()) || end - start < sub_len) return false;
  const int64_t at = at_end ? end - sub_len : start;
  return std::u32string_view(text).substr(at, sub_len) == needle;
}

std::string repeat(char32_t fill, int64_t n) {
  std::string out;
  for (int64_t i = 0; i < n; ++i) append_utf8(out, fill);
  return out;
}

}  // namespace

bool startswith(std::string_view s, std::string_view prefix, std::optional<int64_t> start,
                std::optional<int64_t> end) {
  if (!start && !end) return s.substr(0, prefix.size()) == prefix;
  return tail_match(s, prefix, start, end, false);
}

bool endswith(std::string_view s, std::string_view suffix, std::optional<int64_t> start,
              std::optional<int64_t> end) {
  if (!start && !end) return s.size() >= suffix.size() && s.substr(s.size() - suffix.size()) == suffix;
  return tail_match(s, suffix, start, end, true);
}

std::string center(std::string_view s, int64_t width, char32_t fill) {
  const auto len = static_cast<int64_t>(length(s));
  if (len >= width) return std::string(s);
  const int64_t margin = width - len;
  const int64_t left = margin / 2 + (margin & width & 1);  // CPython's rounding rule
  return repeat(fill, left) + std::string(s) + repeat(fill, margin - left);
}

std::string ljust(std::string_view s, int64_t width, char32_t fill) {
  const auto len = static_cast<int64_t>(length(s));
  if (len >= width) return std::string(s);
  return std::string(s) + repeat(fill, width - len);
}

std::string rjust(std::string_view s, int64_t width, char32_t fill) {
  const auto len = static_cast<int64_t>(length(s));
  if (len >= width) return std::string(s);
  return repeat(fill, width - len) + std::string(s);
}

std::string zfill(std::string_view s, int64_t width) {
  const auto len = static_cast<int64_t>(length(s));
  if (len >= width) return std::string(s);
  std::string pad(static_cast<size_t>(width - len), '0');
  if (!s.empty() && (s[0] == '+' || s[0] == '-')) return std::string(1, s[0]) + pad + std::string(s.substr(1));
  return pad + std::string(s);
}

// --- slicing --------------------------------------------------------------------------

SliceIndices resolve_slice(size_t size, std::optional<int64_t> start_in, std::optional<int64_t> stop_in,
                           std::optional<int64_t> step_in) {
  SliceIndices r;
  r.step = step_in.value_or(1);
  if (r.step == 0) fail("slice step cannot be zero");
  const auto n = static_cast<int64_t>(size);
  auto clamp = [&](std::optional<int64_t> v, int64_t fallback) {
    if (!v) return fallback;
    int64_t x = *v;
    if (x < 0) {
      x += n;
      if (x < 0) x = r.step < 0 ? -1 : 0;
    } else if (x >= n) {
      x = r.step < 0 ? n - 1 : n;
    }
    return x;
  };
  r.start = clamp(start_in, r.step < 0 ? n - 1 : 0);
  r.stop = clamp(stop_in, r.step < 0 ? -1 : n);
  if (r.step < 0) {
    r.count = r.stop < r.start ? static_cast<size_t>((r.start - r.stop - 1) / (-r.step) + 1) : 0;
  } else {
    r.count = r.start < r.stop ? static_cast<size_t>((r.stop - r.start - 1) / r.step + 1) : 0;
  }
  return r;
}

std::string slice(std::string_view s, const SliceIndices& r) {
  if (is_ascii(s)) {
    std::string out;
    out.reserve(r.count);
    for (size_t k = 0; k < r.count; ++k) out.push_back(s[static_cast<size_t>(r.start + r.step * static_cast<int64_t>(k))]);
    return out;
  }
  const std::u32string text = decode(s);
  std::string out;
  for (size_t k = 0; k < r.count; ++k) append_utf8(out, text[static_cast<size_t>(r.start + r.step * static_cast<int64_t>(k))]);
  return out;
}

// --- formatting -----------------------------------------------------------------------

namespace {

// Unicode's non-printable classes (Cc, Cf, Co, Zl, Zp, Zs other than space), which
// str.__repr__ escapes; unassigned code points are not tracked.
bool is_printable(char32_t c) {
  if (c < 0x20 || c == 0x7F) return false;
  if (c < 0x7F) return true;
  if (c <= 0xA0 || c == 0xAD) return false;
  if (c >= 0x0600 && c <= 0x0605) return false;
  if (c == 0x061C || c == 0x06DD || c == 0x070F || c == 0x180E || c == 0x1680) return false;
  if (c >= 0x2000 && c <= 0x200F) return false;
  if (c >= 0x2028 && c <= 0x202F) return false;
  if (c >= 0x205F && c <= 0x206F) return false;
  if (c == 0x3000 || c == 0xFEFF) return false;
  if (c >= 0xD800 && c <= 0xF8FF) return false;
  if (c >= 0xFDD0 && c <= 0xFDEF) return false;
  if (c >= 0xFFF9 && c <= 0xFFFB) return false;
  if (c == 0xFFFE || c == 0xFFFF) return false;
  if (c >= 0xE0000 && c <= 0xE007F) return false;
  if (c >= 0xF0000) return false;
  return true;
}

void append_hex(std::string& out, char prefix, char32_t c, int digits) {
  char buf[16];
  std::snprintf(buf, sizeof buf, "\\%c%0*x", prefix, digits, static_cast<unsigned>(c));
  out += buf;
}

}  // namespace

std::string repr(std::string_view s) {
  const bool has_single = s.find('\'') != std::string_view::npos;
  const bool has_double = s.find('"') != std::string_view::npos;
  const char quote = (has_single && !has_double) ? '"' : '\'';
  std::string out(1, quote);
  for (char32_t c : decode(s)) {
    if (c == static_cast<char32_t>(quote) || c == '\\') {
      out.push_back('\\');
      out.push_back(static_cast<char>(c));
    } else if (c == '\t') {
      out += "\\t";
    } else if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if (is_printable(c)) {
      append_utf8(out, c);
    } else if (c < 0x100) {
      append_hex(out, 'x', c, 2);
    } else if (c < 0x10000) {
      append_hex(out, 'u', c, 4);
    } else {
      append_hex(out, 'U', c, 8);
    }
  }
  out.push_back(quote);
  return out;
}

std::string format_float(double value) {
  if (std::isnan(value)) return "nan";
  if (std::isinf(value)) return value > 0 ? "inf" : "-inf";
  // Shortest round-trip digits in scientific form, then CPython's layout rule: fixed
  // notation for exponents in [-4, 16), otherwise d.ddde+XX.
  char buf[64];
  const auto result = std::to_chars(buf, buf + sizeof buf, value, std::chars_format::scientific);
  std::string_view sci(buf, static_cast<size_t>(result.ptr - buf));
  std::string out;
  if (!sci.empty() && sci[0] == '-') {
    out.push_back('-');
    sci.remove_prefix(1);
  }
  const size_t e = sci.find('e');
  std::string digits;
  for (char ch : sci.substr(0, e)) {
    if (ch != '.') digits.push_back(ch);
  }
  const int exponent = std::atoi(std::string(sci.substr(e + 1)).c_str());
  if (exponent >= -4 && exponent < 16) {
    if (exponent >= 0) {
      const auto int_len = static_cast<size_t>(exponent) + 1;
      if (digits.size() <= int_len) {
        out += digits + std::string(int_len - digits.size(), '0') + ".0";
      } else {
        out += digits.substr(0, int_len) + "." + digits.substr(int_len);
      }
    } else {
      out += "0." + std::string(static_cast<size_t>(-exponent - 1), '0') + digits;
    }
    return out;
  }
  out.push_back(digits[0]);
  if (digits.size() > 1) out += "." + digits.substr(1);
  char exp_buf[16];
  std::snprintf(exp_buf, sizeof exp_buf, "e%c%02d", exponent < 0 ? '-' : '+', std::abs(exponent));
  out += exp_buf;
  return out;
}

std::string html_escape(std::string_view s) {
  std::string out;
  out.reserve(s.size());
  for (char ch : s) {
    switch (ch) {
      case '&': out += "&amp;"; break;
      case '<': out += "&lt;"; break;
      case '>': out += "&gt;"; break;
      case '"': out += "&#34;"; break;
      case '\'': out += "&#39;"; break;
      default: out.push_back(ch);
    }
  }
  return out;
}

}  // namespace ernie::jinja::pystr
