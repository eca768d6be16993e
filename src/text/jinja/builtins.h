// The filters, tests and globals a chat template can use: jinja2's builtins, with
// transformers' tojson (no key sorting, no HTML escaping, ensure_ascii off) in place of
// jinja2's, and transformers' raise_exception and strftime_now globals.
#pragma once

#include <string>
#include <string_view>

#include "text/jinja/runtime.h"
#include "text/jinja/value.h"

namespace ernie::jinja {

bool has_filter(std::string_view name);
Value call_filter(Runtime& runtime, std::string_view name, const Value& input, const CallArgs& args);

bool has_test(std::string_view name);
bool call_test(Runtime& runtime, std::string_view name, const Value& input, const CallArgs& args);

// range, dict, namespace, cycler, joiner, raise_exception, strftime_now; undefined
// for other names.
Value global_value(std::string_view name);

}  // namespace ernie::jinja
