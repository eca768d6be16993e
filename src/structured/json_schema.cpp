#include "structured/json_schema.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <vector>

#include "structured/ebnf.h"
#include "structured/regex.h"
#include "util/error.h"

namespace ernie::structured {
namespace {

using json = nlohmann::ordered_json;

// Keywords that only describe: they never change which documents are valid.
const std::set<std::string> kAnnotations = {"title", "description", "default", "examples", "$schema", "$id",
                                            "$comment", "deprecated", "readOnly", "writeOnly", "$defs", "definitions",
                                            "strict", "name"};
const std::set<std::string> kSupported = {"type", "properties", "required", "additionalProperties", "items",
                                          "prefixItems", "minItems", "maxItems", "enum", "const", "anyOf", "oneOf",
                                          "$ref", "minLength", "maxLength", "format", "allOf", "pattern",
                                          "minimum", "maximum", "exclusiveMinimum", "exclusiveMaximum"};

// Integer bounds beyond this magnitude are refused (JSON Schema allows any, but no real
// schema needs more, and the digit arithmetic stays within int64).
constexpr int64_t kMaxIntegerBound = 1'000'000'000'000'000'000;

// EBNF for the decimal numerals of [lo, hi] that all have the same number of digits
// (lo <= hi, equal lengths): digit by digit, splitting where lo and hi part.
std::string same_length_range(const std::string& lo, const std::string& hi) {
  const size_t n = lo.size();
  if (n == 1) return lo == hi ? "\"" + lo + "\"" : "[" + lo + "-" + hi + "]";
  if (lo[0] == hi[0]) return "\"" + lo.substr(0, 1) + "\" " + same_length_range(lo.substr(1), hi.substr(1));
  const std::string zeros(n - 1, '0'), nines(n - 1, '9');
  const std::string any = "[0-9]{" + std::to_string(n - 1) + "}";
  if (lo.substr(1) == zeros && hi.substr(1) == nines) return "[" + lo.substr(0, 1) + "-" + hi.substr(0, 1) + "] " + any;
  std::string body = "( \"" + lo.substr(0, 1) + "\" " + same_length_range(lo.substr(1), nines);
  if (hi[0] - lo[0] > 1)
    body += " | [" + std::string(1, static_cast<char>(lo[0] + 1)) + "-" + std::string(1, static_cast<char>(hi[0] - 1)) + "] " + any;
  return body + " | \"" + hi.substr(0, 1) + "\" " + same_length_range(zeros, hi.substr(1)) + " )";
}

// EBNF for the numerals of the integers in [lo, hi] (hi < 0: no upper bound), lo >= 0,
// without leading zeros.
std::string natural_range(int64_t lo, int64_t hi) {
  std::vector<std::string> parts;
  const std::string low = std::to_string(lo);
  const size_t last = hi < 0 ? low.size() : std::to_string(hi).size();
  for (size_t digits = low.size(); digits <= last; ++digits) {
    const std::string first = digits == low.size() ? low : "1" + std::string(digits - 1, '0');
    const std::string top = hi >= 0 && digits == last ? std::to_string(hi) : std::string(digits, '9');
    parts.push_back(same_length_range(first, top));
  }
  if (hi < 0) parts.push_back("[1-9] [0-9]{" + std::to_string(low.size()) + ",}");  // every longer numeral
  std::string body;
  for (const std::string& part : parts) body += (body.empty() ? "" : " | ") + part;
  return "( " + body + " )";
}

// An EBNF string literal for `text` (its bytes as they must appear in the output).
std::string literal(const std::string& text) {
  std::string out = "\"";
  for (char c : text) {
    if (c == '"' || c == '\\') out += '\\';
    if (c == '\n') {
      out += "\\n";
      continue;
    }
    out += c;
  }
  return out + "\"";
}

class SchemaWriter {
 public:
  SchemaWriter(const json& root, const JsonGrammarOptions& options) : root_(root), options_(options) {}

