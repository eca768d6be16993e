// `guided_regex` (and JSON Schema `pattern`): a regular expression as a grammar over
// bytes. The syntax is the common core of Python's `re` and ECMAScript, which is what
// FastDeploy's backends accept: literals, `.` (any character but a newline), classes
// `[a-z]` `[^...]` with `\d \w \s` inside, escapes `\d \D \w \W \s \S \n \r \t \f \v`,
// `\xHH`, `\uHHHH` and escaped punctuation, groups `( )` `(?: )` `(?P<name> )`
// `(?<name> )`, `|`, quantifiers `* + ? {m} {m,} {m,n}` (lazy `*?` etc. match the same
// strings), and `^` / `$` at the very ends. The whole output must match, as with
// re.fullmatch. Features that do not describe a set of strings a grammar can hold are
// refused naming them: backreferences, lookaround, word boundaries, inline flags,
// possessive quantifiers.
#pragma once

#include <string_view>

#include "structured/grammar.h"

namespace ernie::structured {

// Throws ernie::Error naming the unsupported feature or the syntax problem and where.
Grammar compile_regex(std::string_view pattern);

// Adds the regex as a rule of `builder` and returns it. With `json_string`, the rule
// matches the regex's strings as they appear inside a JSON string literal: `"`, `\` and
// control characters as their JSON escapes (JSON Schema `pattern`).
int32_t add_regex_rule(GrammarBuilder& builder, std::string_view pattern, const std::string& name,
                       bool json_string = false);

}  // namespace ernie::structured
