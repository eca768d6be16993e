// jinja2's builtin tests: what `x is name(args)` checks, following jinja2/tests.py
// (e.g. `number` accepts booleans, `integer` does not; an undefined value is
// `iterable` and `sequence` because jinja2's Undefined has __iter__ and __len__).
#include <string_view>

#include "text/jinja/args.h"
#include "text/jinja/builtins.h"
#include "text/jinja/operators.h"
#include "text/jinja/pystr.h"
#include "util/error.h"

namespace ernie::jinja {

namespace {

using TestFn = bool (*)(Runtime&, const Value&, const CallArgs&);

Value one_arg(const char* name, const CallArgs& args, const char* param) {
  const BoundArgs a(name, args, {param});
  return a.required(0);
}

void no_args(const char* name, const CallArgs& args) { BoundArgs(name, args, {}); }

bool t_defined(Runtime&, const Value& v, const CallArgs& args) {
  no_args("defined", args);
  return !v.is_undefined();
}
bool t_undefined(Runtime&, const Value& v, const CallArgs& args) {
  no_args("undefined", args);
  return v.is_undefined();
}
bool t_none(Runtime&, const Value& v, const CallArgs& args) {
  no_args("none", args);
  return v.is_none();
}
bool t_boolean(Runtime&, const Value& v, const CallArgs& args) {
  no_args("boolean", args);
  return v.is_bool();
}
bool t_true(Runtime&, const Value& v, const CallArgs& args) {
  no_args("true", args);
  return v.is_bool() && v.as_bool();
}
bool t_false(Runtime&, const Value& v, const CallArgs& args) {
  no_args("false", args);
  return v.is_bool() && !v.as_bool();
}
bool t_integer(Runtime&, const Value& v, const CallArgs& args) {
  no_args("integer", args);
  return v.is_int();
}
bool t_float(Runtime&, const Value& v, const CallArgs& args) {
  no_args("float", args);
  return v.is_float();
}
bool t_number(Runtime&, const Value& v, const CallArgs& args) {
  no_args("number", args);
  return v.is_number();
}
bool t_string(Runtime&, const Value& v, const CallArgs& args) {
  no_args("string", args);
  return v.is_string();
}
bool t_mapping(Runtime&, const Value& v, const CallArgs& args) {
  no_args("mapping", args);
  return v.is_dict();
}
bool t_sequence(Runtime&, const Value& v, const CallArgs& args) {
  no_args("sequence", args);
  return v.is_undefined() || v.is_string() || v.is_list() || v.is_dict();
}
bool t_iterable(Runtime&, const Value& v, const CallArgs& args) {
  no_args("iterable", args);
  return is_iterable(v);
}
bool t_callable(Runtime&, const Value& v, const CallArgs& args) {
  no_args("callable", args);
  return v.is_undefined() || (v.is_object() && v.as_object().callable());
}
bool t_escaped(Runtime&, const Value& v, const CallArgs& args) {
  no_args("escaped", args);
  return v.is_markup();
}
bool t_sameas(Runtime&, const Value& v, const CallArgs& args) {
  return v.same_object(one_arg("sameas", args, "other"));
}
bool t_in(Runtime&, const Value& v, const CallArgs& args) { return contains(one_arg("in", args, "seq"), v); }

bool t_odd(Runtime& runtime, const Value& v, const CallArgs& args) {
  no_args("odd", args);
  return equals(binary_op(runtime, ast::BinaryOp::Mod, v, Value(2)), Value(1));
}
bool t_even(Runtime& runtime, const Value& v, const CallArgs& args) {
  no_args("even", args);
  return equals(binary_op(runtime, ast::BinaryOp::Mod, v, Value(2)), Value(0));
}
bool t_divisibleby(Runtime& runtime, const Value& v, const CallArgs& args) {
  const Value num = one_arg("divisibleby", args, "num");
  return equals(binary_op(runtime, ast::BinaryOp::Mod, v, num), Value(0));
}

bool cased_all(const Value& v, bool upper) {
  bool any_cased = false;
  for (char32_t c : pystr::decode(to_str(v))) {
    if (!pystr::is_cased(c)) continue;
    any_cased = true;
    if (upper ? !pystr::is_upper_char(c) : pystr::is_upper_char(c)) return false;
  }
  return any_cased;
}
bool t_lower(Runtime&, const Value& v, const CallArgs& args) {
  no_args("lower", args);
  return cased_all(v, false);
}
bool t_upper(Runtime&, const Value& v, const CallArgs& args) {
  no_args("upper", args);
  return cased_all(v, true);
}

bool t_filter(Runtime&, const Value& v, const CallArgs& args) {
  no_args("filter", args);
  return v.is_string() && has_filter(v.as_string());
}
bool t_test(Runtime&, const Value& v, const CallArgs& args) {
  no_args("test", args);
  return v.is_string() && has_test(v.as_string());
}

bool t_eq(Runtime&, const Value& v, const CallArgs& args) { return equals(v, one_arg("eq", args, "other")); }
bool t_ne(Runtime&, const Value& v, const CallArgs& args) { return !equals(v, one_arg("ne", args, "other")); }
bool t_gt(Runtime&, const Value& v, const CallArgs& args) { return compare(v, one_arg("gt", args, "other")) > 0; }
bool t_ge(Runtime&, const Value& v, const CallArgs& args) { return compare(v, one_arg("ge", args, "other")) >= 0; }
bool t_lt(Runtime&, const Value& v, const CallArgs& args) { return compare(v, one_arg("lt", args, "other")) < 0; }
bool t_le(Runtime&, const Value& v, const CallArgs& args) { return compare(v, one_arg("le", args, "other")) <= 0; }

struct TestEntry {
  std::string_view name;
  TestFn fn;
};

constexpr TestEntry kTests[] = {
    {"odd", t_odd},           {"even", t_even},         {"divisibleby", t_divisibleby},
    {"defined", t_defined},   {"undefined", t_undefined}, {"filter", t_filter},
    {"test", t_test},         {"none", t_none},         {"boolean", t_boolean},
    {"false", t_false},       {"true", t_true},         {"integer", t_integer},
    {"float", t_float},       {"lower", t_lower},       {"upper", t_upper},
    {"string", t_string},     {"mapping", t_mapping},   {"number", t_number},
    {"sequence", t_sequence}, {"iterable", t_iterable}, {"callable", t_callable},
    {"sameas", t_sameas},     {"escaped", t_escaped},   {"in", t_in},
    {"==", t_eq},             {"eq", t_eq},             {"equalto", t_eq},
    {"!=", t_ne},             {"ne", t_ne},             {">", t_gt},
    {"gt", t_gt},             {"greaterthan", t_gt},    {"ge", t_ge},
    {">=", t_ge},             {"<", t_lt},              {"lt", t_lt},
    {"lessthan", t_lt},       {"<=", t_le},             {"le", t_le},
};

const TestEntry* find_test(std::string_view name) {
  for (const auto& entry : kTests) {
    if (entry.name == name) return &entry;
  }
  return nullptr;
}

}  // namespace

bool has_test(std::string_view name) { return find_test(name) != nullptr; }

bool call_test(Runtime& runtime, std::string_view name, const Value& input, const CallArgs& args) {
  const TestEntry* entry = find_test(name);
  if (!entry) fail("no test named '", name, "'");
  runtime.charge_call(input, args);
  return entry->fn(runtime, input, args);
}

}  // namespace ernie::jinja
