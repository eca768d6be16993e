#include "text/jinja/template.h"

#include <new>

#include "text/jinja/ast.h"
#include "text/jinja/interpreter.h"
#include "text/jinja/json_convert.h"
#include "text/jinja/parser.h"
#include "util/error.h"

namespace ernie::jinja {

struct Template::Parsed {
  ast::Body body;
};

Template Template::parse(std::string_view source) {
  auto parsed = std::make_shared<Parsed>();
  parsed->body = parse_template(source);
  return Template(std::move(parsed));
}

std::string Template::render(const nlohmann::ordered_json& context) const { return render(context, Limits{}); }

std::string Template::render(const nlohmann::ordered_json& context, const Limits& limits) const {
  if (!context.is_object()) fail("the template context must be a JSON object, got ", context.type_name());
  try {
    return render_template(parsed_->body, from_json(context), limits);
  } catch (const std::bad_alloc&) {
    fail("out of memory while rendering the template");
  }
}

}  // namespace ernie::jinja
