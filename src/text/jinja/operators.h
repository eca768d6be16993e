// Python's arithmetic, membership and concatenation on template values: int/float
// promotion, floor division and modulo with Python's signs, `str * int`, list `+`,
// printf-style `str % args`, Markup escaping what is added to it, and TypeErrors (as
// ernie::Error) where Python raises them. 64-bit integers stand in for Python's
// unbounded ones; overflow is an error, not a wrap.
#pragma once

#include <vector>

#include "text/jinja/ast.h"
#include "text/jinja/runtime.h"
#include "text/jinja/value.h"

namespace ernie::jinja {

Value binary_op(Runtime& runtime, ast::BinaryOp op, const Value& left, const Value& right);
Value negate(const Value& v);
Value unary_plus(const Value& v);
// `item in container`
bool contains(const Value& container, const Value& item);
// a ~ b ~ c: str() of each, joined.
std::string concat_strings(Runtime& runtime, const std::vector<Value>& parts);

}  // namespace ernie::jinja
