// Checks jinja2's compiler makes after parsing, and which the parser here makes
// too: which special names a macro body reads (deciding what arguments the macro
// accepts) and whether every filter and test named outside an if-branch exists.
#pragma once

#include "text/jinja/ast.h"

namespace ernie::jinja {

// Sets def.catch_varargs / catch_kwargs / uses_caller from the names its body reads.
void analyze_macro(ast::MacroDef& def);

// Throws ernie::Error ("line L, column C: no filter named 'x'") for unknown filters
// and tests outside if-branches and conditional expressions; inside those, jinja2
// (and this engine) fail only when the expression is evaluated.
void check_filter_and_test_names(const ast::Body& body);

}  // namespace ernie::jinja