  std::string write() {
    const std::string start = rule_for(root_, "#");
    std::ostringstream out;
    out << "root ::= " << start << "\n";
    // Free whitespace is bounded per gap: a model that likes blank space (any text model
    // asked for JSON it was not trained on) would otherwise fill max_tokens with it.
    out << "ws ::= " << (options_.any_whitespace ? "[ \\t\\n]{0," + std::to_string(kMaxJsonWhitespace) + "}" : "\"\"") << "\n";
    out << "comma ::= " << (options_.any_whitespace ? "ws \",\" ws" : "\", \"") << "\n";
    out << "colon ::= " << (options_.any_whitespace ? "ws \":\" ws" : "\": \"") << "\n";
    out << "json-char ::= [^\"\\\\\\x00-\\x1f] | \"\\\\\" ( [\"\\\\/bfnrt] | \"u\" [0-9a-fA-F]{4} )\n";
    out << "json-string ::= \"\\\"\" json-char* \"\\\"\"\n";
    out << "json-integer ::= \"-\"? ( \"0\" | [1-9] [0-9]* )\n";
    out << "json-number ::= json-integer ( \".\" [0-9]+ )? ( [eE] [-+]? [0-9]+ )?\n";
    out << "json-value ::= json-object | json-array | json-string | json-number | \"true\" | \"false\" | \"null\"\n";
    out << "json-object ::= \"{\" ws ( json-string colon json-value ( comma json-string colon json-value )* )? ws \"}\"\n";
    out << "json-array ::= \"[\" ws ( json-value ( comma json-value )* )? ws \"]\"\n";
    out << "hex ::= [0-9a-fA-F]\n";
    out << "date ::= [0-9]{4} \"-\" ( \"0\" [1-9] | \"1\" [0-2] ) \"-\" ( \"0\" [1-9] | [12] [0-9] | \"3\" [01] )\n";
    out << "time ::= ( [01] [0-9] | \"2\" [0-3] ) \":\" [0-5] [0-9] \":\" [0-5] [0-9] ( \".\" [0-9]+ )? "
           "( \"Z\" | [+-] ( [01] [0-9] | \"2\" [0-3] ) \":\" [0-5] [0-9] )\n";
    for (const std::string& rule : rules_) out << rule << "\n";
    return out.str();
  }

 private:
  [[noreturn]] static void refuse(const std::string& pointer, const std::string& what) {
    fail("JSON schema at ", pointer, ": ", what);
  }

  std::string new_rule(const std::string& body) {
    const std::string name = "s" + std::to_string(counter_++);
    rules_.push_back(name + " ::= " + body);
    return name;
  }

  std::string rule_for(const json& schema, const std::string& pointer) {
    if (schema.is_boolean()) {
      if (!schema.get<bool>()) refuse(pointer, "the schema false matches nothing");
      return "json-value";
    }
    if (!schema.is_object()) refuse(pointer, "a schema must be an object or a boolean");
    for (const auto& [key, value] : schema.items())
      if (!kSupported.count(key) && !kAnnotations.count(key))
        refuse(pointer, "the keyword \"" + key + "\" is not supported (structured output refuses what it cannot enforce)");
    if (schema.contains("$ref")) return reference(schema, pointer);
    if (schema.contains("allOf")) {
      const json& all = schema.at("allOf");
      if (!all.is_array() || all.size() != 1) refuse(pointer, "allOf is supported with exactly one schema");
      return rule_for(all.at(0), pointer + "/allOf/0");
    }
    for (const char* key : {"anyOf", "oneOf"}) {
      if (!schema.contains(key)) continue;
      const json& branches = schema.at(key);
      if (!branches.is_array() || branches.empty()) refuse(pointer, std::string(key) + " must be a non-empty array");
      std::string body;
      for (size_t i = 0; i < branches.size(); ++i)
        body += (i ? " | " : "") + rule_for(branches[i], pointer + "/" + key + "/" + std::to_string(i));
      return new_rule(body);
    }
    if (schema.contains("const")) return new_rule(literal(schema.at("const").dump()));
    if (schema.contains("enum")) {
      const json& values = schema.at("enum");
      if (!values.is_array() || values.empty()) refuse(pointer, "enum must be a non-empty array");
      std::string body;
      for (size_t i = 0; i < values.size(); ++i) body += (i ? " | " : "") + literal(values[i].dump());
      return new_rule(body);
    }
    std::vector<std::string> types;
    if (schema.contains("type")) {
      const json& type = schema.at("type");
      if (type.is_string()) types.push_back(type.get<std::string>());
      else if (type.is_array())
        for (const json& t : type) types.push_back(t.get<std::string>());
      else refuse(pointer, "type must be a string or an array of strings");
    } else if (schema.contains("properties") || schema.contains("additionalProperties")) {
      types.push_back("object");
    } else if (schema.contains("items") || schema.contains("prefixItems")) {
      types.push_back("array");
    } else if (schema.contains("minimum") || schema.contains("maximum") || schema.contains("exclusiveMinimum") ||
               schema.contains("exclusiveMaximum")) {
      refuse(pointer, "minimum and maximum need \"type\": \"integer\" beside them");
    } else if (schema.contains("minLength") || schema.contains("maxLength") || schema.contains("format")) {
      types.push_back("string");
    } else {
      return "json-value";
    }
    std::string body;
    for (size_t i = 0; i < types.size(); ++i) body += (i ? " | " : "") + typed(schema, types[i], pointer);
    return types.size() == 1 ? body : new_rule(body);
  }

