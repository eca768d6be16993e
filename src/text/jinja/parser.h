// Builds the AST from tokens with jinja2's grammar: its statement tags (plus
// loopcontrols' break/continue and transformers' generation block), its operator
// precedence, and its compile-time checks (unknown filters and tests outside
// if-branches, macro signatures, assignment targets).
#pragma once

#include <string_view>

#include "text/jinja/ast.h"

namespace ernie::jinja {

// Throws ernie::Error ("line L, column C: ...") on any syntax error.
ast::Body parse_template(std::string_view source);

}  // namespace ernie::jinja
