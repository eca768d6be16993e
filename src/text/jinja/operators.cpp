#include "text/jinja/operators.h"

#include <cmath>
#include <limits>

#include "text/jinja/format.h"
#include "text/jinja/pystr.h"
#include "util/error.h"

namespace ernie::jinja {

namespace {

const char* symbol(ast::BinaryOp op) {
  switch (op) {
    case ast::BinaryOp::Add: return "+";
    case ast::BinaryOp::Sub: return "-";
    case ast::BinaryOp::Mul: return "*";
    case ast::BinaryOp::Div: return "/";
    case ast::BinaryOp::FloorDiv: return "//";
    case ast::BinaryOp::Mod: return "%";
    case ast::BinaryOp::Pow: return "**";
  }
  return "?";
}

[[noreturn]] void unsupported(ast::BinaryOp op, const Value& a, const Value& b) {
  if (op == ast::BinaryOp::Add && a.is_string()) {
    fail("can only concatenate str (not \"", type_name(b), "\") to str");
  }
  if (op == ast::BinaryOp::Add && a.is_list() && b.is_list()) {
    fail("can only concatenate ", type_name(a), " (not \"", type_name(b), "\") to ", type_name(a));
  }
  fail("unsupported operand type(s) for ", symbol(op), ": '", type_name(a), "' and '", type_name(b), "'");
}

[[noreturn]] void overflow() { fail("integer overflow: this engine's integers are 64-bit"); }

// Python's float floor division and modulo (float_divmod in CPython).
void float_divmod(double vx, double wx, double& floordiv, double& mod) {
  if (wx == 0.0) fail("float division by zero");
  mod = std::fmod(vx, wx);
  double div = (vx - mod) / wx;
  if (mod != 0.0) {
    if ((wx < 0) != (mod < 0)) {
      mod += wx;
      div -= 1.0;
    }
  } else {
    mod = std::copysign(0.0, wx);
  }
  if (div != 0.0) {
    floordiv = std::floor(div);
    if (div - floordiv > 0.5) floordiv += 1.0;
  } else {
    floordiv = std::copysign(0.0, vx / wx);
  }
}

int64_t int_pow(int64_t base, int64_t exponent) {
  int64_t result = 1;
  while (exponent > 0) {
    if (exponent & 1) {
      if (__builtin_mul_overflow(result, base, &result)) overflow();
    }
    exponent >>= 1;
    if (exponent > 0 && __builtin_mul_overflow(base, base, &base)) overflow();
  }
  return result;
}

Value repeat_sequence(Runtime& runtime, const Value& seq, int64_t times) {
  const int64_t n = std::max<int64_t>(times, 0);
  if (seq.is_string()) {
    const std::string& s = seq.as_string();
    if (!s.empty() && static_cast<uint64_t>(n) > std::numeric_limits<size_t>::max() / s.size()) overflow();
    runtime.check_string(s.size() * static_cast<size_t>(n));
    runtime.charge_bytes(s.size() * static_cast<size_t>(n));
    std::string out;
    out.reserve(s.size() * static_cast<size_t>(n));
    for (int64_t i = 0; i < n; ++i) out += s;
    return seq.is_markup() ? Value::markup(std::move(out)) : Value(std::move(out));
  }
  const List& list = seq.as_list();
  if (!list.items.empty() && static_cast<uint64_t>(n) > std::numeric_limits<size_t>::max() / list.items.size()) overflow();
  runtime.check_list(list.items.size() * static_cast<size_t>(n));
  std::vector<Value> items;
  items.reserve(list.items.size() * static_cast<size_t>(n));
  for (int64_t i = 0; i < n; ++i) items.insert(items.end(), list.items.begin(), list.items.end());
  return list.is_tuple() ? Value::tuple(std::move(items)) : Value::list(std::move(items));
}

// Markup % args escapes the str arguments (markupsafe wraps each in an escaping helper).
Value escape_one(const Value& v) {
  return v.is_string() && !v.is_markup() ? Value::markup(pystr::html_escape(v.as_string())) : v;
}

Value escape_strings(const Value& args) {
  if (args.is_list() && args.as_list().is_tuple()) {
    std::vector<Value> items;
    for (const Value& v : args.as_list().items) items.push_back(escape_one(v));
    return Value::tuple(std::move(items));
  }
  if (args.is_dict()) {
    auto dict = std::make_shared<Dict>();
    for (const auto& [k, v] : args.as_dict().entries()) dict->set(k, escape_one(v));
    return Value(std::move(dict));
  }
  return escape_one(args);
}

Value add(Runtime& runtime, const Value& a, const Value& b) {
  if (a.is_integral() && b.is_integral()) {
    int64_t r = 0;
    if (__builtin_add_overflow(a.as_int(), b.as_int(), &r)) overflow();
    return Value(r);
  }
  if (a.is_number() && b.is_number()) return Value(a.as_double() + b.as_double());
  if (a.is_string() && b.is_string()) {
    runtime.check_string(a.as_string().size() + b.as_string().size());
    runtime.charge_bytes(a.as_string().size() + b.as_string().size());
    // Markup + str escapes the str (markupsafe), in either order.
    if (a.is_markup() != b.is_markup()) {
      const std::string left = a.is_markup() ? a.as_string() : pystr::html_escape(a.as_string());
      const std::string right = b.is_markup() ? b.as_string() : pystr::html_escape(b.as_string());
      return Value::markup(left + right);
    }
    return a.is_markup() ? Value::markup(a.as_string() + b.as_string()) : Value(a.as_string() + b.as_string());
  }
  if (a.is_list() && b.is_list() && a.as_list().is_tuple() == b.as_list().is_tuple()) {
    runtime.check_list(a.as_list().items.size() + b.as_list().items.size());
    std::vector<Value> items = a.as_list().items;
    items.insert(items.end(), b.as_list().items.begin(), b.as_list().items.end());
    return a.as_list().is_tuple() ? Value::tuple(std::move(items)) : Value::list(std::move(items));
  }
  unsupported(ast::BinaryOp::Add, a, b);
}

// The operator itself; binary_op charges for it.
Value apply_binary_op(Runtime& runtime, ast::BinaryOp op, const Value& a, const Value& b) {
  // str % x formats str(x) even for an undefined x; every other use of undefined raises.
  if (op == ast::BinaryOp::Mod && a.is_string()) {
    if (!a.is_markup()) return Value(percent_format(runtime, a.as_string(), b));
    return Value::markup(percent_format(runtime, a.as_string(), escape_strings(b)));
  }
  if (a.is_undefined()) fail_undefined(a);
  if (b.is_undefined()) fail_undefined(b);
  switch (op) {
    case ast::BinaryOp::Add: return add(runtime, a, b);
    case ast::BinaryOp::Sub:
      if (a.is_integral() && b.is_integral()) {
        int64_t r = 0;
        if (__builtin_sub_overflow(a.as_int(), b.as_int(), &r)) overflow();
        return Value(r);
      }
      if (a.is_number() && b.is_number()) return Value(a.as_double() - b.as_double());
      break;
    case ast::BinaryOp::Mul:
      if (a.is_integral() && b.is_integral()) {
        int64_t r = 0;
        if (__builtin_mul_overflow(a.as_int(), b.as_int(), &r)) overflow();
        return Value(r);
      }
      if (a.is_number() && b.is_number()) return Value(a.as_double() * b.as_double());
      if ((a.is_string() || a.is_list()) && b.is_integral()) return repeat_sequence(runtime, a, b.as_int());
      if (a.is_integral() && (b.is_string() || b.is_list())) return repeat_sequence(runtime, b, a.as_int());
      break;
    case ast::BinaryOp::Div:
      if (a.is_number() && b.is_number()) {
        if (b.as_double() == 0.0) fail("division by zero");
        return Value(a.as_double() / b.as_double());
      }
      break;
    case ast::BinaryOp::FloorDiv:
    case ast::BinaryOp::Mod:
      if (a.is_integral() && b.is_integral()) {
        const int64_t x = a.as_int();
        const int64_t y = b.as_int();
        if (y == 0) fail("integer division or modulo by zero");
        if (x == std::numeric_limits<int64_t>::min() && y == -1) {
          if (op == ast::BinaryOp::Mod) return Value(int64_t{0});
          overflow();
        }
        int64_t q = x / y;
        int64_t r = x % y;
        if (r != 0 && ((r < 0) != (y < 0))) {
          --q;
          r += y;
        }
        return Value(op == ast::BinaryOp::FloorDiv ? q : r);
      }
      if (a.is_number() && b.is_number()) {
        double floordiv = 0;
        double mod = 0;
        if (b.as_double() == 0.0) fail(op == ast::BinaryOp::Mod ? "float modulo" : "float floor division by zero");
        float_divmod(a.as_double(), b.as_double(), floordiv, mod);
        return Value(op == ast::BinaryOp::FloorDiv ? floordiv : mod);
      }
      break;
    case ast::BinaryOp::Pow:
      if (a.is_integral() && b.is_integral() && b.as_int() >= 0) return Value(int_pow(a.as_int(), b.as_int()));
      if (a.is_number() && b.is_number()) {
        const double x = a.as_double();
        const double y = b.as_double();
        if (x == 0.0 && y < 0) fail("0.0 cannot be raised to a negative power");
        if (x < 0 && y != std::floor(y)) fail("negative number raised to a fractional power gives a complex number, which templates do not support");
        return Value(std::pow(x, y));
      }
      break;
  }
  unsupported(op, a, b);
}

}  // namespace

Value binary_op(Runtime& runtime, ast::BinaryOp op, const Value& a, const Value& b) {
  runtime.step();
  runtime.charge_shallow(a);
  runtime.charge_shallow(b);
  Value result = apply_binary_op(runtime, op, a, b);
  runtime.charge_shallow(result);  // 'a' * n, list + list: what was built
  return result;
}

Value negate(const Value& v) {
  if (v.is_undefined()) fail_undefined(v);
  if (v.is_integral()) {
    if (v.as_int() == std::numeric_limits<int64_t>::min()) overflow();
    return Value(-v.as_int());
  }
  if (v.is_float()) return Value(-v.as_double());
  fail("bad operand type for unary -: '", type_name(v), "'");
}

Value unary_plus(const Value& v) {
  if (v.is_undefined()) fail_undefined(v);
  if (v.is_integral()) return Value(v.as_int());
  if (v.is_float()) return v;
  fail("bad operand type for unary +: '", type_name(v), "'");
}

bool contains(const Value& container, const Value& item) {
  switch (container.type()) {
    case Value::Type::Undefined: return false;  // iterates as empty
    case Value::Type::String:
      if (!item.is_string()) fail("'in <string>' requires string as left operand, not ", type_name(item));
      return pystr::find_text(container.as_string(), item.as_string()) != std::string::npos;
    case Value::Type::List:
      for (const Value& v : container.as_list().items) {
        if (equals(v, item)) return true;
      }
      return false;
    case Value::Type::Dict:
      if (item.is_list() && !item.as_list().is_tuple()) fail("unhashable type: 'list'");
      if (item.is_dict()) fail("unhashable type: 'dict'");
      return item.is_string() && container.as_dict().find(item.as_string()) != nullptr;
    case Value::Type::Iterator: {
      IteratorState& it = container.as_iterator();
      while (it.next < it.items.size()) {
        if (equals(it.items[it.next++], item)) return true;
      }
      return false;
    }
    default: fail("argument of type '", type_name(container), "' is not iterable");
  }
}

std::string concat_strings(Runtime& runtime, const std::vector<Value>& parts) {
  std::string out;
  for (const Value& part : parts) {
    out += to_str(part);
    runtime.check_string(out.size());
  }
  runtime.charge_bytes(out.size());
  return out;
}

}  // namespace ernie::jinja
