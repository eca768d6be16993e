#include "text/jinja/interpreter.h"

#include <memory>
#include <unordered_map>
#include <utility>

#include "text/jinja/access.h"
#include "text/jinja/builtins.h"
#include "text/jinja/lexer.h"
#include "text/jinja/objects.h"
#include "text/jinja/operators.h"
#include "util/error.h"

namespace ernie::jinja {

namespace {

using namespace ast;

// Variables of one scope; lookups walk to the parent. Scopes are small (a loop
// target, a few sets), so a vector beats a hash map.
struct Scope {
  explicit Scope(std::shared_ptr<Scope> p) : parent(std::move(p)) {}

  const Value* find(std::string_view name) const {
    for (const auto& [k, v] : vars) {
      if (k == name) return &v;
    }
    return nullptr;
  }
  void set(std::string_view name, Value value) {
    for (auto& [k, v] : vars) {
      if (k == name) {
        v = std::move(value);
        return;
      }
    }
    vars.emplace_back(std::string(name), std::move(value));
  }

  std::shared_ptr<Scope> parent;
  std::vector<std::pair<std::string, Value>> vars;
};
using ScopePtr = std::shared_ptr<Scope>;

ScopePtr child(const ScopePtr& parent) { return std::make_shared<Scope>(parent); }

class Interpreter;

// A macro sees the scope it was defined in. It holds that scope weakly: the scope
// holds the macro, and a strong reference back would make every macro defined in a
// loop body a reference cycle kept until the render ends. A macro that outlives its
// scope (stored in a namespace from inside a loop) falls back to the template scope.
class MacroObject : public Object {
 public:
  MacroObject(Interpreter& interpreter, const MacroDef& def, const ScopePtr& closure)
      : interpreter_(interpreter), def_(def), closure_(closure) {}
  const char* type_name() const override { return "Macro"; }
  bool callable() const override { return true; }
  Value call(Runtime& runtime, CallArgs& args) override;
  std::string repr() const override { return "<Macro '" + def_.name + "'>"; }
  Value attribute(std::string_view name) const override {
    if (name == "name") return Value(def_.name);
    if (name == "arguments") {
      std::vector<Value> params(def_.params.begin(), def_.params.end());
      return Value::tuple(std::move(params));
    }
    if (name == "catch_kwargs") return Value(def_.catch_kwargs);
    if (name == "catch_varargs") return Value(def_.catch_varargs);
    if (name == "caller") return Value(def_.uses_caller);
    return Object::attribute(name);
  }

 private:
  Interpreter& interpreter_;
  const MacroDef& def_;
  std::weak_ptr<Scope> closure_;
};

// jinja2's LoopContext: `loop.index`, `loop.last`, `loop.cycle(...)`, and
// `loop(children)` in recursive loops.
class LoopObject : public Object, public std::enable_shared_from_this<LoopObject> {
 public:
  const char* type_name() const override { return "LoopContext"; }
  std::optional<size_t> length() const override { return items.size(); }
  bool callable() const override { return true; }
  Value call(Runtime& runtime, CallArgs& args) override;
  std::string repr() const override { return str_cat("<LoopContext ", index0 + 1, "/", items.size(), ">"); }
  Value attribute(std::string_view name) const override;

  std::vector<Value> items;
  size_t index0 = 0;
  int64_t depth0 = 0;
  std::optional<Value> last_changed;
  // Set for `recursive` loops only.
  Interpreter* interpreter = nullptr;
  const ForStmt* stmt = nullptr;
  ScopePtr scope;
};

class Interpreter {
 public:
  Interpreter(Runtime& runtime, std::shared_ptr<Dict> context)
      : runtime_(runtime), context_(std::move(context)), root_(std::make_shared<Scope>(nullptr)) {}

  std::string run(const Body& body) {
    std::string out;
    output_ = &out;
    exec_body(body, root_, out);
    output_ = nullptr;
    return out;
  }

  Value call_macro(const MacroDef& def, const ScopePtr& closure, CallArgs& args);
  std::string render_loop(const ForStmt& s, const ScopePtr& scope, std::vector<Value> items, int64_t depth0);

 private:
  enum class Flow { Normal, Break, Continue };