  std::string reference(const json& schema, const std::string& pointer) {
    const std::string ref = schema.at("$ref").get<std::string>();
    const auto found = refs_.find(ref);
    if (found != refs_.end()) return found->second;
    const json* target = nullptr;
    for (const char* prefix : {"#/$defs/", "#/definitions/"}) {
      const std::string p = prefix;
      if (ref.rfind(p, 0) == 0) {
        const std::string section = p.substr(2, p.size() - 3);
        const std::string name = ref.substr(p.size());
        if (root_.contains(section) && root_.at(section).contains(name)) target = &root_.at(section).at(name);
      }
    }
    if (ref == "#") target = &root_;
    if (target == nullptr) refuse(pointer, "$ref \"" + ref + "\" does not point into #/$defs or #/definitions");
    // Named before it is written, so a recursive reference finds it.
    const std::string name = "s" + std::to_string(counter_++);
    refs_[ref] = name;
    const std::string body = rule_for(*target, ref);
    rules_.push_back(name + " ::= " + body);
    return name;
  }

  static int count(const json& schema, const char* key, const std::string& pointer) {
    if (!schema.contains(key)) return -1;
    const json& value = schema.at(key);
    if (!value.is_number_integer() || value.get<int64_t>() < 0 || value.get<int64_t>() > 10000)
      refuse(pointer, std::string(key) + " must be an integer from 0 to 10000");
    return static_cast<int>(value.get<int64_t>());
  }

  std::string typed(const json& schema, const std::string& type, const std::string& pointer) {
    if (type == "null") return "\"null\"";
    if (type == "boolean") return "( \"true\" | \"false\" )";
    if (type == "integer") return integer_rule(schema, pointer);
    if (type == "number" && (schema.contains("minimum") || schema.contains("maximum") ||
                             schema.contains("exclusiveMinimum") || schema.contains("exclusiveMaximum")))
      refuse(pointer, "minimum and maximum are supported on integers only, not on numbers");
    if (type == "number") return "json-number";
    if (type == "string") return string_rule(schema, pointer);
    if (type == "array") return array_rule(schema, pointer);
    if (type == "object") return object_rule(schema, pointer);
    refuse(pointer, "unknown type \"" + type + "\"");
  }

  // An integer within minimum / maximum / exclusiveMinimum / exclusiveMaximum.
  std::string integer_rule(const json& schema, const std::string& pointer) {
    std::optional<int64_t> lo, hi;
    const auto bound = [&](const char* key, bool lower, bool exclusive) {
      if (!schema.contains(key)) return;
      const json& value = schema.at(key);
      if (!value.is_number() || std::abs(value.get<double>()) > static_cast<double>(kMaxIntegerBound))
        refuse(pointer, std::string(key) + " must be a number of magnitude at most 1e18");
      const double v = value.get<double>();
      // The integers above (below) a bound: ceil (floor), one further when it is exclusive
      // and itself an integer.
      int64_t integer = static_cast<int64_t>(lower ? std::ceil(v) : std::floor(v));
      if (value.is_number_integer()) integer = value.get<int64_t>();
      if (exclusive && static_cast<double>(integer) == v) integer += lower ? 1 : -1;
      std::optional<int64_t>& side = lower ? lo : hi;
      side = side ? (lower ? std::max(*side, integer) : std::min(*side, integer)) : integer;
    };
    bound("minimum", true, false);
    bound("exclusiveMinimum", true, true);
    bound("maximum", false, false);
    bound("exclusiveMaximum", false, true);
    if (!lo && !hi) return "json-integer";
    if (lo && hi && *lo > *hi) refuse(pointer, "no integer lies between the minimum and the maximum");
    std::vector<std::string> parts;
    // Negative values: "-" and the magnitudes; zero and up: the numerals.
    if (!lo || *lo < 0) {
      const int64_t smallest = hi && *hi < 0 ? -*hi : 1;
      parts.push_back("\"-\" " + natural_range(smallest, lo ? -*lo : -1));
    }
    if (!hi || *hi >= 0) parts.push_back(natural_range(lo && *lo > 0 ? *lo : 0, hi ? *hi : -1));
    std::string body;
    for (const std::string& part : parts) body += (body.empty() ? "" : " | ") + part;
    return new_rule(body);
  }

