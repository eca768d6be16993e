#include "text/jinja/value.h"

#include <algorithm>
#include <cmath>

#include "text/jinja/pystr.h"
#include "text/jinja/runtime.h"
#include "util/error.h"

namespace ernie::jinja {

Value::Value(std::shared_ptr<List> list) : data_(std::move(list)) {}
Value::Value(std::shared_ptr<Dict> dict) : data_(std::move(dict)) {}
Value::Value(std::shared_ptr<IteratorState> iterator) : data_(std::move(iterator)) {}
Value::Value(std::shared_ptr<Object> object) : data_(std::move(object)) {}

Value Value::undefined(std::string message) {
  Value v;
  v.data_ = UndefinedData{std::make_shared<const std::string>(std::move(message))};
  return v;
}

Value Value::markup(std::string text) {
  Value v;
  v.data_ = StringData{std::make_shared<const std::string>(std::move(text)), true};
  return v;
}

uint32_t nesting_depth(const Value& v) {
  switch (v.type()) {
    case Value::Type::List: return v.as_list().depth;
    case Value::Type::Dict: return v.as_dict().depth();
    case Value::Type::Iterator: return v.as_iterator().depth;
    default: return 0;
  }
}

uint32_t container_depth(const std::vector<Value>& items) {
  uint32_t deepest = 0;
  for (const Value& item : items) deepest = std::max(deepest, nesting_depth(item));
  if (deepest + 1 > kMaxValueDepth) {
    fail("value nested more than ", kMaxValueDepth, " levels deep; expected flatter data");
  }
  return deepest + 1;
}

Value Value::list(std::vector<Value> items) {
  auto list = std::make_shared<List>();
  list->depth = container_depth(items);
  list->items = std::move(items);
  return Value(std::move(list));
}

Value Value::tuple(std::vector<Value> items) {
  auto list = std::make_shared<List>();
  list->depth = container_depth(items);
  list->items = std::move(items);
  list->kind = List::Kind::Tuple;
  return Value(std::move(list));
}

Value Value::iterator(std::vector<Value> items, const char* type_name) {
  auto state = std::make_shared<IteratorState>();
  state->depth = container_depth(items);
  state->items = std::move(items);
  state->type_name = type_name;
  return Value(std::move(state));
}

double Value::as_double() const {
  if (is_float()) return std::get<double>(data_);
  return static_cast<double>(as_int());
}

std::string Value::undefined_message() const {
  const auto& message = std::get<UndefinedData>(data_).message;
  return message ? *message : std::string();
}

bool Value::same_object(const Value& other) const {
  if (type() != other.type()) return false;
  switch (type()) {
    case Type::Undefined: return true;
    case Type::None: return true;
    case Type::Bool: return as_bool() == other.as_bool();
    // CPython caches the small ints, so `1 is 1` holds and `1000 is 1000` may not.
    case Type::Int: return as_int() == other.as_int() && as_int() >= -5 && as_int() <= 256;
    case Type::Float: return false;
    case Type::String: return false;
    case Type::List: return list_ptr() == other.list_ptr();
    case Type::Dict: return dict_ptr() == other.dict_ptr();
    case Type::Iterator: return &as_iterator() == &other.as_iterator();
    case Type::Object: return object_ptr() == other.object_ptr();
  }
  return false;
}

std::vector<Value> IteratorState::take_rest() {
  std::vector<Value> rest;
  if (next < items.size()) {
    rest.assign(std::make_move_iterator(items.begin() + static_cast<std::ptrdiff_t>(next)),
                std::make_move_iterator(items.end()));
  }
  next = items.size();
  return rest;
}

const Value* Dict::find(std::string_view key) const {
  for (const auto& [k, v] : entries_) {
    if (k == key) return &v;
  }
  return nullptr;
}

Value* Dict::find(std::string_view key) {
  for (auto& [k, v] : entries_) {
    if (k == key) return &v;
  }
  return nullptr;
}

void Dict::set(std::string key, Value value) {
  if (Value* existing = find(key)) {
    note_depth(value);
    *existing = std::move(value);
    return;
  }
  append_new(std::move(key), std::move(value));
}

void Dict::append_new(std::string key, Value value) {
  note_depth(value);
  entries_.emplace_back(std::move(key), std::move(value));
}

void Dict::note_depth(const Value& value) {
  const uint32_t depth = nesting_depth(value) + 1;
  if (depth > kMaxValueDepth) fail("value nested more than ", kMaxValueDepth, " levels deep; expected flatter data");
  depth_ = std::max(depth_, depth);
}

Value Object::attribute(std::string_view name) const {
  return Value::undefined(str_cat("'", type_name(), " object' has no attribute '", name, "'"));
}

Value Object::call(Runtime& /*runtime*/, CallArgs& /*args*/) { fail("'", type_name(), "' object is not callable"); }

std::string Object::repr() const { return str_cat("<", type_name(), " object>"); }

// --- Python semantics ---------------------------------------------------------------

bool truthy(const Value& v) {
  switch (v.type()) {
    case Value::Type::Undefined:
    case Value::Type::None: return false;
    case Value::Type::Bool: return v.as_bool();
    case Value::Type::Int: return v.as_int() != 0;
    case Value::Type::Float: return v.as_double() != 0.0;
    case Value::Type::String: return !v.as_string().empty();
    case Value::Type::List: return !v.as_list().items.empty();
    case Value::Type::Dict: return !v.as_dict().empty();
    case Value::Type::Iterator: return true;  // a generator is always true, even when empty
    case Value::Type::Object: {
      const auto n = v.as_object().length();
      return !n || *n > 0;
    }
  }
  return false;
}

namespace {

// Containers nest at most kMaxValueDepth deep, but namespaces can chain without
// bound; printing stops well before the stack would.
class PrintDepthGuard {
 public:
  PrintDepthGuard() {
    if (++depth_ > 2 * static_cast<int>(kMaxValueDepth)) {
      --depth_;
      fail("value nested too deeply to print");
    }
  }
  ~PrintDepthGuard() { --depth_; }
  PrintDepthGuard(const PrintDepthGuard&) = delete;
  PrintDepthGuard& operator=(const PrintDepthGuard&) = delete;

