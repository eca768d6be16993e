// jinja2's builtin filters (the `|` operator), each following jinja2 3.1's
// implementation: what it accepts, what it returns (a list, or a one-shot generator
// where jinja2 returns one), and where it raises. tojson is transformers' version.
#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdio>
#include <limits>

#include "text/jinja/access.h"
#include "text/jinja/args.h"
#include "text/jinja/builtins.h"
#include "text/jinja/format.h"
#include "text/jinja/json_convert.h"
#include "text/jinja/operators.h"
#include "text/jinja/pystr.h"
#include "util/error.h"

namespace ernie::jinja {

namespace {

using FilterFn = Value (*)(Runtime&, const Value&, const CallArgs&);

// --- helpers --------------------------------------------------------------------------

Value lower_if_string(const Value& v) { return v.is_string() ? Value(pystr::lower(v.as_string())) : v; }

// jinja2's make_attrgetter: each dotted part an item lookup; `fallback` replaces
// undefined results.
Value lookup_attribute(const Value& item, const Value& attribute, const Value* fallback) {
  if (attribute.is_none() || attribute.is_undefined()) return item;
  if (attribute.is_integral()) {
    Value r = get_item(item, attribute);
    return (fallback && r.is_undefined()) ? *fallback : r;
  }
  const std::string& path = expect_string(attribute, "attribute");
  Value current = item;
  size_t pos = 0;
  while (true) {
    const size_t dot = path.find('.', pos);
    const std::string part = path.substr(pos, dot == std::string::npos ? std::string::npos : dot - pos);
    current = get_path(current, part);
    if (fallback && current.is_undefined()) current = *fallback;
    if (dot == std::string::npos) return current;
    pos = dot + 1;
  }
}

// Python's sorted() with a key and a stable order; compare() raises on mixed types.
void sort_by_keys(std::vector<std::pair<Value, Value>>& keyed, bool reverse) {
  std::stable_sort(keyed.begin(), keyed.end(), [reverse](const auto& a, const auto& b) {
    return reverse ? compare(b.first, a.first) < 0 : compare(a.first, b.first) < 0;
  });
}

Value generator(std::vector<Value> items) { return Value::iterator(std::move(items), "generator"); }

std::vector<Value> items_of(Runtime& runtime, const Value& v) {
  std::vector<Value> items = iterate(v);
  runtime.step(items.size());
  return items;
}

// Python's int(str, base).
std::optional<int64_t> parse_python_int(std::string_view text, int64_t base) {
  std::string s = pystr::strip(text, std::nullopt, true, true);
  size_t i = 0;
  bool negative = false;
  if (i < s.size() && (s[i] == '+' || s[i] == '-')) negative = s[i++] == '-';
  auto has_prefix = [&](char p) {
    return i + 1 < s.size() && s[i] == '0' && (s[i + 1] | 0x20) == p;
  };
  if (base == 0) {
    base = has_prefix('x') ? 16 : has_prefix('o') ? 8 : has_prefix('b') ? 2 : 10;
  }
  if ((base == 16 && has_prefix('x')) || (base == 8 && has_prefix('o')) || (base == 2 && has_prefix('b'))) {
    i += 2;
    if (i < s.size() && s[i] == '_') ++i;
  }
  if (base < 2 || base > 36 || i >= s.size()) return std::nullopt;
  __extension__ using Wide = __int128;
  Wide value = 0;
  bool last_underscore = true;
  for (; i < s.size(); ++i) {
    const char c = s[i];
    if (c == '_') {
      if (last_underscore) return std::nullopt;
      last_underscore = true;
      continue;
    }
    int digit = -1;
    if (c >= '0' && c <= '9') digit = c - '0';
    else if ((c | 0x20) >= 'a' && (c | 0x20) <= 'z') digit = (c | 0x20) - 'a' + 10;
    if (digit < 0 || digit >= base) return std::nullopt;
    value = value * base + digit;
    if (value > Wide(std::numeric_limits<int64_t>::max()) + 1) fail("integer overflow: this engine's integers are 64-bit");
    last_underscore = false;
  }
  if (last_underscore) return std::nullopt;
  if (negative) value = -value;
  if (value > std::numeric_limits<int64_t>::max()) fail("integer overflow: this engine's integers are 64-bit");
  return static_cast<int64_t>(value);
}

// Python's float(str).
std::optional<double> parse_python_float(std::string_view text) {
  const std::string s = pystr::strip(text, std::nullopt, true, true);
  std::string lowered = pystr::lower(s);
  std::string_view body = lowered;
  bool negative = false;
  if (!body.empty() && (body[0] == '+' || body[0] == '-')) {
    negative = body[0] == '-';
    body.remove_prefix(1);
  }
  if (body == "inf" || body == "infinity") return negative ? -HUGE_VAL : HUGE_VAL;
  if (body == "nan") return std::nan("");
  std::string digits;
  bool seen_digit = false;
  bool seen_dot = false;
  bool seen_exp = false;
  char prev = 0;
  for (size_t i = 0; i < body.size(); ++i) {
    const char c = body[i];
    if (c >= '0' && c <= '9') {
      seen_digit = true;
    } else if (c == '_') {
      if (!(prev >= '0' && prev <= '9') || i + 1 >= body.size() || !(body[i + 1] >= '0' && body[i + 1] <= '9')) return std::nullopt;
      prev = c;
      continue;
    } else if (c == '.') {
      if (seen_dot || seen_exp) return std::nullopt;
      seen_dot = true;
    } else if (c == 'e') {
      if (seen_exp || !seen_digit) return std::nullopt;
      seen_exp = true;
      seen_digit = false;
    } else if (c == '+' || c == '-') {
      if (prev != 'e') return std::nullopt;
    } else {
      return std::nullopt;
    }
    digits.push_back(c);
    prev = c;
  }
  if (!seen_digit) return std::nullopt;
  double value = 0;
  const auto result = std::from_chars(digits.data(), digits.data() + digits.size(), value);
  if (result.ec == std::errc::result_out_of_range) {
    // Python gives inf or 0.0 for literals out of range instead of failing.
    const size_t e = digits.find('e');
    value = (e != std::string::npos && digits.size() > e + 1 && digits[e + 1] == '-') ? 0.0 : HUGE_VAL;
  } else if (result.ptr != digits.data() + digits.size()) {
    return std::nullopt;
  }
  return negative ? -value : value;
}

// --- filters --------------------------------------------------------------------------

Value f_abs(Runtime&, const Value& v, const CallArgs& args) {
  BoundArgs("abs", args, {});
  if (v.is_integral()) {
    if (v.as_int() == std::numeric_limits<int64_t>::min()) fail("integer overflow: this engine's integers are 64-bit");
    return Value(std::abs(v.as_int()));
  }
  if (v.is_float()) return Value(std::fabs(v.as_double()));
  fail("bad operand type for abs(): '", type_name(v), "'");
}

Value f_attr(Runtime&, const Value& v, const CallArgs& args) {
  const BoundArgs a("attr", args, {"name"});
  const std::string& name = expect_string(a.required(0), "attr() name");
  if (v.is_undefined()) fail_undefined(v);
  if (v.is_object()) return v.as_object().attribute(name);
  if (v.is_list() && v.as_list().kind == List::Kind::GroupTuple) return get_attribute(v, name);
  if (auto method = find_method(v, name)) return *method;
  return Value::undefined(str_cat("'", type_name(v), " object' has no attribute '", name, "'"));
}

Value f_batch(Runtime& runtime, const Value& v, const CallArgs& args) {
  const BoundArgs a("batch", args, {"linecount", "fill_with"});
  const int64_t linecount = expect_int(a.required(0), "batch() linecount");
  const Value fill = a.get_or(1, Value(nullptr));
  std::vector<Value> batches;
  std::vector<Value> current;
  for (Value& item : items_of(runtime, v)) {
    if (static_cast<int64_t>(current.size()) == linecount) batches.push_back(Value::list(std::exchange(current, {})));
    current.push_back(std::move(item));
  }
  if (!current.empty()) {
    if (!fill.is_none()) {
      while (static_cast<int64_t>(current.size()) < linecount) current.push_back(fill);
    }
    batches.push_back(Value::list(std::move(current)));
  }
  return generator(std::move(batches));
}

Value f_capitalize(Runtime&, const Value& v, const CallArgs& args) {
  BoundArgs("capitalize", args, {});
  return Value(pystr::capitalize(to_str(v)));
}

Value f_center(Runtime& runtime, const Value& v, const CallArgs& args) {
  const BoundArgs a("center", args, {"width"});
  const int64_t width = a.get_int(0, 80);
  runtime.check_string(static_cast<size_t>(std::max<int64_t>(width, 0)));
  return Value(pystr::center(to_str(v), width, ' '));
}

Value f_default(Runtime&, const Value& v, const CallArgs& args) {
  const BoundArgs a("default", args, {"default_value", "boolean"});
  if (v.is_undefined() || (a.get_truthy(1, false) && !truthy(v))) return a.get_or(0, Value(""));
  return v;
}

Value f_dictsort(Runtime&, const Value& v, const CallArgs& args) {
  const BoundArgs a("dictsort", args, {"case_sensitive", "by", "reverse"});
  if (v.is_undefined()) fail_undefined(v);
  if (!v.is_dict()) fail("dictsort expects a dict, got '", type_name(v), "'");
  const bool case_sensitive = a.get_truthy(0, false);
  const std::string by = a.get_string(1).value_or("key");
  if (by != "key" && by != "value") fail("You can only sort by either \"key\" or \"value\"");
  std::vector<std::pair<Value, Value>> keyed;
  for (const auto& [key, value] : v.as_dict().entries()) {
    Value sort_key = by == "key" ? Value(key) : value;
    if (!case_sensitive) sort_key = lower_if_string(sort_key);
    keyed.emplace_back(std::move(sort_key), Value::tuple({Value(key), value}));
  }
  sort_by_keys(keyed, a.get_truthy(2, false));
  std::vector<Value> out;
  for (auto& kv : keyed) out.push_back(std::move(kv.second));
  return Value::list(std::move(out));
}

Value f_escape(Runtime&, const Value& v, const CallArgs& args) {
  BoundArgs("escape", args, {});
  if (v.is_markup()) return v;
  return Value::markup(pystr::html_escape(to_str(v)));
}

Value f_forceescape(Runtime&, const Value& v, const CallArgs& args) {
  BoundArgs("forceescape", args, {});
  return Value::markup(pystr::html_escape(to_str(v)));
}

Value f_filesizeformat(Runtime&, const Value& v, const CallArgs& args) {
  const BoundArgs a("filesizeformat", args, {"binary"});
  const bool binary = a.get_truthy(0, false);
  double bytes = 0;
  if (v.is_number()) {
    bytes = v.as_double();
  } else if (v.is_string()) {
    const auto parsed = parse_python_float(v.as_string());
    if (!parsed) fail("could not convert string to float: ", repr(v));
    bytes = *parsed;
  } else {
    if (v.is_undefined()) fail_undefined(v);
    fail("float() argument must be a string or a number, not '", type_name(v), "'");
  }
  const double base = binary ? 1024 : 1000;
  static const char* const kDecimal[] = {"kB", "MB", "GB", "TB", "PB", "EB", "ZB", "YB"};
  static const char* const kBinary[] = {"KiB", "MiB", "GiB", "TiB", "PiB", "EiB", "ZiB", "YiB"};
  if (bytes == 1) return Value("1 Byte");
  if (bytes < base) return Value(str_cat(static_cast<int64_t>(bytes), " Bytes"));
  double unit = base;
  const char* prefix = "";
  for (int i = 0; i < 8; ++i) {
    unit = std::pow(base, i + 2);
    prefix = binary ? kBinary[i] : kDecimal[i];
    if (bytes < unit) break;
  }
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.1f %s", base * bytes / unit, prefix);
  return Value(buf);
}

Value f_first(Runtime&, const Value& v, const CallArgs& args) {
  BoundArgs("first", args, {});
  if (v.is_iterator()) {
    IteratorState& it = v.as_iterator();
    if (it.next < it.items.size()) return it.items[it.next++];
  } else if (v.is_list()) {
    if (!v.as_list().items.empty()) return v.as_list().items.front();
  } else {
    std::vector<Value> items = iterate(v);
    if (!items.empty()) return items.front();
  }
  return Value::undefined("No first item, sequence was empty.");
}

Value f_last(Runtime&, const Value& v, const CallArgs& args) {
  BoundArgs("last", args, {});
  if (v.is_iterator() || v.is_object() || v.is_none() || v.is_number()) {
    fail("'", type_name(v), "' object is not reversible");
  }
  std::vector<Value> items = v.is_list() ? v.as_list().items : iterate(v);
  if (items.empty()) return Value::undefined("No last item, sequence was empty.");
  return items.back();
}

Value f_float(Runtime&, const Value& v, const CallArgs& args) {
  const BoundArgs a("float", args, {"default"});
  const Value fallback = a.get_or(0, Value(0.0));
  if (v.is_undefined()) fail_undefined(v);
  if (v.is_number()) return Value(v.as_double());
  if (v.is_string()) {
    if (auto parsed = parse_python_float(v.as_string())) return Value(*parsed);
  }
  return fallback;
}

Value f_format(Runtime& runtime, const Value& v, const CallArgs& args) {
  if (!args.positional.empty() && !args.keyword.empty()) {
    fail("can't handle positional and keyword arguments at the same time");
  }
  Value values;
  if (!args.keyword.empty()) {
    auto dict = std::make_shared<Dict>();
    for (const auto& [k, val] : args.keyword) dict->set(k, val);
    values = Value(std::move(dict));
  } else {
    values = Value::tuple(args.positional);
  }
  return Value(percent_format(runtime, to_str(v), values));
}

Value f_groupby(Runtime& runtime, const Value& v, const CallArgs& args) {
  const BoundArgs a("groupby", args, {"attribute", "default", "case_sensitive"});
  const Value& attribute = a.required(0);
  const Value fallback = a.get_or(1, Value(nullptr));
  const Value* fallback_ptr = fallback.is_none() ? nullptr : &fallback;
  const bool case_sensitive = a.get_truthy(2, false);
  std::vector<std::pair<Value, Value>> keyed;
  for (Value& item : items_of(runtime, v)) {
    Value key = lookup_attribute(item, attribute, fallback_ptr);
    if (!case_sensitive) key = lower_if_string(key);
    keyed.emplace_back(std::move(key), std::move(item));
  }
  sort_by_keys(keyed, false);
  std::vector<Value> groups;
  size_t i = 0;
  while (i < keyed.size()) {
    size_t j = i + 1;
    while (j < keyed.size() && equals(keyed[j].first, keyed[i].first)) ++j;
    std::vector<Value> members;
    for (size_t k = i; k < j; ++k) members.push_back(keyed[k].second);
    Value grouper = case_sensitive ? keyed[i].first : lookup_attribute(members.front(), attribute, fallback_ptr);
    auto group = std::make_shared<List>();
    group->kind = List::Kind::GroupTuple;
    group->items = {std::move(grouper), Value::list(std::move(members))};
    group->depth = container_depth(group->items);
    groups.emplace_back(std::move(group));
    i = j;
  }
  return Value::list(std::move(groups));
}

Value f_indent(Runtime& runtime, const Value& v, const CallArgs& args) {
  const BoundArgs a("indent", args, {"width", "first", "blank"});
  if (v.is_undefined()) fail_undefined(v);
  if (!v.is_string()) fail("unsupported operand type(s) for +=: '", type_name(v), "' and 'str'");
  std::string indention;
  if (a.has(0) && a.get(0).is_string()) {
    indention = a.get(0).as_string();
  } else {
    const int64_t width = a.get_int(0, 4);
    runtime.check_string(static_cast<size_t>(std::max<int64_t>(width, 0)));
    indention = std::string(static_cast<size_t>(std::max<int64_t>(width, 0)), ' ');
  }
  const std::vector<std::string> lines = pystr::splitlines(v.as_string() + "\n", false);
  runtime.check_string(v.as_string().size() + lines.size() * (indention.size() + 1));
  std::string out;
  if (a.get_truthy(2, false)) {
    for (size_t i = 0; i < lines.size(); ++i) {
      if (i > 0) out += "\n" + indention;
      out += lines[i];
    }
  } else {
    out = lines.empty() ? std::string() : lines[0];
    for (size_t i = 1; i < lines.size(); ++i) {
      out += "\n";
      if (!lines[i].empty()) out += indention;
      out += lines[i];
    }
  }
  if (a.get_truthy(1, false)) out = indention + out;
  return Value(std::move(out));
}

Value f_int(Runtime&, const Value& v, const CallArgs& args) {
  const BoundArgs a("int", args, {"default", "base"});
  const Value fallback = a.get_or(0, Value(int64_t{0}));
  const int64_t base = a.get_int(1, 10);
  auto from_double = [&](double f) -> Value {
    if (std::isnan(f)) return fallback;
    if (std::isinf(f)) fail("cannot convert float infinity to integer");
    if (std::fabs(f) >= 9.223372036854775807e18) fail("integer overflow: this engine's integers are 64-bit");
    return Value(static_cast<int64_t>(f));
  };
  if (v.is_undefined()) fail_undefined(v);
  if (v.is_integral()) return Value(v.as_int());
  if (v.is_float()) return from_double(v.as_double());
  if (v.is_string()) {
    if (auto parsed = parse_python_int(v.as_string(), base)) return Value(*parsed);
    if (auto f = parse_python_float(v.as_string())) return from_double(*f);
  }
  return fallback;
}

Value f_items(Runtime&, const Value& v, const CallArgs& args) {
  BoundArgs("items", args, {});
  if (v.is_undefined()) return generator({});
  if (!v.is_dict()) fail("Can only get item pairs from a mapping.");
  std::vector<Value> pairs;
  for (const auto& [k, val] : v.as_dict().entries()) pairs.push_back(Value::tuple({Value(k), val}));
  return generator(std::move(pairs));
}

Value f_join(Runtime& runtime, const Value& v, const CallArgs& args) {
  const BoundArgs a("join", args, {"d", "attribute"});
  const std::string separator = a.has(0) ? to_str(a.get(0)) : std::string();
  std::string out;
  bool first = true;
  for (const Value& item : items_of(runtime, v)) {
    if (!first) out += separator;
    first = false;
    out += to_str(a.has(1) ? lookup_attribute(item, a.get(1), nullptr) : item);
    runtime.check_string(out.size());
  }
  runtime.charge_bytes(out.size());
  return Value(std::move(out));
}

Value f_length(Runtime&, const Value& v, const CallArgs& args) {
  BoundArgs("length", args, {});
  const auto n = length(v);
  if (!n) fail("object of type '", type_name(v), "' has no len()");
  return Value(static_cast<int64_t>(*n));
}

Value f_list(Runtime& runtime, const Value& v, const CallArgs& args) {
  BoundArgs("list", args, {});
  return Value::list(items_of(runtime, v));
}

Value f_lower(Runtime&, const Value& v, const CallArgs& args) {
  BoundArgs("lower", args, {});
  return Value(pystr::lower(to_str(v)));
}

Value f_upper(Runtime&, const Value& v, const CallArgs& args) {
  BoundArgs("upper", args, {});
  return Value(pystr::upper(to_str(v)));
}

Value f_map(Runtime& runtime, const Value& v, const CallArgs& args) {
  if (!truthy(v)) return generator({});
  std::vector<Value> items = items_of(runtime, v);
  std::vector<Value> out;
  out.reserve(items.size());
  if (args.positional.empty() && std::any_of(args.keyword.begin(), args.keyword.end(), [](const auto& kv) { return kv.first == "attribute"; })) {
    const BoundArgs a("map", args, {"attribute", "default"});
    const Value fallback = a.get_or(1, Value(nullptr));
    for (const Value& item : items) out.push_back(lookup_attribute(item, a.get(0), fallback.is_none() ? nullptr : &fallback));
    return generator(std::move(out));
  }
  if (args.positional.empty()) fail("map requires a filter argument");
  const std::string& name = expect_string(args.positional[0], "map() filter name");
  CallArgs rest;
  rest.positional.assign(args.positional.begin() + 1, args.positional.end());
  rest.keyword = args.keyword;
  for (const Value& item : items) out.push_back(call_filter(runtime, name, item, rest));
  return generator(std::move(out));
}

Value min_or_max(Runtime& runtime, const Value& v, const CallArgs& args, bool want_max, const char* name) {
  const BoundArgs a(name, args, {"case_sensitive", "attribute"});
  const bool case_sensitive = a.get_truthy(0, false);
  std::vector<Value> items = items_of(runtime, v);
  if (items.empty()) return Value::undefined("No aggregated item, sequence was empty.");
  auto key_of = [&](const Value& item) {
    Value key = a.has(1) ? lookup_attribute(item, a.get(1), nullptr) : item;
    return case_sensitive ? key : lower_if_string(key);
  };
  size_t best = 0;
  Value best_key = key_of(items[0]);
  for (size_t i = 1; i < items.size(); ++i) {
    Value key = key_of(items[i]);
    const int c = compare(key, best_key);
    if (want_max ? c > 0 : c < 0) {
      best = i;
      best_key = std::move(key);
    }
  }
  return items[best];
}

Value f_max(Runtime& runtime, const Value& v, const CallArgs& args) { return min_or_max(runtime, v, args, true, "max"); }
Value f_min(Runtime& runtime, const Value& v, const CallArgs& args) { return min_or_max(runtime, v, args, false, "min"); }

// select/reject/selectattr/rejectattr share jinja2's select_or_reject.
Value select_or_reject(Runtime& runtime, const Value& v, const CallArgs& args, bool keep_matches, bool lookup_attr) {
  if (!truthy(v)) return generator({});
  size_t offset = 0;
  Value attribute;
  if (lookup_attr) {
    if (args.positional.empty()) fail("Missing parameter for attribute name");
    attribute = args.positional[0];
    offset = 1;
  }
  const bool has_test = args.positional.size() > offset;
  std::string test_name;
  CallArgs test_args;
  if (has_test) {
    test_name = expect_string(args.positional[offset], "test name");
    test_args.positional.assign(args.positional.begin() + static_cast<std::ptrdiff_t>(offset) + 1, args.positional.end());
    test_args.keyword = args.keyword;
  }
  std::vector<Value> out;
  for (Value& item : items_of(runtime, v)) {
    const Value subject = lookup_attr ? lookup_attribute(item, attribute, nullptr) : item;
    const bool match = has_test ? call_test(runtime, test_name, subject, test_args) : truthy(subject);
    if (match == keep_matches) out.push_back(std::move(item));
  }
  return generator(std::move(out));
}

Value f_select(Runtime& rt, const Value& v, const CallArgs& args) { return select_or_reject(rt, v, args, true, false); }
Value f_reject(Runtime& rt, const Value& v, const CallArgs& args) { return select_or_reject(rt, v, args, false, false); }
Value f_selectattr(Runtime& rt, const Value& v, const CallArgs& args) { return select_or_reject(rt, v, args, true, true); }
Value f_rejectattr(Runtime& rt, const Value& v, const CallArgs& args) { return select_or_reject(rt, v, args, false, true); }

Value f_replace(Runtime& runtime, const Value& v, const CallArgs& args) {
  const BoundArgs a("replace", args, {"old", "new", "count"});
  const std::string s = to_str(v);
  const std::string old = to_str(a.required(0));
  const std::string replacement = to_str(a.required(1));
  const int64_t count = (a.has(2) && !a.get(2).is_none()) ? a.get_int(2, -1) : -1;
  const int64_t hits = old.empty() ? static_cast<int64_t>(pystr::length(s)) + 1 : pystr::count(s, old, std::nullopt, std::nullopt);
  const int64_t n = count < 0 ? hits : std::min(count, hits);
  if (replacement.size() > old.size()) runtime.check_string(s.size() + static_cast<size_t>(n) * (replacement.size() - old.size()));
  return Value(pystr::replace(s, old, replacement, count));
}

Value f_reverse(Runtime& runtime, const Value& v, const CallArgs& args) {
  BoundArgs("reverse", args, {});
  if (v.is_string()) {
    std::u32string cps = pystr::decode(v.as_string());
    std::reverse(cps.begin(), cps.end());
    return Value(pystr::encode(cps));
  }
  if (v.is_iterator()) {
    std::vector<Value> items = items_of(runtime, v);
    std::reverse(items.begin(), items.end());
    return Value::list(std::move(items));  // reversed() refuses generators; jinja2 falls back to a list
  }
  if (v.is_list() || v.is_dict() || v.is_undefined()) {
    std::vector<Value> items = items_of(runtime, v);
    std::reverse(items.begin(), items.end());
    const char* kind = v.is_dict() ? "dict_reversekeyiterator" : (v.is_list() && !v.as_list().is_tuple()) ? "list_reverseiterator" : "reversed";
    return Value::iterator(std::move(items), kind);
  }
  fail("argument must be iterable");
}

double round_half_even_digits(double x, int64_t digits) {
  if (!std::isfinite(x) || x == 0.0) return x;
  if (digits > 323) return x;
  if (digits >= 0) {
    // printf rounds the exact binary value half-to-even, as CPython's round() does.
    const int n = std::snprintf(nullptr, 0, "%.*f", static_cast<int>(digits), x);
    std::string buf(static_cast<size_t>(n) + 1, '\0');
    std::snprintf(buf.data(), buf.size(), "%.*f", static_cast<int>(digits), x);
    double out = 0;
    std::from_chars(buf.data(), buf.data() + n, out);
    return out;
  }
  if (digits < -308) return std::copysign(0.0, x);
  const double scale = std::pow(10.0, static_cast<double>(-digits));
  return std::nearbyint(x / scale) * scale;
}

Value f_round(Runtime&, const Value& v, const CallArgs& args) {
  const BoundArgs a("round", args, {"precision", "method"});
  const int64_t precision = a.get_int(0, 0);
  const std::string method = a.get_string(1).value_or("common");
  if (method != "common" && method != "ceil" && method != "floor") fail("method must be common, ceil or floor");
  if (v.is_undefined()) fail_undefined(v);
  if (!v.is_number()) fail("type ", type_name(v), " doesn't define __round__ method");
  if (method == "common") {
    if (v.is_integral()) {
      if (precision >= 0) return Value(v.as_int());
      return Value(static_cast<int64_t>(round_half_even_digits(static_cast<double>(v.as_int()), precision)));
    }
    return Value(round_half_even_digits(v.as_double(), precision));
  }
  const double scale = std::pow(10.0, static_cast<double>(precision));
  const double scaled = v.as_double() * scale;
  return Value((method == "ceil" ? std::ceil(scaled) : std::floor(scaled)) / scale);
}

Value f_safe(Runtime&, const Value& v, const CallArgs& args) {
  BoundArgs("safe", args, {});
  return v.is_markup() ? v : Value::markup(to_str(v));
}

Value f_slice(Runtime& runtime, const Value& v, const CallArgs& args) {
  const BoundArgs a("slice", args, {"slices", "fill_with"});
  const int64_t slices = expect_int(a.required(0), "slice() slices");
  if (slices == 0) fail("integer division or modulo by zero");
  const Value fill = a.get_or(1, Value(nullptr));
  const std::vector<Value> seq = items_of(runtime, v);
  const auto length_all = static_cast<int64_t>(seq.size());
  const int64_t per = length_all / slices;
  const int64_t extra = length_all % slices;
  int64_t offset = 0;
  std::vector<Value> out;
  for (int64_t n = 0; n < slices; ++n) {
    runtime.step();
    const int64_t start = offset + n * per;
    if (n < extra) ++offset;
    const int64_t end = offset + (n + 1) * per;
    std::vector<Value> part;
    for (int64_t i = std::max<int64_t>(start, 0); i < std::min(end, length_all); ++i) part.push_back(seq[static_cast<size_t>(i)]);
    if (!fill.is_none() && n >= extra) part.push_back(fill);
    out.push_back(Value::list(std::move(part)));
  }
  return generator(std::move(out));
}

Value f_sort(Runtime& runtime, const Value& v, const CallArgs& args) {
  const BoundArgs a("sort", args, {"reverse", "case_sensitive", "attribute"});
  const bool reverse = a.get_truthy(0, false);
  const bool case_sensitive = a.get_truthy(1, false);
  std::vector<Value> attributes;
  if (a.has(2) && a.get(2).is_string()) {
    for (auto& part : pystr::split(a.get(2).as_string(), std::string(","), -1)) attributes.emplace_back(std::move(part));
  } else if (a.has(2) && !a.get(2).is_none()) {
    attributes.push_back(a.get(2));
  }
  std::vector<std::pair<Value, Value>> keyed;
  for (Value& item : items_of(runtime, v)) {
    std::vector<Value> key;
    if (attributes.empty()) {
      key.push_back(case_sensitive ? item : lower_if_string(item));
    } else {
      for (const Value& attribute : attributes) {
        Value part = lookup_attribute(item, attribute, nullptr);
        key.push_back(case_sensitive ? part : lower_if_string(part));
      }
    }
    keyed.emplace_back(Value::list(std::move(key)), std::move(item));
  }
  sort_by_keys(keyed, reverse);
  std::vector<Value> out;
  for (auto& kv : keyed) out.push_back(std::move(kv.second));
  return Value::list(std::move(out));
}

Value f_string(Runtime&, const Value& v, const CallArgs& args) {
  BoundArgs("string", args, {});
  return v.is_string() ? v : Value(to_str(v));
}

Value f_sum(Runtime& runtime, const Value& v, const CallArgs& args) {
  const BoundArgs a("sum", args, {"attribute", "start"});
  Value total = a.get_or(1, Value(int64_t{0}));
  if (total.is_string()) fail("sum() can't sum strings [use ''.join(seq) instead]");
  for (const Value& item : items_of(runtime, v)) {
    total = binary_op(runtime, ast::BinaryOp::Add, total, a.has(0) ? lookup_attribute(item, a.get(0), nullptr) : item);
  }
  return total;
}

Value f_title(Runtime&, const Value& v, const CallArgs& args) {
  BoundArgs("title", args, {});
  // jinja2's own title(): words start after '-', whitespace and opening brackets.
  std::string out;
  bool word_start = true;
  for (char32_t c : pystr::decode(to_str(v))) {
    const bool separator = c == '-' || c == '(' || c == '{' || c == '[' || c == '<' || pystr::is_space(c);
    if (separator) {
      pystr::append_utf8(out, c);
      word_start = true;
    } else {
      pystr::append_utf8(out, word_start ? pystr::to_upper(c) : pystr::to_lower(c));
      word_start = false;
    }
  }
  return Value(std::move(out));
}

// transformers' tojson: json.dumps(x, ensure_ascii=False, indent=None,
// separators=None, sort_keys=False), keyword for keyword.
Value f_tojson(Runtime& runtime, const Value& v, const CallArgs& args) {
  const BoundArgs a("tojson", args, {"ensure_ascii", "indent", "separators", "sort_keys"});
  JsonDumpOptions options;
  options.ensure_ascii = a.get_truthy(0, false);
  if (a.has(1) && !a.get(1).is_none()) {
    const Value& indent = a.get(1);
    if (indent.is_string()) {
      options.indent = indent.as_string();
    } else {
      const int64_t n = expect_int(indent, "tojson() indent");
      runtime.check_string(static_cast<size_t>(std::max<int64_t>(n, 0)));
      options.indent = std::string(static_cast<size_t>(std::max<int64_t>(n, 0)), ' ');
    }
  }
  if (a.has(2) && !a.get(2).is_none()) {
    const std::vector<Value> parts = iterate(a.get(2));
    if (parts.size() != 2) fail("tojson() separators must be an (item_separator, key_separator) pair");
    options.item_separator = expect_string(parts[0], "tojson() item separator");
    options.key_separator = expect_string(parts[1], "tojson() key separator");
  }
  options.sort_keys = a.get_truthy(3, false);
  std::string out = dump_json(v, options);
  runtime.check_string(out.size());
  runtime.charge_bytes(out.size());
  return Value(std::move(out));
}

Value f_trim(Runtime&, const Value& v, const CallArgs& args) {
  const BoundArgs a("trim", args, {"chars"});
  return Value(pystr::strip(to_str(v), a.get_string(0), true, true));
}

Value f_truncate(Runtime&, const Value& v, const CallArgs& args) {
  const BoundArgs a("truncate", args, {"length", "killwords", "end", "leeway"});
  const int64_t max_length = a.get_int(0, 255);
  const bool killwords = a.get_truthy(1, false);
  const std::string end = a.get_string(2).value_or("...");
  const int64_t leeway = a.has(3) && !a.get(3).is_none() ? a.get_int(3, 5) : 5;
  const auto end_length = static_cast<int64_t>(pystr::length(end));
  if (max_length < end_length) fail("expected length >= ", end_length, ", got ", max_length);
  if (leeway < 0) fail("expected leeway >= 0, got ", leeway);
  if (v.is_undefined()) return v;
  if (!v.is_string()) fail("object of type '", type_name(v), "' has no len()");
  const std::u32string s = pystr::decode(v.as_string());
  if (static_cast<int64_t>(s.size()) <= max_length + leeway) return v;
  const std::u32string head = s.substr(0, static_cast<size_t>(max_length - end_length));
  if (killwords) return Value(pystr::encode(head) + end);
  const size_t space = head.rfind(U' ');
  return Value(pystr::encode(space == std::u32string::npos ? head : head.substr(0, space)) + end);
}

Value f_unique(Runtime& runtime, const Value& v, const CallArgs& args) {
  const BoundArgs a("unique", args, {"case_sensitive", "attribute"});
  const bool case_sensitive = a.get_truthy(0, false);
  std::vector<Value> seen;
  std::vector<Value> out;
  for (Value& item : items_of(runtime, v)) {
    Value key = a.has(1) ? lookup_attribute(item, a.get(1), nullptr) : item;
    if (!case_sensitive) key = lower_if_string(key);
    if ((key.is_list() && !key.as_list().is_tuple()) || key.is_dict()) fail("unhashable type: '", type_name(key), "'");
    runtime.step(seen.size());
    if (std::none_of(seen.begin(), seen.end(), [&](const Value& s) { return equals(s, key); })) {
      seen.push_back(std::move(key));
      out.push_back(std::move(item));
    }
  }
  return generator(std::move(out));
}

Value f_wordcount(Runtime&, const Value& v, const CallArgs& args) {
  BoundArgs("wordcount", args, {});
  int64_t words = 0;
  bool in_word = false;
  for (char32_t c : pystr::decode(to_str(v))) {
    const bool word = pystr::is_word(c);
    if (word && !in_word) ++words;
    in_word = word;
  }
  return Value(words);
}

struct FilterEntry {
  std::string_view name;
  FilterFn fn;
};

constexpr FilterEntry kFilters[] = {
    {"abs", f_abs},
    {"attr", f_attr},
    {"batch", f_batch},
    {"capitalize", f_capitalize},
    {"center", f_center},
    {"count", f_length},
    {"d", f_default},
    {"default", f_default},
    {"dictsort", f_dictsort},
    {"e", f_escape},
    {"escape", f_escape},
    {"filesizeformat", f_filesizeformat},
    {"first", f_first},
    {"float", f_float},
    {"forceescape", f_forceescape},
    {"format", f_format},
    {"groupby", f_groupby},
    {"indent", f_indent},
    {"int", f_int},
    {"items", f_items},
    {"join", f_join},
    {"last", f_last},
    {"length", f_length},
    {"list", f_list},
    {"lower", f_lower},
    {"map", f_map},
    {"max", f_max},
    {"min", f_min},
    {"reject", f_reject},
    {"rejectattr", f_rejectattr},
    {"replace", f_replace},
    {"reverse", f_reverse},
    {"round", f_round},
    {"safe", f_safe},
    {"select", f_select},
    {"selectattr", f_selectattr},
    {"slice", f_slice},
    {"sort", f_sort},
    {"string", f_string},
    {"sum", f_sum},
    {"title", f_title},
    {"tojson", f_tojson},
    {"trim", f_trim},
    {"truncate", f_truncate},
    {"unique", f_unique},
    {"upper", f_upper},
    {"wordcount", f_wordcount},
};

const FilterEntry* find_filter(std::string_view name) {
  for (const auto& entry : kFilters) {
    if (entry.name == name) return &entry;
  }
  return nullptr;
}

}  // namespace

bool has_filter(std::string_view name) { return find_filter(name) != nullptr; }

Value call_filter(Runtime& runtime, std::string_view name, const Value& input, const CallArgs& args) {
  const FilterEntry* entry = find_filter(name);
  if (!entry) fail("no filter named '", name, "'");
  runtime.charge_call(input, args);
  Value result = entry->fn(runtime, input, args);
  // What the filter built (its text, its list) is work too.
  runtime.charge_shallow(result);
  return result;
}

}  // namespace ernie::jinja
