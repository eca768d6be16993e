// The values a template computes with, modelled on the Python objects jinja2 hands
// around: undefined, None, bool, int, float, str (and markupsafe's Markup), list, tuple,
// dict, one-shot iterators (what filters such as `map` return), and objects (namespace,
// loop, macros, builtin functions, bound methods).
//
// Lists, dicts, iterators and objects are shared by reference, as in Python: a
// namespace stored in two variables is one namespace, and an iterator consumed through
// one name is consumed for all.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <string_view>
#include <utility>
#include <variant>
#include <vector>

namespace ernie::jinja {

class Value;
class Dict;
class Object;
class Namespace;
class Runtime;
struct List;
struct IteratorState;

// Arguments of a call, as written: positional first, then keywords in source order.
struct CallArgs {
  std::vector<Value> positional;
  std::vector<std::pair<std::string, Value>> keyword;
};

// Lists, dicts and iterators nest at most this deep, so printing, comparing and
// destroying a value never recurses deeper than the C++ stack allows.
constexpr uint32_t kMaxValueDepth = 512;

class Value {
 public:
  enum class Type { Undefined, None, Bool, Int, Float, String, List, Dict, Iterator, Object };

  Value() = default;  // undefined, with no explanation
  Value(std::nullptr_t) : data_(std::nullptr_t{}) {}
  Value(bool b) : data_(b) {}
  Value(int i) : data_(static_cast<int64_t>(i)) {}
  Value(long i) : data_(static_cast<int64_t>(i)) {}
  Value(long long i) : data_(static_cast<int64_t>(i)) {}
  Value(unsigned int i) : data_(static_cast<int64_t>(i)) {}
  Value(unsigned long i) : data_(static_cast<int64_t>(i)) {}
  Value(unsigned long long i) : data_(static_cast<int64_t>(i)) {}
  Value(double f) : data_(f) {}
  Value(std::string s) : data_(StringData{std::make_shared<const std::string>(std::move(s)), false}) {}
  Value(std::string_view s) : Value(std::string(s)) {}
  Value(const char* s) : Value(std::string(s)) {}
  Value(std::shared_ptr<List> list);
  Value(std::shared_ptr<Dict> dict);
  Value(std::shared_ptr<IteratorState> iterator);
  Value(std::shared_ptr<Object> object);

  // An undefined value that explains itself when used where Jinja raises
  // ("'x' is undefined", "'dict object' has no attribute 'y'").
  static Value undefined(std::string message);
  static Value markup(std::string text);  // markupsafe.Markup: a str that escapes what is added to it
  static Value list(std::vector<Value> items);
  static Value tuple(std::vector<Value> items);
  static Value iterator(std::vector<Value> items, const char* type_name);

  Type type() const { return static_cast<Type>(data_.index()); }
  bool is_undefined() const { return type() == Type::Undefined; }
  bool is_none() const { return type() == Type::None; }
  bool is_bool() const { return type() == Type::Bool; }
  bool is_int() const { return type() == Type::Int; }
  bool is_float() const { return type() == Type::Float; }
  // bool counts: in Python True is the int 1.
  bool is_integral() const { return is_int() || is_bool(); }
  bool is_number() const { return is_int() || is_float() || is_bool(); }
  bool is_string() const { return type() == Type::String; }
  bool is_markup() const { return is_string() && std::get<StringData>(data_).markup; }
  bool is_list() const { return type() == Type::List; }  // lists and tuples
  bool is_dict() const { return type() == Type::Dict; }
  bool is_iterator() const { return type() == Type::Iterator; }
  bool is_object() const { return type() == Type::Object; }

  bool as_bool() const { return std::get<bool>(data_); }
  // The integer value of an int or a bool.
  int64_t as_int() const { return is_bool() ? (as_bool() ? 1 : 0) : std::get<int64_t>(data_); }
  // Any number as a double.
  double as_double() const;
  const std::string& as_string() const { return *std::get<StringData>(data_).text; }
  List& as_list() const { return *std::get<std::shared_ptr<List>>(data_); }
  const std::shared_ptr<List>& list_ptr() const { return std::get<std::shared_ptr<List>>(data_); }
  Dict& as_dict() const { return *std::get<std::shared_ptr<Dict>>(data_); }
  const std::shared_ptr<Dict>& dict_ptr() const { return std::get<std::shared_ptr<Dict>>(data_); }
  IteratorState& as_iterator() const { return *std::get<std::shared_ptr<IteratorState>>(data_); }
  Object& as_object() const { return *std::get<std::shared_ptr<Object>>(data_); }
  const std::shared_ptr<Object>& object_ptr() const { return std::get<std::shared_ptr<Object>>(data_); }