  // Counts macro calls and recursive loops in progress.
  class CallDepthGuard {
   public:
    explicit CallDepthGuard(Interpreter& in) : in_(in) {
      if (++in_.call_depth_ > in_.runtime_.limits().max_call_depth) {
        --in_.call_depth_;
        fail("macro calls nested more than ", in_.runtime_.limits().max_call_depth,
             " deep; expected recursion that ends");
      }
    }
    ~CallDepthGuard() { --in_.call_depth_; }
    CallDepthGuard(const CallDepthGuard&) = delete;
    CallDepthGuard& operator=(const CallDepthGuard&) = delete;

   private:
    Interpreter& in_;
  };

  // The render's own output has a cap of its own; every other buffer (a macro's
  // output, a set block) is a string like any other.
  void append(std::string& out, std::string_view text) {
    if (&out == output_) {
      runtime_.check_output(out.size() + text.size());
    } else {
      runtime_.check_string(out.size() + text.size());
    }
    runtime_.charge_bytes(text.size());
    out.append(text);
  }

  template <typename Fn>
  auto located_at(const Node& node, Fn&& fn) -> decltype(fn()) {
    try {
      return fn();
    } catch (const LocatedError&) {
      throw;
    } catch (const Error& e) {
      throw LocatedError(located(node.line, node.column, e.what()));
    }
  }

  // --- statements ---------------------------------------------------------------------

  Flow exec_body(const Body& body, const ScopePtr& scope, std::string& out) {
    for (const auto& stmt : body) {
      const Flow flow = located_at(*stmt, [&] { return exec(*stmt, scope, out); });
      if (flow != Flow::Normal) return flow;
    }
    return Flow::Normal;
  }

  Flow exec(const Stmt& stmt, const ScopePtr& scope, std::string& out) {
    switch (stmt.kind) {
      case StmtKind::Text: append(out, static_cast<const TextStmt&>(stmt).text); return Flow::Normal;
      case StmtKind::Output:
        append(out, to_str(eval(*static_cast<const OutputStmt&>(stmt).expr, scope)));
        return Flow::Normal;
      case StmtKind::If: return exec_if(static_cast<const IfStmt&>(stmt), scope, out);
      case StmtKind::For: return exec_for(static_cast<const ForStmt&>(stmt), scope, out);
      case StmtKind::Set: {
        const auto& s = static_cast<const SetStmt&>(stmt);
        assign(*s.target, eval(*s.value, scope), scope);
        return Flow::Normal;
      }
      case StmtKind::SetBlock: return exec_set_block(static_cast<const SetBlockStmt&>(stmt), scope);
      case StmtKind::Macro: {
        const auto& def = static_cast<const MacroStmt&>(stmt).def;
        scope->set(def.name, Value(std::shared_ptr<Object>(std::make_shared<MacroObject>(*this, def, scope))));
        return Flow::Normal;
      }
      case StmtKind::CallBlock: return exec_call_block(static_cast<const CallBlockStmt&>(stmt), scope, out);
      case StmtKind::FilterBlock: return exec_filter_block(static_cast<const FilterBlockStmt&>(stmt), scope, out);
      case StmtKind::With: {
        const auto& s = static_cast<const WithStmt&>(stmt);
        std::vector<Value> values;
        for (const auto& v : s.values) values.push_back(eval(*v, scope));
        ScopePtr inner = child(scope);
        for (size_t i = 0; i < s.targets.size(); ++i) assign(*s.targets[i], values[i], inner);
        return exec_body(s.body, inner, out);
      }
      case StmtKind::Generation: return exec_body(static_cast<const GenerationStmt&>(stmt).body, child(scope), out);
      case StmtKind::Break: return Flow::Break;
      case StmtKind::Continue: return Flow::Continue;
    }
    return Flow::Normal;
  }

  Flow exec_if(const IfStmt& s, const ScopePtr& scope, std::string& out) {
    for (const auto& [test, body] : s.branches) {
      if (truthy(eval(*test, scope))) return exec_body(body, scope, out);
    }
    return exec_body(s.otherwise, scope, out);
  }

  Flow exec_for(const ForStmt& s, const ScopePtr& scope, std::string& out) {
    const Value iterable = eval(*s.iter, scope);
    std::vector<Value> items = iterate(iterable);
    return run_loop(s, scope, std::move(items), 0, out);
  }

