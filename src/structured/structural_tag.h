// Tagged JSON inside text: `structural_tag` (xgrammar's format, which FastDeploy passes
// on) and the forced tool calls of `tool_choice: "required"` or a named function.
//
// structural_tag: {"structures": [{"begin": B, "schema": S, "end": E}, ...],
// "triggers": [T, ...]}. The output is free text, except that wherever a trigger appears
// it must go on as one structure whose begin starts with that trigger: the rest of B, a
// JSON value of schema S, then E; free text follows again. Every begin must start with a
// trigger. The output may end anywhere in free text.
#pragma once

#include <nlohmann/json.hpp>
#include <string>
#include <vector>

#include "structured/grammar.h"
#include "structured/json_schema.h"

namespace ernie::structured {

struct TaggedStructure {
  std::string begin;
  nlohmann::ordered_json schema;
  std::string end;
};

// Limits on what one structural_tag may hold.
inline constexpr size_t kMaxStructures = 256;
inline constexpr size_t kMaxTriggerBytes = 4096;  // all triggers together

// Parses {"structures": [...], "triggers": [...]} (extra keys such as "type" ignored);
// throws ernie::Error naming what is malformed.
void parse_structural_tag(const nlohmann::ordered_json& tag, std::vector<TaggedStructure>& structures,
                          std::vector<std::string>& triggers);

Grammar compile_structural_tag(const std::vector<TaggedStructure>& structures, const std::vector<std::string>& triggers,
                               const JsonGrammarOptions& options = {});

// Structures only, no free text: between `min` and `max` (max < 0: no bound)
// structures, each followed by `separator` when another comes, with up to two newlines
// before the first and after the last (a model's tool-call blocks sit on lines of their own).
Grammar compile_structure_sequence(const std::vector<TaggedStructure>& structures, const std::string& separator,
                                   int min, int max, const JsonGrammarOptions& options = {});

}  // namespace ernie::structured
