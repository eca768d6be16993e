// Binds the arguments of a call to a builtin's named parameters the way Python binds
// them, so `x|tojson(indent=2)`, `x|tojson(false, 2)` and wrong calls behave as in
// jinja2 (a TypeError there is an ernie::Error here).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "text/jinja/value.h"

namespace ernie::jinja {

class BoundArgs {
 public:
  // Throws on more positional arguments than `params`, unknown keywords, and
  // parameters given twice.
  BoundArgs(std::string_view callee, const CallArgs& args, std::vector<std::string_view> params);

  bool has(size_t i) const { return given_[i]; }
  // Undefined when not given.
  const Value& get(size_t i) const { return values_[i]; }
  Value get_or(size_t i, Value fallback) const { return given_[i] ? values_[i] : std::move(fallback); }
  // Throws unless the parameter was given.
  const Value& required(size_t i) const;
  // Integer parameters (bools count, as in Python); throws for other types.
  int64_t get_int(size_t i, int64_t fallback) const;
  bool get_truthy(size_t i, bool fallback) const;
  // A str parameter, or nullopt when not given or None.
  std::optional<std::string> get_string(size_t i) const;

 private:
  std::string callee_;
  std::vector<std::string_view> params_;
  std::vector<Value> values_;
  std::vector<bool> given_;
};

// Integer value of an int/bool argument; throws naming `what` otherwise.
int64_t expect_int(const Value& v, std::string_view what);
// The str of a str argument; throws naming `what` otherwise.
const std::string& expect_string(const Value& v, std::string_view what);

}  // namespace ernie::jinja
