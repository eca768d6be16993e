// The global functions a chat template can call: jinja2's range (with the sandbox's
// 100000-item cap), dict, namespace, cycler and joiner, and transformers'
// raise_exception and strftime_now.
#include <ctime>
#include <limits>
#include <memory>

#include "text/jinja/args.h"
#include "text/jinja/builtins.h"
#include "text/jinja/objects.h"
#include "util/error.h"

namespace ernie::jinja {

namespace {

// jinja2.sandbox.MAX_RANGE
constexpr int64_t kMaxRange = 100000;

Value make_function(const char* name, BuiltinFunction::Function fn) {
  return Value(std::shared_ptr<Object>(std::make_shared<BuiltinFunction>(name, std::move(fn))));
}

Value range(Runtime& runtime, CallArgs& args) {
  if (!args.keyword.empty()) fail("range() takes no keyword arguments");
  const auto& p = args.positional;
  if (p.empty() || p.size() > 3) fail("range expected 1 to 3 arguments, got ", p.size());
  int64_t start = 0;
  int64_t stop = 0;
  int64_t step = 1;
  auto as_int = [](const Value& v) {
    if (v.is_undefined()) fail_undefined(v);
    if (!v.is_integral()) fail("'", type_name(v), "' object cannot be interpreted as an integer");
    return v.as_int();
  };
  if (p.size() == 1) {
    stop = as_int(p[0]);
  } else {
    start = as_int(p[0]);
    stop = as_int(p[1]);
    if (p.size() == 3) step = as_int(p[2]);
  }
  if (step == 0) fail("range() arg 3 must not be zero");
  // Unsigned arithmetic: stop - start cannot overflow when stop > start.
  uint64_t count = 0;
  if (step > 0 && start < stop) {
    count = (static_cast<uint64_t>(stop) - static_cast<uint64_t>(start) - 1) / static_cast<uint64_t>(step) + 1;
  } else if (step < 0 && start > stop) {
    count = (static_cast<uint64_t>(start) - static_cast<uint64_t>(stop) - 1) / (static_cast<uint64_t>(-(step + 1)) + 1) + 1;
  }
  if (count > static_cast<uint64_t>(kMaxRange)) {
    fail("Range too big. The sandbox blocks ranges larger than MAX_RANGE (", kMaxRange, ").");
  }
  runtime.step(count);
  std::vector<Value> items;
  items.reserve(static_cast<size_t>(count));
  for (int64_t i = 0; i < static_cast<int64_t>(count); ++i) items.emplace_back(start + i * step);
  return Value::list(std::move(items));
}

// dict(mapping_or_pairs, **kwargs), shared by dict() and namespace().
Dict build_dict(const char* callee, const CallArgs& args) {
  if (args.positional.size() > 1) fail(callee, "() expected at most 1 argument, got ", args.positional.size());
  Dict dict;
  if (!args.positional.empty()) {
    const Value& source = args.positional[0];
    if (source.is_dict()) {
      dict = source.as_dict();
    } else {
      size_t index = 0;
      for (const Value& pair : iterate(source)) {
        const std::vector<Value> kv = iterate(pair);
        if (kv.size() != 2) {
          fail(callee, "() update sequence element #", index, " has length ", kv.size(), "; 2 is required");
        }
        if (!kv[0].is_string()) fail(callee, "() keys must be strings in this engine, got '", type_name(kv[0]), "'");
        dict.set(kv[0].as_string(), kv[1]);
        ++index;
      }
    }
  }
  for (const auto& [key, value] : args.keyword) dict.set(key, value);
  return dict;
}

class Cycler : public Object, public std::enable_shared_from_this<Cycler> {
 public:
  explicit Cycler(std::vector<Value> items) : items_(std::move(items)) {}
  const char* type_name() const override { return "Cycler"; }
  Value attribute(std::string_view name) const override {
    if (name == "current") return items_[pos_];
    if (name == "items") return Value::tuple(items_);
    if (name == "pos") return Value(static_cast<int64_t>(pos_));
    if (name == "next" || name == "reset") {
      auto self = std::const_pointer_cast<Cycler>(shared_from_this());
      const bool next = name == "next";
      return make_function(next ? "next" : "reset", [self, next](Runtime&, CallArgs& args) {
        BoundArgs(next ? "next" : "reset", args, {});
        if (!next) {
          self->pos_ = 0;
          return Value(nullptr);
        }
        Value current = self->items_[self->pos_];
        self->pos_ = (self->pos_ + 1) % self->items_.size();
        return current;
      });
    }
    return Object::attribute(name);
  }
 private:
  std::vector<Value> items_;
  size_t pos_ = 0;
};

class Joiner : public Object {
 public:
  explicit Joiner(std::string separator) : separator_(std::move(separator)) {}
  const char* type_name() const override { return "Joiner"; }
  bool callable() const override { return true; }
  Value call(Runtime&, CallArgs& args) override {
    BoundArgs("joiner", args, {});
    if (!used_) {
      used_ = true;
      return Value("");
    }
    return Value(separator_);
  }

 private:
  std::string separator_;
  bool used_ = false;
};

Value strftime_now(Runtime&, CallArgs& args) {
  const BoundArgs a("strftime_now", args, {"format"});
  const std::string& format = expect_string(a.required(0), "strftime_now() format");
  if (format.empty()) return Value("");
  const std::time_t now = std::time(nullptr);
  std::tm local{};
  localtime_r(&now, &local);
  // strftime returns 0 both for "buffer too small" and for an empty result; grow a
  // few times, then accept the empty result.
  for (size_t size = 256; size <= (size_t{1} << 16); size *= 4) {
    std::string buf(size + format.size() * 8, '\0');
    const size_t n = std::strftime(buf.data(), buf.size(), format.c_str(), &local);
    if (n > 0) {
      buf.resize(n);
      return Value(std::move(buf));
    }
  }
  return Value("");
}

}  // namespace

Value global_value(std::string_view name) {
  if (name == "range") return make_function("range", range);
  if (name == "dict") {
    return make_function("dict", [](Runtime&, CallArgs& args) {
      return Value(std::make_shared<Dict>(build_dict("dict", args)));
    });
  }
  if (name == "namespace") {
    return make_function("namespace", [](Runtime& runtime, CallArgs& args) {
      auto ns = std::make_shared<Namespace>();
      ns->attrs() = build_dict("namespace", args);
      runtime.track_namespace(ns);
      return Value(std::shared_ptr<Object>(std::move(ns)));
    });
  }
  if (name == "cycler") {
    return make_function("cycler", [](Runtime&, CallArgs& args) {
      if (!args.keyword.empty()) fail("cycler() takes no keyword arguments");
      if (args.positional.empty()) fail("at least one item has to be provided");
      return Value(std::shared_ptr<Object>(std::make_shared<Cycler>(args.positional)));
    });
  }
  if (name == "joiner") {
    return make_function("joiner", [](Runtime&, CallArgs& args) {
      const BoundArgs a("joiner", args, {"sep"});
      const std::string sep = a.has(0) ? expect_string(a.get(0), "joiner() sep") : std::string(", ");
      return Value(std::shared_ptr<Object>(std::make_shared<Joiner>(sep)));
    });
  }
  if (name == "raise_exception") {
    return make_function("raise_exception", [](Runtime&, CallArgs& args) -> Value {
      const BoundArgs a("raise_exception", args, {"message"});
      fail(to_str(a.required(0)));
    });
  }
  if (name == "strftime_now") return make_function("strftime_now", strftime_now);
  return Value::undefined(str_cat("'", name, "' is undefined"));
}

}  // namespace ernie::jinja
