// The Object kinds the builtins create: namespace(), builtin functions and bound
// methods. (Macros and loop contexts live with the interpreter, which runs them.)
#pragma once

#include <functional>
#include <memory>
#include <string>
#include <string_view>

#include "text/jinja/value.h"

namespace ernie::jinja {

// jinja2's Namespace: attributes set with {% set ns.attr = value %}.
class Namespace : public Object {
 public:
  const char* type_name() const override { return "Namespace"; }
  Value attribute(std::string_view name) const override;
  std::string repr() const override;
  void release() override { attrs_ = Dict(); }
  Namespace* as_namespace() override { return this; }

  void set(std::string name, Value value) { attrs_.set(std::move(name), std::move(value)); }
  Dict& attrs() { return attrs_; }

 private:
  Dict attrs_;
};

class BuiltinFunction : public Object {
 public:
  using Function = std::function<Value(Runtime&, CallArgs&)>;
  BuiltinFunction(std::string name, Function fn) : name_(std::move(name)), fn_(std::move(fn)) {}
  const char* type_name() const override { return "builtin_function_or_method"; }
  bool callable() const override { return true; }
  Value call(Runtime& runtime, CallArgs& args) override { return fn_(runtime, args); }
  std::string repr() const override { return "<built-in function " + name_ + ">"; }

 private:
  std::string name_;
  Function fn_;
};

// A method looked up on a str, list or dict ("abc".upper), waiting to be called.
class BoundMethod : public Object {
 public:
  BoundMethod(Value receiver, std::string name) : receiver_(std::move(receiver)), name_(std::move(name)) {}
  const char* type_name() const override { return "builtin_function_or_method"; }
  bool callable() const override { return true; }
  Value call(Runtime& runtime, CallArgs& args) override;
  std::string repr() const override;

 private:
  Value receiver_;
  std::string name_;
};

}  // namespace ernie::jinja
