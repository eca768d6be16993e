// JSON Schema (`response_format: json_schema`, `guided_json`) and `json_object` as
// grammars: the schema is written out as EBNF (structured/ebnf.h) rule by rule, the way
// xgrammar does it, so every output parses as JSON and validates against the schema.
//
// Members are generated in the order the schema declares its properties (hence
// ordered_json). Supported: type (one or a list), properties / required /
// additionalProperties (false
// when absent, as OpenAI's strict mode and xgrammar do, except that an object schema
// declaring no properties at all is any object; true or a schema allow more members
// after the declared ones), items, prefixItems, minItems / maxItems, enum,
// const, anyOf and oneOf (oneOf's exclusivity is not enforced: the output matches at
// least one branch), $ref to #/$defs/... and #/definitions/... (recursion included),
// minLength / maxLength, pattern (structured/regex.h; searched, as JSON Schema does,
// unless anchored with ^ / $), and the formats date, time, date-time, uuid and email.
// Annotations (title, description, default, examples, $schema, $id, $comment, ...) are
// ignored. Any other keyword is refused naming it — never silently ignored.
#pragma once

#include <nlohmann/json.hpp>
#include <string>

#include "structured/grammar.h"

namespace ernie::structured {

// Whitespace characters allowed in one gap between JSON tokens (enough for a newline and
// nine levels of two-space indentation), as xgrammar's max_whitespace_cnt bounds them.
inline constexpr int kMaxJsonWhitespace = 20;

struct JsonGrammarOptions {
  // Whitespace allowed between tokens ([ \n\t]{0,kMaxJsonWhitespace}); off, the output is
  // compact (one space after ':' and ',' as Python's json.dumps writes). FastDeploy's
  // --guided-decoding-disable-any-whitespace turns it off.
  bool any_whitespace = true;
};

// The EBNF text of a schema (for messages and tests); throws ernie::Error naming the
// unsupported keyword or the malformed part and its JSON pointer.
std::string json_schema_to_ebnf(const nlohmann::ordered_json& schema, const JsonGrammarOptions& options = {});
Grammar compile_json_schema(const nlohmann::ordered_json& schema, const JsonGrammarOptions& options = {});
// Any JSON object (`response_format: {"type": "json_object"}`).
Grammar compile_json_object(const JsonGrammarOptions& options = {});

}  // namespace ernie::structured