  Flow run_loop(const ForStmt& s, const ScopePtr& scope, std::vector<Value> items, int64_t depth0, std::string& out) {
    runtime_.step(items.size());
    if (s.filter) {
      std::vector<Value> kept;
      for (Value& item : items) {
        ScopePtr probe = child(scope);
        assign(*s.target, item, probe);
        if (truthy(eval(*s.filter, probe))) kept.push_back(std::move(item));
      }
      items = std::move(kept);
    }
    auto loop = std::make_shared<LoopObject>();
    loop->items = std::move(items);
    loop->depth0 = depth0;
    if (s.recursive) {
      loop->interpreter = this;
      loop->stmt = &s;
      loop->scope = scope;
    }
    const Value loop_value{std::shared_ptr<Object>(loop)};
    for (size_t i = 0; i < loop->items.size(); ++i) {
      loop->index0 = i;
      ScopePtr iteration = child(scope);
      assign(*s.target, loop->items[i], iteration);
      iteration->set("loop", loop_value);
      if (exec_body(s.body, iteration, out) == Flow::Break) break;
    }
    if (loop->items.empty()) return exec_body(s.otherwise, child(scope), out);
    return Flow::Normal;
  }

  Flow exec_set_block(const SetBlockStmt& s, const ScopePtr& scope) {
    std::string text;
    ScopePtr inner = child(scope);
    const Flow flow = exec_body(s.body, inner, text);
    if (flow != Flow::Normal) return flow;
    Value value = s.filter ? filter_chain(*s.filter, inner, Value(std::move(text))) : Value(std::move(text));
    assign(*s.target, value, scope);
    return Flow::Normal;
  }

  Flow exec_filter_block(const FilterBlockStmt& s, const ScopePtr& scope, std::string& out) {
    std::string text;
    ScopePtr inner = child(scope);
    const Flow flow = exec_body(s.body, inner, text);
    if (flow != Flow::Normal) return flow;
    append(out, to_str(filter_chain(*s.filter, inner, Value(std::move(text)))));
    return Flow::Normal;
  }

  Flow exec_call_block(const CallBlockStmt& s, const ScopePtr& scope, std::string& out) {
    std::shared_ptr<Object> caller = std::make_shared<MacroObject>(*this, s.caller, scope);
    const auto& call = static_cast<const CallExpr&>(*s.call);
    const Value callee = eval(*call.callee, scope);
    CallArgs args = eval_args(call.args, scope);
    args.keyword.emplace_back("caller", Value(std::move(caller)));
    append(out, to_str(located_at(call, [&] { return call_value(callee, args); })));
    return Flow::Normal;
  }

  // Applies a {% filter %} / block-set filter chain to the block's text.
  Value filter_chain(const Expr& e, const ScopePtr& scope, const Value& text) {
    const auto& f = static_cast<const FilterExpr&>(e);
    const Value input = f.input ? filter_chain(*f.input, scope, text) : text;
    CallArgs args = eval_args(f.args, scope);
    return located_at(f, [&] { return call_filter(runtime_, f.name, input, args); });
  }

  void assign(const Expr& target, const Value& value, const ScopePtr& scope) {
    switch (target.kind) {
      case ExprKind::Name: scope->set(static_cast<const NameExpr&>(target).name, value); return;
      case ExprKind::Tuple: {
        const auto& targets = static_cast<const SequenceExpr&>(target).items;
        if (!is_iterable(value) || value.is_undefined()) {
          if (value.is_undefined()) fail_undefined(value);
          fail("cannot unpack non-iterable ", type_name(value), " object");
        }
        const std::vector<Value> parts = iterate(value);
        if (parts.size() < targets.size()) {
          fail("not enough values to unpack (expected ", targets.size(), ", got ", parts.size(), ")");
        }
        if (parts.size() > targets.size()) fail("too many values to unpack (expected ", targets.size(), ")");
        for (size_t i = 0; i < targets.size(); ++i) assign(*targets[i], parts[i], scope);
        return;
      }
      case ExprKind::NsRef: {
        const auto& ref = static_cast<const NsRefExpr&>(target);
        const Value ns = lookup(ref.name, scope);
        Namespace* object = ns.is_object() ? ns.as_object().as_namespace() : nullptr;
        if (!object) fail("cannot assign attribute on non-namespace object");
        object->set(ref.attr, value);
        return;
      }
      default: fail("cannot assign to this expression");
    }
  }

  // --- expressions --------------------------------------------------------------------

  Value lookup(const std::string& name, const ScopePtr& scope) {
    for (const Scope* s = scope.get(); s; s = s->parent.get()) {
      if (const Value* v = s->find(name)) return *v;
    }
    if (const Value* v = context_->find(name)) return *v;
    const auto it = globals_.find(name);
    if (it != globals_.end()) return it->second;
    Value global = global_value(name);
    if (!global.is_undefined()) globals_.emplace(name, global);
    return global;
  }