  std::string string_rule(const json& schema, const std::string& pointer) {
    if (schema.contains("format")) {
      const std::string format = schema.at("format").get<std::string>();
      std::string inner;
      if (format == "date") inner = "date";
      else if (format == "time") inner = "time";
      else if (format == "date-time") inner = "date \"T\" time";
      else if (format == "uuid") inner = "hex{8} \"-\" hex{4} \"-\" hex{4} \"-\" hex{4} \"-\" hex{12}";
      else if (format == "email") inner = "[a-zA-Z0-9._%+-]+ \"@\" [a-zA-Z0-9-]+ ( \".\" [a-zA-Z0-9-]+ )+";
      else refuse(pointer, "the string format \"" + format + "\" is not supported");
      if (schema.contains("minLength") || schema.contains("maxLength"))
        refuse(pointer, "minLength / maxLength together with format are not supported");
      return new_rule("\"\\\"\" " + inner + " \"\\\"\"");
    }
    if (schema.contains("pattern")) {
      if (schema.contains("minLength") || schema.contains("maxLength"))
        refuse(pointer, "minLength / maxLength together with pattern are not supported");
      if (!schema.at("pattern").is_string()) refuse(pointer, "pattern must be a string");
      // JSON Schema patterns search the string: unanchored ends may have anything around.
      std::string pattern = schema.at("pattern").get<std::string>();
      const bool anchored_start = !pattern.empty() && pattern.front() == '^';
      const bool anchored_end = pattern.size() >= 2 ? pattern.back() == '$' && pattern[pattern.size() - 2] != '\\'
                                                    : pattern == "$";
      pattern = (anchored_start ? "" : "[\\s\\S]*") + std::string("(?:") +
                pattern.substr(anchored_start ? 1 : 0, pattern.size() - (anchored_start ? 1 : 0) - (anchored_end ? 1 : 0)) +
                ")" + (anchored_end ? "" : "[\\s\\S]*");
      const std::string name = "pattern-" + std::to_string(counter_++);
      external_[name] = [pattern, name](GrammarBuilder& builder) {
        return add_regex_rule(builder, pattern, name, /*json_string=*/true);
      };
      return new_rule("\"\\\"\" " + name + " \"\\\"\"");
    }
    const int min = count(schema, "minLength", pointer), max = count(schema, "maxLength", pointer);
    if (min < 0 && max < 0) return "json-string";
    if (max >= 0 && min > max) refuse(pointer, "minLength is above maxLength");
    return new_rule("\"\\\"\" json-char{" + std::to_string(std::max(min, 0)) + "," + (max >= 0 ? std::to_string(max) : "") +
                    "} \"\\\"\"");
  }

