// JSON in and out of templates. Inputs keep their object key order (ordered_json), and
// `tojson` writes what Python's json.dumps writes, byte for byte, because transformers'
// chat templates serialise tool schemas with it and the model saw exactly that text.
#pragma once

#include <nlohmann/json.hpp>
#include <optional>
#include <string>

#include "text/jinja/value.h"

namespace ernie::jinja {

// JSON integers become ints (those beyond int64 become floats), floats stay floats.
Value from_json(const nlohmann::ordered_json& json);

// The parameters of json.dumps that transformers' tojson exposes.
struct JsonDumpOptions {
  bool ensure_ascii = false;
  std::optional<std::string> indent;  // nullopt: one line; otherwise the per-level indent
  std::optional<std::string> item_separator;  // default ", " (one line) or "," (indented)
  std::string key_separator = ": ";
  bool sort_keys = false;
};

// json.dumps(value, ...). Throws for values JSON cannot hold (undefined, iterators,
// namespaces), as Python raises TypeError.
std::string dump_json(const Value& value, const JsonDumpOptions& options);

}  // namespace ernie::jinja