  Value eval(const Expr& e, const ScopePtr& scope) {
    return located_at(e, [&] { return eval_node(e, scope); });
  }

  Value eval_node(const Expr& e, const ScopePtr& scope) {
    switch (e.kind) {
      case ExprKind::Const: return static_cast<const ConstExpr&>(e).value;
      case ExprKind::Name: return lookup(static_cast<const NameExpr&>(e).name, scope);
      case ExprKind::List:
      case ExprKind::Tuple: {
        std::vector<Value> items;
        for (const auto& item : static_cast<const SequenceExpr&>(e).items) items.push_back(eval(*item, scope));
        return e.kind == ExprKind::List ? Value::list(std::move(items)) : Value::tuple(std::move(items));
      }
      case ExprKind::Dict: return eval_dict(static_cast<const DictExpr&>(e), scope);
      case ExprKind::GetAttr: {
        const auto& g = static_cast<const GetAttrExpr&>(e);
        return get_attribute(eval(*g.object, scope), g.name);
      }
      case ExprKind::GetItem: return eval_get_item(static_cast<const GetItemExpr&>(e), scope);
      case ExprKind::Slice: fail("a slice is only valid inside []");
      case ExprKind::Call: {
        const auto& c = static_cast<const CallExpr&>(e);
        const Value callee = eval(*c.callee, scope);
        CallArgs args = eval_args(c.args, scope);
        return call_value(callee, args);
      }
      case ExprKind::Filter: {
        const auto& f = static_cast<const FilterExpr&>(e);
        const Value input = eval(*f.input, scope);
        const CallArgs args = eval_args(f.args, scope);
        return call_filter(runtime_, f.name, input, args);
      }
      case ExprKind::Test: {
        const auto& t = static_cast<const TestExpr&>(e);
        const Value input = eval(*t.input, scope);
        const CallArgs args = eval_args(t.args, scope);
        return Value(call_test(runtime_, t.name, input, args));
      }
      case ExprKind::Neg: return negate(eval(*static_cast<const UnaryExpr&>(e).operand, scope));
      case ExprKind::Pos: return unary_plus(eval(*static_cast<const UnaryExpr&>(e).operand, scope));
      case ExprKind::Not: return Value(!truthy(eval(*static_cast<const UnaryExpr&>(e).operand, scope)));
      case ExprKind::Binary: {
        const auto& b = static_cast<const BinaryExpr&>(e);
        const Value left = eval(*b.left, scope);
        const Value right = eval(*b.right, scope);
        return binary_op(runtime_, b.op, left, right);
      }
      case ExprKind::And:
      case ExprKind::Or: {
        const auto& l = static_cast<const LogicalExpr&>(e);
        Value left = eval(*l.left, scope);
        if (truthy(left) == (e.kind == ExprKind::Or)) return left;
        return eval(*l.right, scope);
      }
      case ExprKind::Concat: {
        std::vector<Value> parts;
        for (const auto& p : static_cast<const ConcatExpr&>(e).parts) parts.push_back(eval(*p, scope));
        return Value(concat_strings(runtime_, parts));
      }
      case ExprKind::Compare: return eval_compare(static_cast<const CompareExpr&>(e), scope);
      case ExprKind::CondExpr: {
        const auto& c = static_cast<const CondExpr&>(e);
        if (truthy(eval(*c.test, scope))) return eval(*c.then, scope);
        if (c.otherwise) return eval(*c.otherwise, scope);
        return Value::undefined("the inline if-expression evaluated to false and no else section was defined.");
      }
      case ExprKind::NsRef: fail("a namespace attribute reference is only valid as an assignment target");
    }
    return Value();
  }

  Value eval_dict(const DictExpr& d, const ScopePtr& scope) {
    auto dict = std::make_shared<Dict>();
    for (const auto& [key_expr, value_expr] : d.items) {
      const Value key = eval(*key_expr, scope);
      if (key.is_undefined()) fail_undefined(key);
      if (!key.is_string()) fail("dict keys must be strings in this engine, got '", type_name(key), "'");
      dict->set(key.as_string(), eval(*value_expr, scope));
    }
    return Value(std::move(dict));
  }

