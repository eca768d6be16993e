// Python `str` semantics over UTF-8 strings. Jinja templates are Python expressions, so
// lengths, indices and slices count code points, `split()`/`strip()` use Python's idea
// of whitespace, and printed numbers and reprs must come out exactly as CPython writes
// them, or a rendered prompt differs from the one the model was trained on.
//
// Case mapping covers ASCII, Latin-1, Latin Extended-A and most of -B, Latin Extended Additional,
// Greek, Cyrillic, Armenian and fullwidth Latin; other scripts have no case (true for
// CJK, which is what chat prompts mostly contain besides ASCII).
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace ernie::jinja::pystr {

// --- UTF-8 ---------------------------------------------------------------------------

// Bytes that are not valid UTF-8 decode as U+FFFD one byte at a time, so every input
// has a code point view (Python would have refused it earlier; we never crash on it).
std::u32string decode(std::string_view text);
void append_utf8(std::string& out, char32_t code_point);
std::string encode(std::u32string_view code_points);
size_t length(std::string_view text);  // in code points
bool is_ascii(std::string_view text);

// --- character classes (Python's str.isspace() etc.) ---------------------------------

bool is_space(char32_t c);
bool is_linebreak(char32_t c);  // the boundaries str.splitlines() splits on
bool is_digit(char32_t c);
bool is_alpha(char32_t c);
bool is_word(char32_t c);       // regex \w
bool is_cased(char32_t c);
bool is_upper_char(char32_t c);
bool is_lower_char(char32_t c);
char32_t to_upper(char32_t c);
char32_t to_lower(char32_t c);
char32_t to_title(char32_t c);  // differs from to_upper only for digraphs (ǆ -> ǅ)

// --- str methods ----------------------------------------------------------------------

std::string upper(std::string_view s);
std::string lower(std::string_view s);
std::string title(std::string_view s);       // str.title()
std::string capitalize(std::string_view s);  // str.capitalize()
std::string swapcase(std::string_view s);

// chars: nullopt strips whitespace, otherwise any of the given code points.
std::string strip(std::string_view s, const std::optional<std::string>& chars, bool left, bool right);

// sep: nullopt splits on runs of whitespace (dropping empty pieces); maxsplit < 0 is
// unlimited. Throws on an empty separator, as Python does.
std::vector<std::string> split(std::string_view s, const std::optional<std::string>& sep, int64_t maxsplit);
std::vector<std::string> rsplit(std::string_view s, const std::optional<std::string>& sep, int64_t maxsplit);
std::vector<std::string> splitlines(std::string_view s, bool keepends);

// count < 0 replaces all. An empty `old` inserts `replacement` around every code point.
// Where `needle` first occurs in `hay` at or after byte (or code point) `pos`, like
// string_view::find, or npos; find_last is string_view::rfind (the last occurrence
// starting at or before `pos`). Both take time linear in the text: string_view's
// search compares the whole needle at each position, |hay| x |needle| work for a
// needle like 'aaa...ab', and templates may search text a client sent.
size_t find_text(std::string_view hay, std::string_view needle, size_t pos = 0);
size_t find_text(std::u32string_view hay, std::u32string_view needle, size_t pos = 0);
size_t find_last(std::string_view hay, std::string_view needle, size_t pos = std::string_view::npos);
size_t find_last(std::u32string_view hay, std::u32string_view needle, size_t pos = std::u32string_view::npos);

std::string replace(std::string_view s, std::string_view old, std::string_view replacement, int64_t count);

// Code point index of the first/last occurrence within [start, end) (Python slice
// bounds, negatives from the end), or -1.
int64_t find(std::string_view s, std::string_view sub, std::optional<int64_t> start, std::optional<int64_t> end);
int64_t rfind(std::string_view s, std::string_view sub, std::optional<int64_t> start, std::optional<int64_t> end);
int64_t count(std::string_view s, std::string_view sub, std::optional<int64_t> start, std::optional<int64_t> end);
bool startswith(std::string_view s, std::string_view prefix, std::optional<int64_t> start, std::optional<int64_t> end);
bool endswith(std::string_view s, std::string_view suffix, std::optional<int64_t> start, std::optional<int64_t> end);

// Pads to `width` code points (Python's str.center/ljust/rjust/zfill).
std::string center(std::string_view s, int64_t width, char32_t fill);
std::string ljust(std::string_view s, int64_t width, char32_t fill);
std::string rjust(std::string_view s, int64_t width, char32_t fill);
std::string zfill(std::string_view s, int64_t width);

// --- slicing --------------------------------------------------------------------------

// Python slice bounds resolved against a sequence of `size` elements.
struct SliceIndices {
  int64_t start = 0;
  int64_t stop = 0;
  int64_t step = 1;
  size_t count = 0;  // number of selected elements
};
// Throws on step == 0 ("slice step cannot be zero").
SliceIndices resolve_slice(size_t size, std::optional<int64_t> start, std::optional<int64_t> stop,
                           std::optional<int64_t> step);
std::string slice(std::string_view s, const SliceIndices& indices);

// --- formatting -----------------------------------------------------------------------

// repr() of a str: quotes chosen and characters escaped the way CPython does.
std::string repr(std::string_view s);
// repr()/str() of a float: shortest round-trip digits, CPython's fixed/exponent switch.
std::string format_float(double value);
// HTML escaping of markupsafe.escape: & < > " '.
std::string html_escape(std::string_view s);

}  // namespace ernie::jinja::pystr
