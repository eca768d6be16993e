// Runs a parsed template: jinja2's scoping (a loop iteration, macro call, call or
// filter block, set block and `with` each get a scope of their own; `if` does not),
// loop contexts, macros with defaults, varargs/kwargs and `caller`, break/continue,
// and the render limits. Errors carry the line and column of the failing node.
#pragma once

#include <string>

#include "text/jinja/ast.h"
#include "text/jinja/runtime.h"
#include "text/jinja/value.h"

namespace ernie::jinja {

// `context` must be a dict: its keys are the template's variables.
std::string render_template(const ast::Body& body, const Value& context, const Limits& limits);

}  // namespace ernie::jinja