  Value eval_get_item(const GetItemExpr& g, const ScopePtr& scope) {
    const Value object = eval(*g.object, scope);
    if (g.index->kind == ExprKind::Slice) {
      const auto& s = static_cast<const SliceExpr&>(*g.index);
      const Value start = s.start ? eval(*s.start, scope) : Value(nullptr);
      const Value stop = s.stop ? eval(*s.stop, scope) : Value(nullptr);
      const Value step = s.step ? eval(*s.step, scope) : Value(nullptr);
      runtime_.charge_shallow(object);  // a slice copies up to the whole sequence
      return get_slice(object, start, stop, step);
    }
    return get_item(object, eval(*g.index, scope));
  }

  Value eval_compare(const CompareExpr& c, const ScopePtr& scope) {
    Value left = eval(*c.first, scope);
    runtime_.charge_shallow(left);
    for (const auto& [op, operand] : c.rest) {
      Value right = eval(*operand, scope);
      // `in` searches the right operand; ==, < read both up to where they differ.
      runtime_.step();
      runtime_.charge_shallow(right);
      bool ok = false;
      switch (op) {
        case CompareOp::Eq: ok = equals(left, right); break;
        case CompareOp::Ne: ok = !equals(left, right); break;
        case CompareOp::Lt: ok = compare(left, right) < 0; break;
        case CompareOp::Le: ok = compare(left, right) <= 0; break;
        case CompareOp::Gt: ok = compare(left, right) > 0; break;
        case CompareOp::Ge: ok = compare(left, right) >= 0; break;
        case CompareOp::In: ok = contains(right, left); break;
        case CompareOp::NotIn: ok = !contains(right, left); break;
      }
      if (!ok) return Value(false);
      left = std::move(right);
    }
    return Value(true);
  }

  CallArgs eval_args(const Arguments& a, const ScopePtr& scope) {
    CallArgs args;
    for (const auto& p : a.positional) args.positional.push_back(eval(*p, scope));
    if (a.star) {
      for (Value& v : iterate(eval(*a.star, scope))) args.positional.push_back(std::move(v));
    }
    for (const auto& [key, expr] : a.keyword) args.keyword.emplace_back(key, eval(*expr, scope));
    if (a.double_star) {
      const Value extra = eval(*a.double_star, scope);
      if (!extra.is_dict()) fail("argument after ** must be a mapping, not ", type_name(extra));
      for (const auto& [key, value] : extra.as_dict().entries()) {
        for (const auto& existing : args.keyword) {
          if (existing.first == key) fail("got multiple values for keyword argument '", key, "'");
        }
        args.keyword.emplace_back(key, value);
      }
    }
    return args;
  }

  Value call_value(const Value& callee, CallArgs& args) {
    if (callee.is_object() && callee.as_object().callable()) {
      runtime_.step();
      Value result = callee.as_object().call(runtime_, args);
      runtime_.charge_shallow(result);  // range(n), a macro's text: what the call built
      return result;
    }
    if (callee.is_undefined()) fail_undefined(callee);
    fail("'", type_name(callee), "' object is not callable");
  }

