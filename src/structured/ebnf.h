// The EBNF dialect of `guided_grammar` (FastDeploy hands it to xgrammar, whose dialect
// is llama.cpp's GBNF): rules `name ::= expression`, the start rule named `root`;
// sequences, `|`, `( )`, string literals "...", character classes `[a-z]` and `[^...]`
// over Unicode code points, `.` (any character), repetition `*`, `+`, `?`, `{m}`,
// `{m,}`, `{m,n}`, and `#` comments. Escapes: \n \r \t \\ \" \' \[ \] \- \xHH \uHHHH
// \UHHHHHHHH. A rule ends where the next `name ::=` begins.
//
// Characters become their UTF-8 bytes, and a class of code points becomes the byte
// sequences of its ranges, so the grammar judges tokens byte by byte.
#pragma once

#include <cstdint>
#include <functional>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "structured/grammar.h"

namespace ernie::structured {

// Rules the text may use without defining them, each built by a callback (the JSON
// Schema compiler's regex patterns, say); the callback returns the rule it added.
using ExternalRules = std::map<std::string, std::function<int32_t(GrammarBuilder&)>>;

// Throws ernie::Error naming the line and column of the first problem.
Grammar parse_ebnf(std::string_view text, const ExternalRules& external = {});

// Helpers the other constraint compilers share (regex classes, JSON string bodies).
using CodePointRanges = std::vector<std::pair<uint32_t, uint32_t>>;  // inclusive

// Adds to `rule` one alternative per UTF-8 byte-range sequence of the code points
// [first, last] (surrogates excluded).
void add_code_point_range(GrammarBuilder& builder, int32_t rule, uint32_t first, uint32_t last);
// Sorted and merged, or their complement over every code point when `negated`.
CodePointRanges code_point_ranges(CodePointRanges ranges, bool negated);
// One element matching one character of the set: a byte set when it is all ASCII, else a
// rule of the UTF-8 sequences of its ranges.
Element code_point_class(GrammarBuilder& builder, const CodePointRanges& ranges, const std::string& name);

// The UTF-8 encoding of a code point.
std::string utf8_encode(uint32_t code_point);
// The code point of the UTF-8 character at text[pos], advancing pos past it; nullopt when
// the bytes there are not one.
std::optional<uint32_t> read_utf8(std::string_view text, size_t& pos);
// `digits` hex digits at text[pos] as a code point, advancing pos; nullopt when they are
// missing, not hex, or beyond U+10FFFF.
std::optional<uint32_t> read_hex_code_point(std::string_view text, size_t& pos, int digits);

}  // namespace ernie::structured