  // Why this undefined value is undefined; empty when nobody said.
  std::string undefined_message() const;
  // Whether both name the same Python object (the `is` operator, `sameas` test).
  bool same_object(const Value& other) const;

 private:
  struct UndefinedData {
    std::shared_ptr<const std::string> message;
  };
  // Strings are immutable and shared: copying a value (reading a message's content,
  // repeating a list) never copies the text.
  struct StringData {
    std::shared_ptr<const std::string> text;
    bool markup = false;
  };
  std::variant<UndefinedData, std::nullptr_t, bool, int64_t, double, StringData, std::shared_ptr<List>,
               std::shared_ptr<Dict>, std::shared_ptr<IteratorState>, std::shared_ptr<Object>>
      data_;
};

// How deeply `v` nests containers: 0 for scalars and objects, 1 for a flat list.
uint32_t nesting_depth(const Value& v);
// 1 + the deepest item; throws beyond kMaxValueDepth.
uint32_t container_depth(const std::vector<Value>& items);

struct List {
  // GroupTuple is what the groupby filter returns: a (grouper, list) tuple whose
  // fields can also be read as attributes.
  enum class Kind { List, Tuple, GroupTuple };
  std::vector<Value> items;
  Kind kind = Kind::List;
  uint32_t depth = 1;  // set by whoever fills `items` (Value::list does)
  bool is_tuple() const { return kind != Kind::List; }
};

// A Python generator or iterator: iterating takes items from it for good.
struct IteratorState {
  std::vector<Value> items;
  size_t next = 0;
  const char* type_name = "generator";
  uint32_t depth = 1;
  std::vector<Value> take_rest();
};

// A dict with string keys, in insertion order (JSON object order).
class Dict {
 public:
  using Entry = std::pair<std::string, Value>;

  const Value* find(std::string_view key) const;
  Value* find(std::string_view key);
  // Replaces the value of an existing key in place, or appends.
  void set(std::string key, Value value);
  // Appends a key the caller knows is new (a JSON object's keys are unique), skipping
  // set()'s linear search, which would make a big JSON object quadratic to convert.
  void append_new(std::string key, Value value);
  size_t size() const { return entries_.size(); }
  bool empty() const { return entries_.empty(); }
  const std::vector<Entry>& entries() const { return entries_; }
  uint32_t depth() const { return depth_; }

 private:
  void note_depth(const Value& value);  // throws past kMaxValueDepth

  std::vector<Entry> entries_;
  uint32_t depth_ = 1;
};

class Object {
 public:
  virtual ~Object() = default;
  // Python's type name, for error messages ("namespace", "LoopContext", "function").
  virtual const char* type_name() const = 0;
  // Undefined when the object has no such attribute.
  virtual Value attribute(std::string_view name) const;
  virtual bool callable() const { return false; }
  virtual Value call(Runtime& runtime, CallArgs& args);
  virtual std::string repr() const;
  // len(obj) for objects that have one.
  virtual std::optional<size_t> length() const { return std::nullopt; }
  // Only namespaces accept {% set obj.attr = ... %}.
  virtual Namespace* as_namespace() { return nullptr; }
  // Drops references to other values, breaking cycles (a namespace holding itself)
  // when a render ends; Python's garbage collector would find them, shared_ptr cannot.
  virtual void release() {}
};

// --- Python semantics ---------------------------------------------------------------

// bool(v)
bool truthy(const Value& v);
// str(v): what {{ v }} prints.
std::string to_str(const Value& v);
// repr(v): how v prints inside a list or dict.
std::string repr(const Value& v);
// The Python type name ("str", "int", "NoneType", "list", "dict", ...).
std::string type_name(const Value& v);
// ==
bool equals(const Value& a, const Value& b);
// <, as a three-way result; throws where Python raises TypeError.
int compare(const Value& a, const Value& b);
// len(v), or nullopt where Python raises TypeError.
std::optional<size_t> length(const Value& v);
// The items `for x in v` visits (characters of a str, keys of a dict); consumes an
// iterator; an undefined value iterates as empty. Throws for non-iterables.
std::vector<Value> iterate(const Value& v);
// Whether iter(v) would work.
bool is_iterable(const Value& v);
// Raises the error jinja2's Undefined raises when used: "'x' is undefined".
[[noreturn]] void fail_undefined(const Value& v);

}  // namespace ernie::jinja