  Runtime& runtime_;
  std::shared_ptr<Dict> context_;
  ScopePtr root_;
  std::unordered_map<std::string, Value> globals_;
  int call_depth_ = 0;
  const std::string* output_ = nullptr;  // what run() renders into
};

Value Interpreter::call_macro(const MacroDef& def, const ScopePtr& closure, CallArgs& args) {
  CallDepthGuard guard(*this);
  runtime_.step();
  const size_t n = def.params.size();
  auto kwargs = args.keyword;
  auto take_keyword = [&](std::string_view name) -> std::optional<Value> {
    for (auto it = kwargs.begin(); it != kwargs.end(); ++it) {
      if (it->first == name) {
        Value v = std::move(it->second);
        kwargs.erase(it);
        return v;
      }
    }
    return std::nullopt;
  };
  std::vector<std::optional<Value>> values(n);
  for (size_t i = 0; i < n; ++i) {
    values[i] = i < args.positional.size() ? std::optional<Value>(args.positional[i]) : take_keyword(def.params[i]);
  }
  Value caller = Value::undefined("No caller defined");
  if (def.uses_caller) {
    if (auto given = take_keyword("caller")) caller = std::move(*given);
  }
  if (!def.catch_kwargs && !kwargs.empty()) {
    for (const auto& kv : kwargs) {
      if (kv.first == "caller") {
        fail("macro '", def.name, "' was invoked with two values for the special caller argument");
      }
    }
    fail("macro '", def.name, "' takes no keyword argument '", kwargs.front().first, "'");
  }
  if (!def.catch_varargs && args.positional.size() > n) {
    fail("macro '", def.name, "' takes not more than ", n, " argument(s)");
  }
  ScopePtr scope = child(closure ? closure : root_);
  const size_t first_default = n - def.defaults.size();
  for (size_t i = 0; i < n; ++i) {
    if (values[i]) {
      scope->set(def.params[i], std::move(*values[i]));
    } else if (i >= first_default) {
      scope->set(def.params[i], eval(*def.defaults[i - first_default], scope));
    } else {
      scope->set(def.params[i], Value::undefined(str_cat("parameter '", def.params[i], "' was not provided")));
    }
  }
  if (def.uses_caller) scope->set("caller", caller);
  if (def.catch_kwargs) {
    auto dict = std::make_shared<Dict>();
    for (auto& [k, v] : kwargs) dict->set(k, std::move(v));
    scope->set("kwargs", Value(std::move(dict)));
  }
  if (def.catch_varargs) {
    std::vector<Value> rest;
    for (size_t i = n; i < args.positional.size(); ++i) rest.push_back(args.positional[i]);
    scope->set("varargs", Value::tuple(std::move(rest)));
  }
  std::string out;
  exec_body(def.body, scope, out);
  return Value(std::move(out));
}

std::string Interpreter::render_loop(const ForStmt& s, const ScopePtr& scope, std::vector<Value> items, int64_t depth0) {
  CallDepthGuard guard(*this);
  std::string out;
  run_loop(s, scope, std::move(items), depth0, out);
  return out;
}

Value MacroObject::call(Runtime& /*runtime*/, CallArgs& args) {
  return interpreter_.call_macro(def_, closure_.lock(), args);
}

Value LoopObject::attribute(std::string_view name) const {
  const size_t n = items.size();
  if (name == "index0") return Value(static_cast<int64_t>(index0));
  if (name == "index") return Value(static_cast<int64_t>(index0 + 1));
  if (name == "revindex") return Value(static_cast<int64_t>(n - index0));
  if (name == "revindex0") return Value(static_cast<int64_t>(n - index0 - 1));
  if (name == "first") return Value(index0 == 0);
  if (name == "last") return Value(index0 + 1 == n);
  if (name == "length") return Value(static_cast<int64_t>(n));
  if (name == "depth") return Value(depth0 + 1);
  if (name == "depth0") return Value(depth0);
  if (name == "previtem") return index0 > 0 ? items[index0 - 1] : Value::undefined("there is no previous item");
  if (name == "nextitem") return index0 + 1 < n ? items[index0 + 1] : Value::undefined("there is no next item");
  if (name == "cycle" || name == "changed") {
    auto self = std::const_pointer_cast<LoopObject>(shared_from_this());
    const bool cycle = name == "cycle";
    return Value(std::shared_ptr<Object>(std::make_shared<BuiltinFunction>(
        std::string(name), [self, cycle](Runtime&, CallArgs& args) -> Value {
          if (!args.keyword.empty()) fail("loop.", cycle ? "cycle" : "changed", "() takes no keyword arguments");
          if (cycle) {
            if (args.positional.empty()) fail("no items for cycling given");
            return args.positional[self->index0 % args.positional.size()];
          }
          Value current = Value::tuple(args.positional);
          if (self->last_changed && equals(*self->last_changed, current)) return Value(false);
          self->last_changed = std::move(current);
          return Value(true);
        })));
  }
  return Object::attribute(name);
}

Value LoopObject::call(Runtime& /*runtime*/, CallArgs& args) {
  if (!interpreter || !stmt) fail("The loop must have the 'recursive' marker to be called recursively.");
  if (args.positional.size() != 1 || !args.keyword.empty()) fail("loop() takes exactly one iterable");
  return Value(interpreter->render_loop(*stmt, scope, iterate(args.positional[0]), depth0 + 1));
}

}  // namespace

std::string render_template(const ast::Body& body, const Value& context, const Limits& limits) {
  if (!context.is_dict()) fail("the template context must be a JSON object, got ", type_name(context));
  Runtime runtime(limits);
  Interpreter interpreter(runtime, context.dict_ptr());
  // Declared after the interpreter, so it runs first: namespaces are emptied while the
  // interpreter's scopes still hold everything (see Runtime::track_namespace).
  struct ReleaseNamespaces {
    Runtime& runtime;
    ~ReleaseNamespaces() { runtime.release_namespaces(); }
  } release{runtime};
  return interpreter.run(body);
}

}  // namespace ernie::jinja
