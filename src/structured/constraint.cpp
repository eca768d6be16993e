#include "structured/constraint.h"

#include <nlohmann/json.hpp>

#include "structured/ebnf.h"
#include "structured/json_schema.h"
#include "structured/regex.h"
#include "structured/structural_tag.h"
#include "util/error.h"

namespace ernie::structured {

std::string ConstraintSpec::key() const {
  std::string key = std::to_string(static_cast<int>(kind)) + (any_whitespace ? "w" : "c") + ":" + text;
  for (const std::string& choice : choices) key += '\0' + choice;
  return key;
}

Grammar compile_choices(const std::vector<std::string>& choices) {
  if (choices.empty()) fail("guided_choice needs at least one choice");
  GrammarBuilder builder;
  const int32_t root = builder.add_rule("choice");
  for (const std::string& choice : choices) {
    if (choice.empty()) fail("guided_choice choices must not be empty strings");
    builder.add_alternative(root, GrammarBuilder::literal(choice));
  }
  return builder.build(root);
}

Grammar compile_constraint(const ConstraintSpec& spec) {
  const JsonGrammarOptions json_options{.any_whitespace = spec.any_whitespace};
  switch (spec.kind) {
    case ConstraintSpec::Kind::kJsonObject: return compile_json_object(json_options);
    case ConstraintSpec::Kind::kJsonSchema: {
      const nlohmann::ordered_json schema = nlohmann::ordered_json::parse(spec.text, nullptr, false);
      if (schema.is_discarded()) fail("the JSON schema is not valid JSON");
      return compile_json_schema(schema, json_options);
    }
    case ConstraintSpec::Kind::kRegex: return compile_regex(spec.text);
    case ConstraintSpec::Kind::kChoice: return compile_choices(spec.choices);
    case ConstraintSpec::Kind::kGrammar: return parse_ebnf(spec.text);
    case ConstraintSpec::Kind::kStructuralTag:
    case ConstraintSpec::Kind::kToolCalls: {
      const nlohmann::ordered_json tag = nlohmann::ordered_json::parse(spec.text, nullptr, false);
      if (tag.is_discarded()) fail("structural_tag is not valid JSON");
      std::vector<TaggedStructure> structures;
      std::vector<std::string> triggers;
      if (spec.kind == ConstraintSpec::Kind::kStructuralTag) {
        parse_structural_tag(tag, structures, triggers);
        return compile_structural_tag(structures, triggers, json_options);
      }
      for (const auto& structure : tag.at("structures"))
        structures.push_back({structure.at("begin").get<std::string>(), structure.at("schema"),
                              structure.at("end").get<std::string>()});
      return compile_structure_sequence(structures, tag.value("separator", "\n"), tag.at("min").get<int>(),
                                        tag.at("max").get<int>(), json_options);
    }
  }
  fail("unknown constraint kind");
}

std::shared_ptr<const CompiledConstraint> compile(const ConstraintSpec& spec) {
  return std::make_shared<const CompiledConstraint>(CompiledConstraint{spec.key(), compile_constraint(spec)});
}

}  // namespace ernie::structured
