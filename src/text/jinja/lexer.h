// Splits template source into tokens the way jinja2's lexer does with trim_blocks and
// lstrip_blocks on (the transformers chat-template settings): `{%-`/`-%}` whitespace
// control, `+` opt-outs, the newline after a block tag dropped, indentation before a
// block tag dropped, raw blocks, comments, one trailing newline of the source removed,
// and \r\n / \r turned into \n. Whitespace handling decides the exact prompt bytes, so
// this follows jinja2's rules to the letter rather than in spirit.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace ernie::jinja {

enum class TokenType {
  Data,           // template text
  VariableBegin,  // {{
  VariableEnd,    // }}
  BlockBegin,     // {%
  BlockEnd,       // %}
  Name,
  String,    // text holds the decoded value
  Integer,   // int_value
  Float,     // float_value
  Operator,  // text holds the symbol: "+", "//", "(", ...
  Eof,
};

struct Token {
  TokenType type = TokenType::Eof;
  std::string text;
  int64_t int_value = 0;
  double float_value = 0.0;
  int line = 1;
  int column = 1;
};

// Throws ernie::Error ("line L, column C: ...") on characters no token can start with,
// unterminated strings, comments, raw blocks and tags, and unbalanced brackets.
std::vector<Token> tokenize(std::string_view source);

// "line L, column C: message", the prefix every template error carries.
std::string located(int line, int column, std::string_view message);

}  // namespace ernie::jinja
