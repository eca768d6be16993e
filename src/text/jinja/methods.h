// The Python methods templates call on values: str methods (split, strip, startswith,
// format, ...), dict.items/keys/values/get, and the list methods jinja2 3.1.2's
// ImmutableSandboxedEnvironment allows (it refuses append, extend, insert, remove,
// reverse and sort on lists, and every dict method that modifies the dict).
#pragma once

#include <string_view>

#include "text/jinja/runtime.h"
#include "text/jinja/value.h"

namespace ernie::jinja {

enum class MethodKind { None, Allowed, Refused };

// Whether `receiver`'s type has a method `name`, and whether the sandbox lets it run.
MethodKind method_kind(const Value& receiver, std::string_view name);

Value call_method(Runtime& runtime, const Value& receiver, std::string_view name, const CallArgs& args);

}  // namespace ernie::jinja
