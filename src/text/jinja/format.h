// Python's two string formatting languages as templates reach them: printf-style
// `"%s: %d" % (a, b)` (also the `format` filter) and `"{}: {:>5}".format(a, b)` (the
// sandbox allows str.format). Conversions, flags, widths and precisions follow
// CPython; what is not implemented raises a clear error instead of guessing.
#pragma once

#include <string>
#include <string_view>

#include "text/jinja/runtime.h"
#include "text/jinja/value.h"

namespace ernie::jinja {

// fmt % args: a tuple supplies positional values, a dict supplies %(name)s values,
// anything else is the single value.
std::string percent_format(Runtime& runtime, std::string_view fmt, const Value& args);

// fmt.format(*args, **kwargs)
std::string brace_format(Runtime& runtime, std::string_view fmt, const CallArgs& args);

// format(value, spec): one value through the format-spec mini-language.
std::string format_with_spec(Runtime& runtime, const Value& value, std::string_view spec);

}  // namespace ernie::jinja
