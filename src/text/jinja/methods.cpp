#include "text/jinja/methods.h"

#include <algorithm>
#include <array>

#include "text/jinja/args.h"
#include "text/jinja/format.h"
#include "text/jinja/pystr.h"
#include "util/error.h"

namespace ernie::jinja {

namespace {

constexpr std::array kStringMethods = {
    "capitalize", "casefold", "center",     "count",        "endswith",  "find",       "format",
    "format_map", "index",    "isalnum",    "isalpha",      "isascii",   "isdecimal",  "isdigit",
    "islower",    "isnumeric", "isspace",   "istitle",      "isupper",   "join",       "ljust",
    "lower",      "lstrip",   "partition",  "removeprefix", "removesuffix", "replace", "rfind",
    "rindex",     "rjust",    "rpartition", "rsplit",       "rstrip",    "split",      "splitlines",
    "startswith", "strip",    "swapcase",   "title",        "upper",     "zfill",
};
constexpr std::array kDictMethods = {"copy", "get", "items", "keys", "values"};
constexpr std::array kDictRefused = {"clear", "pop", "popitem", "setdefault", "update"};
// jinja2 3.1.2 refuses these on lists; pop and clear pass its check.
constexpr std::array kListMethods = {"clear", "copy", "count", "index", "pop"};
constexpr std::array kListRefused = {"append", "extend", "insert", "remove", "reverse", "sort"};
constexpr std::array kTupleMethods = {"count", "index"};

template <size_t N>
bool contains(const std::array<const char*, N>& names, std::string_view name) {
  return std::any_of(names.begin(), names.end(), [name](const char* n) { return name == n; });
}

std::optional<int64_t> optional_index(const BoundArgs& a, size_t i) {
  if (!a.has(i) || a.get(i).is_none()) return std::nullopt;
  return a.get_int(i, 0);
}

const std::string& string_arg(const BoundArgs& a, size_t i, std::string_view what) {
  return expect_string(a.required(i), what);
}

// startswith/endswith take a str or a tuple of str.
bool affix_match(const Value& affixes, const std::string& s, std::optional<int64_t> start, std::optional<int64_t> end,
                 bool prefix, std::string_view method) {
  auto one = [&](const Value& v) {
    const std::string& a = expect_string(v, str_cat(method, "() argument"));
    return prefix ? pystr::startswith(s, a, start, end) : pystr::endswith(s, a, start, end);
  };
  if (affixes.is_list() && affixes.as_list().is_tuple()) {
    return std::any_of(affixes.as_list().items.begin(), affixes.as_list().items.end(), one);
  }
  if (!affixes.is_string()) {
    fail(method, " first arg must be str or a tuple of str, not ", type_name(affixes));
  }
  return one(affixes);
}

Value string_list(std::vector<std::string> parts) {
  std::vector<Value> items;
  items.reserve(parts.size());
  for (auto& p : parts) items.emplace_back(std::move(p));
  return Value::list(std::move(items));
}

template <typename Pred>
Value all_chars(const std::string& s, Pred pred) {
  const std::u32string cps = pystr::decode(s);
  return Value(!cps.empty() && std::all_of(cps.begin(), cps.end(), pred));
}

char32_t fill_char(const BoundArgs& a, size_t i) {
  if (!a.has(i)) return ' ';
  const std::string& fill = expect_string(a.get(i), "the fill character");
  const std::u32string cps = pystr::decode(fill);
  if (cps.size() != 1) fail("The fill character must be exactly one character long");
  return cps[0];
}

Value string_method(Runtime& runtime, const std::string& s, std::string_view name, const CallArgs& args) {
  auto bind = [&](std::vector<std::string_view> params) { return BoundArgs(str_cat("str.", name), args, std::move(params)); };
  if (name == "upper" || name == "lower" || name == "title" || name == "capitalize" || name == "swapcase" ||
      name == "casefold") {
    bind({});
    if (name == "upper") return Value(pystr::upper(s));
    if (name == "lower" || name == "casefold") return Value(pystr::lower(s));
    if (name == "title") return Value(pystr::title(s));
    if (name == "capitalize") return Value(pystr::capitalize(s));
    return Value(pystr::swapcase(s));
  }
  if (name == "strip" || name == "lstrip" || name == "rstrip") {
    const BoundArgs a = bind({"chars"});
    return Value(pystr::strip(s, a.get_string(0), name != "rstrip", name != "lstrip"));
  }
  if (name == "split" || name == "rsplit") {
    const BoundArgs a = bind({"sep", "maxsplit"});
    const int64_t maxsplit = a.get_int(1, -1);
    auto parts = name == "split" ? pystr::split(s, a.get_string(0), maxsplit) : pystr::rsplit(s, a.get_string(0), maxsplit);
    runtime.check_list(parts.size());
    return string_list(std::move(parts));
  }
  if (name == "splitlines") {
    const BoundArgs a = bind({"keepends"});
    return string_list(pystr::splitlines(s, a.get_truthy(0, false)));
  }
  if (name == "startswith" || name == "endswith") {
    const BoundArgs a = bind({"prefix", "start", "end"});
    return Value(affix_match(a.required(0), s, optional_index(a, 1), optional_index(a, 2), name == "startswith", name));
  }
  if (name == "find" || name == "rfind" || name == "index" || name == "rindex" || name == "count") {
    const BoundArgs a = bind({"sub", "start", "end"});
    const std::string& sub = string_arg(a, 0, str_cat(name, "() argument"));
    const auto start = optional_index(a, 1);
    const auto end = optional_index(a, 2);
    if (name == "count") return Value(pystr::count(s, sub, start, end));
    const int64_t at = (name == "find" || name == "index") ? pystr::find(s, sub, start, end) : pystr::rfind(s, sub, start, end);
    if (at < 0 && (name == "index" || name == "rindex")) fail("substring not found");
    return Value(at);
  }
  if (name == "replace") {
    const BoundArgs a = bind({"old", "new", "count"});
    const std::string& old = string_arg(a, 0, "replace() argument 1");
    const std::string& replacement = string_arg(a, 1, "replace() argument 2");
    const int64_t count = a.get_int(2, -1);
    if (!old.empty()) {
      const int64_t hits = pystr::count(s, old, std::nullopt, std::nullopt);
      const int64_t n = count < 0 ? hits : std::min(count, hits);
      if (replacement.size() > old.size()) runtime.check_string(s.size() + static_cast<size_t>(n) * (replacement.size() - old.size()));
    } else {
      runtime.check_string(s.size() + (pystr::length(s) + 1) * replacement.size());
    }
    return Value(pystr::replace(s, old, replacement, count));
  }
  if (name == "join") {
    const BoundArgs a = bind({"iterable"});
    std::string out;
    const std::vector<Value> items = iterate(a.required(0));
    runtime.step(items.size());
    for (size_t i = 0; i < items.size(); ++i) {
      if (!items[i].is_string()) {
        fail("sequence item ", i, ": expected str instance, ", type_name(items[i]), " found");
      }
      if (i > 0) out += s;
      out += items[i].as_string();
      runtime.check_string(out.size());
    }
    return Value(std::move(out));
  }
  if (name == "center" || name == "ljust" || name == "rjust") {
    const BoundArgs a = bind({"width", "fillchar"});
    const int64_t width = expect_int(a.required(0), str_cat(name, "() width"));
    runtime.check_string(static_cast<size_t>(std::max<int64_t>(width, 0)) * 4);
    const char32_t fill = fill_char(a, 1);
    if (name == "center") return Value(pystr::center(s, width, fill));
    if (name == "ljust") return Value(pystr::ljust(s, width, fill));
    return Value(pystr::rjust(s, width, fill));
  }
  if (name == "zfill") {
    const BoundArgs a = bind({"width"});
    const int64_t width = expect_int(a.required(0), "zfill() argument");
    runtime.check_string(static_cast<size_t>(std::max<int64_t>(width, 0)));
    return Value(pystr::zfill(s, width));
  }
  if (name == "partition" || name == "rpartition") {
    const BoundArgs a = bind({"sep"});
    const std::string& sep = string_arg(a, 0, str_cat(name, "() argument"));
    if (sep.empty()) fail("empty separator");
    const size_t at = name == "partition" ? pystr::find_text(s, sep) : pystr::find_last(s, sep);
    if (at == std::string::npos) {
      return name == "partition" ? Value::tuple({Value(s), Value(""), Value("")})
                                 : Value::tuple({Value(""), Value(""), Value(s)});
    }
    return Value::tuple({Value(s.substr(0, at)), Value(sep), Value(s.substr(at + sep.size()))});
  }
  if (name == "removeprefix" || name == "removesuffix") {
    const BoundArgs a = bind({"affix"});
    const std::string& affix = string_arg(a, 0, str_cat(name, "() argument"));
    if (name == "removeprefix") return Value(s.compare(0, affix.size(), affix) == 0 ? s.substr(affix.size()) : s);
    const bool ends = s.size() >= affix.size() && s.compare(s.size() - affix.size(), affix.size(), affix) == 0;
    return Value(ends ? s.substr(0, s.size() - affix.size()) : s);
  }
  if (name == "isalnum") return (bind({}), all_chars(s, [](char32_t c) { return pystr::is_alpha(c) || pystr::is_digit(c); }));
  if (name == "isalpha") return (bind({}), all_chars(s, pystr::is_alpha));
  if (name == "isdigit" || name == "isdecimal" || name == "isnumeric") return (bind({}), all_chars(s, pystr::is_digit));
  if (name == "isspace") return (bind({}), all_chars(s, pystr::is_space));
  if (name == "isascii") {
    bind({});
    return Value(pystr::is_ascii(s));
  }
  if (name == "islower" || name == "isupper") {
    bind({});
    const std::u32string cps = pystr::decode(s);
    bool any_cased = false;
    for (char32_t c : cps) {
      if (!pystr::is_cased(c)) continue;
      any_cased = true;
      if (name == "islower" ? pystr::is_upper_char(c) : (pystr::is_lower_char(c) && !pystr::is_upper_char(c))) {
        return Value(false);
      }
    }
    return Value(any_cased);
  }
  if (name == "istitle") {
    bind({});
    return Value(!s.empty() && pystr::title(s) == s &&
                 std::any_of(s.begin(), s.end(), [](char c) { return pystr::is_cased(static_cast<unsigned char>(c)); }));
  }
  if (name == "format") return Value(brace_format(runtime, s, args));
  if (name == "format_map") {
    const BoundArgs a = bind({"mapping"});
    const Value& mapping = a.required(0);
    if (!mapping.is_dict()) fail("format_map() argument must be a mapping, not ", type_name(mapping));
    CallArgs keyword_args;
    for (const auto& [k, v] : mapping.as_dict().entries()) keyword_args.keyword.emplace_back(k, v);
    return Value(brace_format(runtime, s, keyword_args));
  }
  fail("'str' object has no attribute '", name, "'");
}

Value dict_method(const Value& receiver, std::string_view name, const CallArgs& args) {
  const Dict& dict = receiver.as_dict();
  auto bind = [&](std::vector<std::string_view> params) { return BoundArgs(str_cat("dict.", name), args, std::move(params)); };
  if (name == "get") {
    const BoundArgs a = bind({"key", "default"});
    const Value& key = a.required(0);
    if (key.is_string()) {
      if (const Value* v = dict.find(key.as_string())) return *v;
    } else if (key.is_list() || key.is_dict()) {
      fail("unhashable type: '", type_name(key), "'");
    }
    return a.get_or(1, Value(nullptr));
  }
  bind({});
  std::vector<Value> items;
  items.reserve(dict.size());
  if (name == "keys") {
    for (const auto& entry : dict.entries()) items.emplace_back(entry.first);
  } else if (name == "values") {
    for (const auto& entry : dict.entries()) items.push_back(entry.second);
  } else if (name == "items") {
    for (const auto& entry : dict.entries()) items.push_back(Value::tuple({Value(entry.first), entry.second}));
  } else if (name == "copy") {
    return Value(std::make_shared<Dict>(dict));
  } else {
    fail("'dict' object has no attribute '", name, "'");
  }
  return Value::list(std::move(items));
}

Value list_method(const Value& receiver, std::string_view name, const CallArgs& args) {
  List& list = receiver.as_list();
  auto bind = [&](std::vector<std::string_view> params) {
    return BoundArgs(str_cat(list.is_tuple() ? "tuple." : "list.", name), args, std::move(params));
  };
  if (name == "count") {
    const BoundArgs a = bind({"value"});
    const Value& needle = a.required(0);
    return Value(static_cast<int64_t>(
        std::count_if(list.items.begin(), list.items.end(), [&](const Value& v) { return equals(v, needle); })));
  }
  if (name == "index") {
    const BoundArgs a = bind({"value", "start", "stop"});
    const Value& needle = a.required(0);
    const auto r = pystr::resolve_slice(list.items.size(), optional_index(a, 1), optional_index(a, 2), std::nullopt);
    for (int64_t i = r.start; i < r.stop; ++i) {
      if (equals(list.items[static_cast<size_t>(i)], needle)) return Value(i);
    }
    fail(repr(needle), " is not in list");
  }
  if (name == "copy") {
    bind({});
    return Value::list(list.items);
  }
  if (name == "pop") {
    const BoundArgs a = bind({"index"});
    if (list.items.empty()) fail("pop from empty list");
    int64_t index = a.get_int(0, -1);
    const auto n = static_cast<int64_t>(list.items.size());
    if (index < 0) index += n;
    if (index < 0 || index >= n) fail("pop index out of range");
    Value popped = std::move(list.items[static_cast<size_t>(index)]);
    list.items.erase(list.items.begin() + index);
    return popped;
  }
  if (name == "clear") {
    bind({});
    list.items.clear();
    return Value(nullptr);
  }
  fail("'list' object has no attribute '", name, "'");
}

}  // namespace

MethodKind method_kind(const Value& receiver, std::string_view name) {
  switch (receiver.type()) {
    case Value::Type::String: return contains(kStringMethods, name) ? MethodKind::Allowed : MethodKind::None;
    case Value::Type::Dict:
      if (contains(kDictMethods, name)) return MethodKind::Allowed;
      return contains(kDictRefused, name) ? MethodKind::Refused : MethodKind::None;
    case Value::Type::List:
      if (receiver.as_list().is_tuple()) return contains(kTupleMethods, name) ? MethodKind::Allowed : MethodKind::None;
      if (contains(kListMethods, name)) return MethodKind::Allowed;
      return contains(kListRefused, name) ? MethodKind::Refused : MethodKind::None;
    default: return MethodKind::None;
  }
}

namespace {

Value method_result(Runtime& runtime, const Value& receiver, std::string_view name, const CallArgs& args) {
  switch (receiver.type()) {
    case Value::Type::String: return string_method(runtime, receiver.as_string(), name, args);
    case Value::Type::Dict: return dict_method(receiver, name, args);
    case Value::Type::List: return list_method(receiver, name, args);
    default: fail("'", type_name(receiver), "' object has no attribute '", name, "'");
  }
}

}  // namespace

Value call_method(Runtime& runtime, const Value& receiver, std::string_view name, const CallArgs& args) {
  runtime.charge_call(receiver, args);
  Value result = method_result(runtime, receiver, name, args);
  runtime.charge_shallow(result);  // what the method built
  return result;
}

}  // namespace ernie::jinja
