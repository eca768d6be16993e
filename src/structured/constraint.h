// What a request asks its output to be, in one form whatever field said it
// (`response_format`, `guided_json`, `guided_regex`, `guided_choice`, `guided_grammar`),
// and the grammar it compiles to.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "structured/grammar.h"

namespace ernie::structured {

struct ConstraintSpec {
  // kStructuralTag: text is {"structures": [...], "triggers": [...]} (structural_tag.h).
  // kToolCalls: text is {"structures": [...], "min": m, "max": n (-1: no bound)}, each
  // structure a call in the tool-call format; the server builds it for tool_choice.
  enum class Kind { kJsonSchema, kJsonObject, kRegex, kChoice, kGrammar, kStructuralTag, kToolCalls };
  Kind kind = Kind::kJsonObject;
  std::string text = {};                  // the schema (JSON text), the regex, the EBNF or the tag
  std::vector<std::string> choices = {};  // kChoice
  bool any_whitespace = true;        // JSON kinds: see JsonGrammarOptions

  // Identifies the compiled grammar (for a cache of them).
  std::string key() const;
};

// Throws ernie::Error saying what is wrong with the constraint (a 400 for the client).
Grammar compile_constraint(const ConstraintSpec& spec);

// A constraint ready for the engine: its grammar and the key that identifies it.
struct CompiledConstraint {
  std::string key;
  Grammar grammar;
};
std::shared_ptr<const CompiledConstraint> compile(const ConstraintSpec& spec);

// guided_choice: exactly one of the strings (at least one, none empty).
Grammar compile_choices(const std::vector<std::string>& choices);

}  // namespace ernie::structured
