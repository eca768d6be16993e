#include "text/jinja/json_convert.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <limits>

#include "text/jinja/pystr.h"
#include "text/jinja/runtime.h"
#include "util/error.h"

namespace ernie::jinja {

namespace {

Value from_json_at(const nlohmann::ordered_json& json, uint32_t depth);

}  // namespace

Value from_json(const nlohmann::ordered_json& json) { return from_json_at(json, 0); }

namespace {

Value from_json_at(const nlohmann::ordered_json& json, uint32_t depth) {
  using Type = nlohmann::ordered_json::value_t;
  if (depth > kMaxValueDepth) fail("JSON input nested more than ", kMaxValueDepth, " levels deep");
  switch (json.type()) {
    case Type::null: return Value(nullptr);
    case Type::boolean: return Value(json.get<bool>());
    case Type::number_integer: return Value(json.get<int64_t>());
    case Type::number_unsigned: {
      const auto u = json.get<uint64_t>();
      if (u <= static_cast<uint64_t>(std::numeric_limits<int64_t>::max())) return Value(static_cast<int64_t>(u));
      return Value(static_cast<double>(u));
    }
    case Type::number_float: return Value(json.get<double>());
    case Type::string: return Value(json.get<std::string>());
    case Type::array: {
      std::vector<Value> items;
      items.reserve(json.size());
      for (const auto& item : json) items.push_back(from_json_at(item, depth + 1));
      return Value::list(std::move(items));
    }
    case Type::object: {
      auto dict = std::make_shared<Dict>();
      for (const auto& [key, item] : json.items()) dict->append_new(key, from_json_at(item, depth + 1));
      return Value(std::move(dict));
    }
    case Type::binary: fail("binary JSON values cannot be passed to a template; expected text, numbers, arrays or objects");
    case Type::discarded: return Value(nullptr);
  }
  return Value(nullptr);
}

void append_escaped(std::string& out, const std::string& s, bool ensure_ascii) {
  out.push_back('"');
  auto append_u = [&out](unsigned code) {
    char buf[16];
    std::snprintf(buf, sizeof buf, "\\u%04x", code);
    out += buf;
  };
  for (char32_t c : pystr::decode(s)) {
    switch (c) {
      case '"': out += "\\\""; continue;
      case '\\': out += "\\\\"; continue;
      case '\n': out += "\\n"; continue;
      case '\r': out += "\\r"; continue;
      case '\t': out += "\\t"; continue;
      case '\b': out += "\\b"; continue;
      case '\f': out += "\\f"; continue;
      default: break;
    }
    if (c < 0x20) {
      append_u(static_cast<unsigned>(c));
    } else if (ensure_ascii && c > 0x7F) {
      if (c >= 0x10000) {
        const char32_t v = c - 0x10000;
        append_u(static_cast<unsigned>(0xD800 + (v >> 10)));
        append_u(static_cast<unsigned>(0xDC00 + (v & 0x3FF)));
      } else {
        append_u(static_cast<unsigned>(c));
      }
    } else {
      pystr::append_utf8(out, c);
    }
  }
  out.push_back('"');
}

class JsonWriter {
 public:
  explicit JsonWriter(const JsonDumpOptions& options) : options_(options) {
    item_separator_ = options.item_separator.value_or(options.indent ? "," : ", ");
  }

  void write(const Value& v, int level) {
    // A list holding one sublist twice writes it twice: charge and cap as the text
    // grows, so a value built in a few steps cannot dump exponentially long.
    check_current_string(out_.size());
    charge_current_steps(1);
    switch (v.type()) {
      case Value::Type::None: out_ += "null"; return;
      case Value::Type::Bool: out_ += v.as_bool() ? "true" : "false"; return;
      case Value::Type::Int: out_ += std::to_string(v.as_int()); return;
      case Value::Type::Float: write_float(v.as_double()); return;
      case Value::Type::String:
        charge_current_bytes(v.as_string().size());
        append_escaped(out_, v.as_string(), options_.ensure_ascii);
        return;
      case Value::Type::List: write_list(v.as_list(), level); return;
      case Value::Type::Dict: write_dict(v.as_dict(), level); return;
      default: fail("Object of type ", type_name(v), " is not JSON serializable");
    }
  }

  std::string take() { return std::move(out_); }

 private:
  void write_float(double f) {
    // Python writes the float repr, and NaN/Infinity bare (allow_nan=True).
    if (std::isnan(f)) {
      out_ += "NaN";
    } else if (std::isinf(f)) {
      out_ += f > 0 ? "Infinity" : "-Infinity";
    } else {
      out_ += pystr::format_float(f);
    }
  }

  void newline(int level) {
    out_.push_back('\n');
    for (int i = 0; i < level; ++i) out_ += *options_.indent;
  }

  void write_list(const List& list, int level) {
    if (list.items.empty()) {
      out_ += "[]";
      return;
    }
    out_.push_back('[');
    for (size_t i = 0; i < list.items.size(); ++i) {
      if (i > 0) out_ += item_separator_;
      if (options_.indent) newline(level + 1);
      write(list.items[i], level + 1);
    }
    if (options_.indent) newline(level);
    out_.push_back(']');
  }

  void write_dict(const Dict& dict, int level) {
    if (dict.empty()) {
      out_ += "{}";
      return;
    }
    std::vector<const Dict::Entry*> entries;
    entries.reserve(dict.size());
    for (const auto& entry : dict.entries()) entries.push_back(&entry);
    if (options_.sort_keys) {
      std::stable_sort(entries.begin(), entries.end(),
                       [](const Dict::Entry* a, const Dict::Entry* b) { return a->first < b->first; });
    }
    out_.push_back('{');
    for (size_t i = 0; i < entries.size(); ++i) {
      if (i > 0) out_ += item_separator_;
      if (options_.indent) newline(level + 1);
      append_escaped(out_, entries[i]->first, options_.ensure_ascii);
      out_ += options_.key_separator;
      write(entries[i]->second, level + 1);
    }
    if (options_.indent) newline(level);
    out_.push_back('}');
  }

  const JsonDumpOptions& options_;
  std::string item_separator_;
  std::string out_;
};

}  // namespace

std::string dump_json(const Value& value, const JsonDumpOptions& options) {
  JsonWriter writer(options);
  writer.write(value, 0);
  return writer.take();
}

}  // namespace ernie::jinja