 private:
  static thread_local int depth_;
};
thread_local int PrintDepthGuard::depth_ = 0;

// A list holding one sublist twice prints it twice, so a value built in a few steps can
// print exponentially long: each piece is charged and the text capped as it grows.
void append_printed(std::string& out, const std::string& piece) {
  check_current_string(out.size() + piece.size());
  charge_current_bytes(piece.size());
  out += piece;
}

std::string repr_list(const List& list) {
  const bool tuple = list.is_tuple();
  std::string out(1, tuple ? '(' : '[');
  for (size_t i = 0; i < list.items.size(); ++i) {
    if (i > 0) out += ", ";
    append_printed(out, repr(list.items[i]));
  }
  if (tuple && list.items.size() == 1) out += ",";
  out.push_back(tuple ? ')' : ']');
  return out;
}

std::string repr_dict(const Dict& dict) {
  std::string out = "{";
  bool first = true;
  for (const auto& [key, value] : dict.entries()) {
    if (!first) out += ", ";
    first = false;
    append_printed(out, pystr::repr(key));
    out += ": ";
    append_printed(out, repr(value));
  }
  out += "}";
  return out;
}

}  // namespace

std::string to_str(const Value& v) {
  PrintDepthGuard guard;
  switch (v.type()) {
    case Value::Type::Undefined: return "";
    case Value::Type::None: return "None";
    case Value::Type::Bool: return v.as_bool() ? "True" : "False";
    case Value::Type::Int: return std::to_string(v.as_int());
    case Value::Type::Float: return pystr::format_float(v.as_double());
    case Value::Type::String: charge_current_bytes(v.as_string().size()); return v.as_string();
    case Value::Type::List: return repr_list(v.as_list());
    case Value::Type::Dict: return repr_dict(v.as_dict());
    case Value::Type::Iterator: return str_cat("<", v.as_iterator().type_name, " object>");
    case Value::Type::Object: return v.as_object().repr();
  }
  return "";
}

std::string repr(const Value& v) {
  switch (v.type()) {
    case Value::Type::Undefined: return "Undefined";
    case Value::Type::String:
      charge_current_bytes(v.as_string().size());
      return v.is_markup() ? "Markup(" + pystr::repr(v.as_string()) + ")" : pystr::repr(v.as_string());
    default: return to_str(v);
  }
}

std::string type_name(const Value& v) {
  switch (v.type()) {
    case Value::Type::Undefined: return "Undefined";
    case Value::Type::None: return "NoneType";
    case Value::Type::Bool: return "bool";
    case Value::Type::Int: return "int";
    case Value::Type::Float: return "float";
    case Value::Type::String: return v.is_markup() ? "Markup" : "str";
    case Value::Type::List: return v.as_list().is_tuple() ? "tuple" : "list";
    case Value::Type::Dict: return "dict";
    case Value::Type::Iterator: return v.as_iterator().type_name;
    case Value::Type::Object: return v.as_object().type_name();
  }
  return "object";
}

void fail_undefined(const Value& v) {
  const std::string message = v.undefined_message();
  fail(message.empty() ? std::string("undefined value used") : message);
}

namespace {

// Python compares ints and floats exactly, not through a lossy conversion.
int compare_numbers(const Value& a, const Value& b) {
  if (a.is_integral() && b.is_integral()) {
    const int64_t x = a.as_int();
    const int64_t y = b.as_int();
    return x < y ? -1 : (x > y ? 1 : 0);
  }
  const double x = a.as_double();
  const double y = b.as_double();
  if (x < y) return -1;
  if (x > y) return 1;
  if (x == y && a.is_integral() != b.is_integral()) {
    // Equal as doubles; the int side may still differ beyond double precision.
    const Value& int_side = a.is_integral() ? a : b;
    const double f = a.is_integral() ? y : x;
    if (std::fabs(f) < 9.2e18) {
      const auto as_int = static_cast<int64_t>(f);
      const int64_t i = int_side.as_int();
      const int sign = i < as_int ? -1 : (i > as_int ? 1 : 0);
      return a.is_integral() ? sign : -sign;
    }
  }
  return 0;
}

}  // namespace

bool equals(const Value& a, const Value& b) {
  if (a.is_undefined() || b.is_undefined()) return a.is_undefined() && b.is_undefined();
  if (a.is_number() && b.is_number()) {
    if (std::isnan(a.as_double()) || std::isnan(b.as_double())) return false;
    return compare_numbers(a, b) == 0;
  }
  if (a.type() != b.type()) return false;
  switch (a.type()) {
    case Value::Type::None: return true;
    case Value::Type::String:
      if (a.as_string().size() != b.as_string().size()) return false;
      charge_current_bytes(a.as_string().size());
      return a.as_string() == b.as_string();
    case Value::Type::List: {
      const List& x = a.as_list();
      const List& y = b.as_list();
      if (x.is_tuple() != y.is_tuple() || x.items.size() != y.items.size()) return false;
      // Items compare one by one, and shared sublists are compared again each time.
      charge_current_steps(x.items.size());
      for (size_t i = 0; i < x.items.size(); ++i) {
        if (!equals(x.items[i], y.items[i])) return false;
      }
      return true;
    }
    case Value::Type::Dict: {
      const Dict& x = a.as_dict();
      const Dict& y = b.as_dict();
      if (x.size() != y.size()) return false;
      // Each key is looked up in the other dict, a linear search.
      charge_current_steps(x.size() * x.size());
      for (const auto& [key, value] : x.entries()) {
        const Value* other = y.find(key);
        if (!other || !equals(value, *other)) return false;
      }
      return true;
    }
    default: return a.same_object(b);
  }
}

int compare(const Value& a, const Value& b) {
  if (a.is_undefined()) fail_undefined(a);
  if (b.is_undefined()) fail_undefined(b);
  if (a.is_number() && b.is_number()) return compare_numbers(a, b);
  if (a.is_string() && b.is_string()) {
    charge_current_bytes(std::min(a.as_string().size(), b.as_string().size()));
    const int c = a.as_string().compare(b.as_string());
    return c < 0 ? -1 : (c > 0 ? 1 : 0);
  }
  if (a.is_list() && b.is_list() && a.as_list().is_tuple() == b.as_list().is_tuple()) {
    const auto& x = a.as_list().items;
    const auto& y = b.as_list().items;
    charge_current_steps(std::min(x.size(), y.size()));
    for (size_t i = 0; i < x.size() && i < y.size(); ++i) {
      if (!equals(x[i], y[i])) return compare(x[i], y[i]);
    }
    return x.size() < y.size() ? -1 : (x.size() > y.size() ? 1 : 0);
  }
  fail("'<' not supported between instances of '", type_name(a), "' and '", type_name(b), "'");
}

std::optional<size_t> length(const Value& v) {
  switch (v.type()) {
    case Value::Type::Undefined: return 0;
    case Value::Type::String:
      // Python knows a str's length; we count its UTF-8 characters.
      charge_current_bytes(v.as_string().size());
      return pystr::length(v.as_string());
    case Value::Type::List: return v.as_list().items.size();
    case Value::Type::Dict: return v.as_dict().size();
    case Value::Type::Object: return v.as_object().length();
    default: return std::nullopt;
  }
}

bool is_iterable(const Value& v) {
  switch (v.type()) {
    case Value::Type::Undefined:
    case Value::Type::String:
    case Value::Type::List:
    case Value::Type::Dict:
    case Value::Type::Iterator: return true;
    default: return false;
  }
}

std::vector<Value> iterate(const Value& v) {
  switch (v.type()) {
    case Value::Type::Undefined: return {};
    case Value::Type::String: {
      std::vector<Value> chars;
      const std::string& s = v.as_string();
      // One value per character: cap before allocating them all.
      check_current_list(pystr::is_ascii(s) ? s.size() : pystr::length(s));
      charge_current_bytes(s.size());
      if (pystr::is_ascii(s)) {
        for (char ch : s) chars.emplace_back(std::string(1, ch));
      } else {
        for (char32_t cp : pystr::decode(s)) {
          std::string one;
          pystr::append_utf8(one, cp);
          chars.emplace_back(std::move(one));
        }
      }
      return chars;
    }
    case Value::Type::List: charge_current_steps(v.as_list().items.size()); return v.as_list().items;
    case Value::Type::Dict: {
      charge_current_steps(v.as_dict().size());
      std::vector<Value> keys;
      keys.reserve(v.as_dict().size());
      for (const auto& entry : v.as_dict().entries()) keys.emplace_back(entry.first);
      return keys;
    }
    case Value::Type::Iterator: return v.as_iterator().take_rest();
    default: fail("'", type_name(v), "' object is not iterable");
  }
}

}  // namespace ernie::jinja
