// `obj.name` and `obj[key]` with the rules of jinja2's ImmutableSandboxedEnvironment:
// attribute access falls back to item access and the reverse, a missing key or
// attribute is an undefined value (not an error), methods that would modify a list or
// dict are refused when called, and touching an undefined value raises.
#pragma once

#include <optional>
#include <string_view>

#include "text/jinja/value.h"

namespace ernie::jinja {

Value get_attribute(const Value& object, std::string_view name);
Value get_item(const Value& object, const Value& key);
Value get_slice(const Value& object, const Value& start, const Value& stop, const Value& step);

// A method of a str, list or dict as a callable value; an undefined value that raises
// when called for methods the sandbox refuses (list.append, dict.update, ...);
// nullopt when the type has no such method.
std::optional<Value> find_method(const Value& receiver, std::string_view name);

// What filters' `attribute=` arguments look up: a dotted path ("function.name",
// "0.role"), each part an item lookup, digits as indices.
Value get_path(const Value& object, std::string_view path);

}  // namespace ernie::jinja