  std::string array_rule(const json& schema, const std::string& pointer) {
    const int min = count(schema, "minItems", pointer), max = count(schema, "maxItems", pointer);
    if (max >= 0 && min > max) refuse(pointer, "minItems is above maxItems");
    std::vector<std::string> prefix;
    if (schema.contains("prefixItems")) {
      const json& items = schema.at("prefixItems");
      if (!items.is_array()) refuse(pointer, "prefixItems must be an array");
      for (size_t i = 0; i < items.size(); ++i) prefix.push_back(rule_for(items[i], pointer + "/prefixItems/" + std::to_string(i)));
      if (min < static_cast<int>(prefix.size()))
        refuse(pointer, "prefixItems are supported when minItems requires all of them");
    }
    std::string item = "json-value";
    bool more = true;
    if (schema.contains("items")) {
      const json& items = schema.at("items");
      if (items.is_boolean() && !items.get<bool>()) more = false;
      else item = rule_for(items, pointer + "/items");
    }
    const auto k = static_cast<int>(prefix.size());
    if (max >= 0 && max < k) refuse(pointer, "maxItems is below the number of prefixItems");
    // The first element, then "comma element" repeated: bounds shift by the k prefix items.
    std::string body = "\"[\" ws ";
    if (k > 0) {
      for (int i = 0; i < k; ++i) body += (i ? " comma " : "") + prefix[static_cast<size_t>(i)];
      if (more) {
        const int low = std::max(min - k, 0), high = max < 0 ? -1 : max - k;
        if (high != 0)
          body += " ( comma " + item + " ){" + std::to_string(low) + "," + (high < 0 ? "" : std::to_string(high)) + "}";
      }
    } else if (!more) {
      if (min > 0) refuse(pointer, "items: false leaves no room for minItems");
    } else {
      const int low = std::max(min, 0);
      const std::string rest =
          "( comma " + item + " ){" + std::to_string(std::max(low - 1, 0)) + "," + (max < 0 ? "" : std::to_string(max - 1)) + "}";
      if (max == 0) {
        // only the empty array
      } else if (low == 0) {
        body += "( " + item + " " + rest + " )?";
      } else {
        body += item + " " + rest;
      }
    }
    body += " ws \"]\"";
    return new_rule(body);
  }

  std::string object_rule(const json& schema, const std::string& pointer) {
    std::vector<std::pair<std::string, std::string>> members;  // key literal, value rule
    std::set<std::string> required;
    if (schema.contains("required")) {
      for (const json& key : schema.at("required")) required.insert(key.get<std::string>());
    }
    if (schema.contains("properties")) {
      const json& properties = schema.at("properties");
      if (!properties.is_object()) refuse(pointer, "properties must be an object");
      for (const auto& [key, value] : properties.items())
        members.push_back({key, rule_for(value, pointer + "/properties/" + key)});
    }
    for (const std::string& key : required) {
      bool declared = false;
      for (const auto& member : members) declared = declared || member.first == key;
      if (!declared) refuse(pointer, "required property \"" + key + "\" is not among the properties");
    }
    // Extra members after the declared ones: none unless additionalProperties allows, or
    // the schema declares no member at all ({"type": "object"} is any object).
    std::string extra;
    if (!schema.contains("properties") && !schema.contains("additionalProperties")) {
      extra = "json-string colon " + rule_for(json(true), pointer);
    } else if (schema.contains("additionalProperties")) {
      const json& additional = schema.at("additionalProperties");
      if (!(additional.is_boolean() && !additional.get<bool>()))
        extra = "json-string colon " + rule_for(additional, pointer + "/additionalProperties");
    }
    // first_i: members i.. with none written yet; rest_i: members i.. after one was.
    const auto n = members.size();
    std::vector<std::string> first(n + 1), rest(n + 1);
    rest[n] = new_rule(extra.empty() ? "\"\"" : "( comma " + extra + " )*");
    first[n] = new_rule(extra.empty() ? "\"\"" : "( " + extra + " " + rest[n] + " )?");
    for (size_t i = n; i-- > 0;) {
      const std::string member = literal(json(members[i].first).dump()) + " colon " + members[i].second;
      const bool optional = !required.count(members[i].first);
      rest[i] = new_rule("comma " + member + " " + rest[i + 1] + (optional ? " | " + rest[i + 1] : ""));
      first[i] = new_rule(member + " " + rest[i + 1] + (optional ? " | " + first[i + 1] : ""));
    }
    return new_rule("\"{\" ws " + first[0] + " ws \"}\"");
  }

  const json& root_;
  JsonGrammarOptions options_;

 public:
  // Rules the EBNF text uses but the regex compiler builds (patterns).
  ExternalRules external_;

 private:
  std::vector<std::string> rules_;
  std::map<std::string, std::string> refs_;
  int counter_ = 0;
};

}  // namespace

std::string json_schema_to_ebnf(const nlohmann::ordered_json& schema, const JsonGrammarOptions& options) {
  return SchemaWriter(schema, options).write();
}

Grammar compile_json_schema(const nlohmann::ordered_json& schema, const JsonGrammarOptions& options) {
  SchemaWriter writer(schema, options);
  const std::string text = writer.write();
  return parse_ebnf(text, writer.external_);
}

Grammar compile_json_object(const JsonGrammarOptions& options) {
  return compile_json_schema(nlohmann::ordered_json{{"type", "object"}, {"additionalProperties", true}}, options);
}

}  // namespace ernie::structured
