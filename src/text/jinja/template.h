// A Jinja2 template engine for Hugging Face chat templates. It renders what
// transformers renders: jinja2's ImmutableSandboxedEnvironment with trim_blocks,
// lstrip_blocks and the loopcontrols extension, transformers' tojson (insertion order,
// no HTML escaping) and its raise_exception / strftime_now globals. See
// docs/chat-templates.md for what is supported and where it differs from jinja2.
//
// Parse once, render many times: a Template is immutable and may be rendered from
// several threads at once.
#pragma once

#include <memory>
#include <nlohmann/json.hpp>
#include <string>
#include <string_view>

#include "text/jinja/runtime.h"

namespace ernie::jinja {


class Template {
 public:
  // Throws ernie::Error ("line L, column C: ...") on syntax errors, unknown tags,
  // unclosed blocks, and unknown filters or tests outside if-branches.
  static Template parse(std::string_view source);

  // `context` must be a JSON object; its keys become template variables (object key
  // order is kept, e.g. for tojson). Throws ernie::Error on runtime errors, on
  // raise_exception(), and when a limit is exceeded.
  std::string render(const nlohmann::ordered_json& context) const;
  std::string render(const nlohmann::ordered_json& context, const Limits& limits) const;

 private:
  struct Parsed;
  explicit Template(std::shared_ptr<const Parsed> parsed) : parsed_(std::move(parsed)) {}
  std::shared_ptr<const Parsed> parsed_;
};

}  // namespace ernie::jinja
