#include "text/jinja/access.h"

#include <algorithm>
#include <string>
#include <vector>

#include "text/jinja/methods.h"
#include "text/jinja/objects.h"
#include "text/jinja/pystr.h"
#include "util/error.h"

namespace ernie::jinja {

namespace {

// How jinja2 names an object in "has no attribute" messages.
std::string object_type_repr(const Value& v) {
  if (v.is_none()) return "None";
  return type_name(v) + " object";
}

Value missing_attribute(const Value& object, std::string_view name) {
  return Value::undefined(str_cat("'", object_type_repr(object), "' has no attribute '", name, "'"));
}

Value missing_element(const Value& object, const Value& key) {
  return Value::undefined(str_cat(object_type_repr(object), " has no element ", repr(key)));
}

// The element at a Python index (negative counts from the end), or nullopt.
std::optional<size_t> resolve_index(int64_t index, size_t size) {
  const auto n = static_cast<int64_t>(size);
  if (index < 0) index += n;
  if (index < 0 || index >= n) return std::nullopt;
  return static_cast<size_t>(index);
}

}  // namespace

std::optional<Value> find_method(const Value& receiver, std::string_view name) {
  switch (method_kind(receiver, name)) {
    case MethodKind::None: return std::nullopt;
    case MethodKind::Allowed: return Value(std::shared_ptr<Object>(std::make_shared<BoundMethod>(receiver, std::string(name))));
    case MethodKind::Refused:
      return Value::undefined(
          str_cat("access to attribute '", name, "' of '", type_name(receiver), "' object is unsafe."));
  }
  return std::nullopt;
}

Value get_attribute(const Value& object, std::string_view name) {
  switch (object.type()) {
    case Value::Type::Undefined: fail_undefined(object);
    case Value::Type::Object: return object.as_object().attribute(name);
    case Value::Type::Dict: {
      if (auto method = find_method(object, name)) return *method;
      if (const Value* item = object.as_dict().find(name)) return *item;
      return missing_attribute(object, name);
    }
    case Value::Type::List: {
      if (auto method = find_method(object, name)) return *method;
      const List& list = object.as_list();
      if (list.kind == List::Kind::GroupTuple && list.items.size() == 2) {
        if (name == "grouper") return list.items[0];
        if (name == "list") return list.items[1];
      }
      return missing_attribute(object, name);
    }
    case Value::Type::String: {
      if (auto method = find_method(object, name)) return *method;
      return missing_attribute(object, name);
    }
    case Value::Type::Int:
    case Value::Type::Bool:
      if (name == "real" || name == "numerator") return Value(object.as_int());
      if (name == "imag") return Value(int64_t{0});
      if (name == "denominator") return Value(int64_t{1});
      return missing_attribute(object, name);
    case Value::Type::Float:
      if (name == "real") return object;
      if (name == "imag") return Value(0.0);
      return missing_attribute(object, name);
    default: return missing_attribute(object, name);
  }
}

Value get_item(const Value& object, const Value& key) {
  if (object.is_undefined()) fail_undefined(object);
  switch (object.type()) {
    case Value::Type::Dict:
      if (key.is_string()) {
        if (const Value* item = object.as_dict().find(key.as_string())) return *item;
      }
      break;
    case Value::Type::List:
      if (key.is_integral()) {
        const auto& items = object.as_list().items;
        if (auto i = resolve_index(key.as_int(), items.size())) return items[*i];
        return missing_element(object, key);
      }
      break;
    case Value::Type::String:
      if (key.is_integral()) {
        const std::string& s = object.as_string();
        if (pystr::is_ascii(s)) {
          if (auto i = resolve_index(key.as_int(), s.size())) return Value(std::string(1, s[*i]));
        } else {
          const std::u32string cps = pystr::decode(s);
          if (auto i = resolve_index(key.as_int(), cps.size())) {
            std::string one;
            pystr::append_utf8(one, cps[*i]);
            return Value(std::move(one));
          }
        }
        return missing_element(object, key);
      }
      break;
    default: break;
  }
  // obj[name] that is not an item: jinja2 tries the attribute next.
  if (key.is_string()) {
    if (object.is_object()) return object.as_object().attribute(key.as_string());
    if (auto method = find_method(object, key.as_string())) return *method;
    return missing_attribute(object, key.as_string());
  }
  return missing_element(object, key);
}

Value get_slice(const Value& object, const Value& start, const Value& stop, const Value& step) {
  if (object.is_undefined()) fail_undefined(object);
  auto bound = [](const Value& v, bool& ok) -> std::optional<int64_t> {
    if (v.is_undefined() || v.is_none()) return std::nullopt;
    if (!v.is_integral()) {
      ok = false;
      return std::nullopt;
    }
    return v.as_int();
  };
  bool ok = true;
  const auto b_start = bound(start, ok);
  const auto b_stop = bound(stop, ok);
  const auto b_step = bound(step, ok);
  if (!ok) return Value::undefined("slice indices must be integers or None");
  if (object.is_string()) {
    const std::string& s = object.as_string();
    const size_t n = pystr::length(s);
    return Value(pystr::slice(s, pystr::resolve_slice(n, b_start, b_stop, b_step)));
  }
  if (object.is_list()) {
    const List& list = object.as_list();
    const auto r = pystr::resolve_slice(list.items.size(), b_start, b_stop, b_step);
    std::vector<Value> items;
    items.reserve(r.count);
    for (size_t k = 0; k < r.count; ++k) items.push_back(list.items[static_cast<size_t>(r.start + r.step * static_cast<int64_t>(k))]);
    return list.is_tuple() ? Value::tuple(std::move(items)) : Value::list(std::move(items));
  }
  return Value::undefined(str_cat("'", type_name(object), "' object is not subscriptable"));
}

Value get_path(const Value& object, std::string_view path) {
  Value current = object;
  size_t pos = 0;
  while (true) {
    const size_t dot = path.find('.', pos);
    const std::string_view part = path.substr(pos, dot == std::string_view::npos ? std::string_view::npos : dot - pos);
    // Digit parts index lists ("messages.0"); absurdly long ones stay keys.
    const bool digits = !part.empty() && part.size() <= 18 && part.find_first_not_of("0123456789") == std::string_view::npos;
    current = digits ? get_item(current, Value(static_cast<int64_t>(std::stoll(std::string(part)))))
                     : get_item(current, Value(part));
    if (dot == std::string_view::npos) return current;
    pos = dot + 1;
  }
}

// --- objects.h ------------------------------------------------------------------------

Value Namespace::attribute(std::string_view name) const {
  if (const Value* v = attrs_.find(name)) return *v;
  return Value::undefined(str_cat("'Namespace object' has no attribute '", name, "'"));
}

std::string Namespace::repr() const {
  // A namespace that contains itself prints as Python prints a recursive dict.
  static thread_local std::vector<const Namespace*> printing;
  if (std::find(printing.begin(), printing.end(), this) != printing.end()) return "<Namespace {...}>";
  printing.push_back(this);
  std::string out;
  try {
    out = "<Namespace " + jinja::repr(Value(std::make_shared<Dict>(attrs_))) + ">";
  } catch (...) {
    printing.pop_back();
    throw;
  }
  printing.pop_back();
  return out;
}

Value BoundMethod::call(Runtime& runtime, CallArgs& args) { return call_method(runtime, receiver_, name_, args); }

std::string BoundMethod::repr() const {
  return str_cat("<built-in method ", name_, " of ", jinja::type_name(receiver_), " object>");
}

}  // namespace ernie::jinja
