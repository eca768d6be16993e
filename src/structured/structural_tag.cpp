#include "structured/structural_tag.h"

#include <array>
#include <deque>
#include <map>

#include "util/error.h"

namespace ernie::structured {
namespace {

using ordered_json = nlohmann::ordered_json;

// One structure as a rule: the begin's bytes after `skip`, the JSON value, the end.
int32_t structure_rule(GrammarBuilder& builder, const TaggedStructure& structure, size_t skip,
                       const JsonGrammarOptions& options, int32_t rule) {
  const int32_t value = builder.add_grammar(compile_json_schema(structure.schema, options));
  Sequence sequence = GrammarBuilder::literal(std::string_view(structure.begin).substr(skip));
  sequence.push_back(GrammarBuilder::ref(value));
  for (const Element& element : GrammarBuilder::literal(structure.end)) sequence.push_back(element);
  builder.add_alternative(rule, std::move(sequence));
  return rule;
}

// The triggers' prefixes as an Aho-Corasick automaton: node 0 is the empty prefix; goto
// gives, for a node and a byte, the longest trigger prefix that ends the text so far.
struct TriggerAutomaton {
  std::vector<std::array<int32_t, 256>> next;
  std::vector<int32_t> trigger;  // the trigger a node completes, or -1
  std::vector<int32_t> depth;

  explicit TriggerAutomaton(const std::vector<std::string>& triggers) {
    add_node(0);
    for (size_t t = 0; t < triggers.size(); ++t) {
      int32_t node = 0;
      for (const char c : triggers[t]) {
        const auto byte = static_cast<uint8_t>(c);
        if (next[static_cast<size_t>(node)][byte] <= 0) {
          const int32_t child = add_node(depth[static_cast<size_t>(node)] + 1);
          next[static_cast<size_t>(node)][byte] = child;
        }
        node = next[static_cast<size_t>(node)][byte];
      }
      if (trigger[static_cast<size_t>(node)] < 0) trigger[static_cast<size_t>(node)] = static_cast<int32_t>(t);
    }
    // Breadth first: a missing edge goes where the node's longest proper suffix goes.
    std::vector<int32_t> fail(next.size(), 0);
    std::deque<int32_t> queue;
    for (auto& target : next[0]) {
      if (target > 0) queue.push_back(target);
      else target = 0;
    }
    while (!queue.empty()) {
      const int32_t node = queue.front();
      queue.pop_front();
      for (size_t byte = 0; byte < 256; ++byte) {
        int32_t& target = next[static_cast<size_t>(node)][byte];
        const int32_t fallback = next[static_cast<size_t>(fail[static_cast<size_t>(node)])][byte];
        if (target > 0) {
          fail[static_cast<size_t>(target)] = fallback;
          // A trigger that ends the text inside a longer trigger's prefix completes here too.
          if (trigger[static_cast<size_t>(target)] < 0) trigger[static_cast<size_t>(target)] = trigger[static_cast<size_t>(fallback)];
          queue.push_back(target);
        } else {
          target = fallback;
        }
      }
    }
  }

  int32_t add_node(int32_t node_depth) {
    std::array<int32_t, 256> edges{};
    edges.fill(-1);
    next.push_back(edges);
    trigger.push_back(-1);
    depth.push_back(node_depth);
    return static_cast<int32_t>(next.size()) - 1;
  }
};

std::string string_member(const ordered_json& object, const char* key, const std::string& where) {
  if (!object.contains(key) || !object.at(key).is_string()) fail(where, " needs a string \"", key, "\"");
  return object.at(key).get<std::string>();
}

}  // namespace

void parse_structural_tag(const ordered_json& tag, std::vector<TaggedStructure>& structures,
                          std::vector<std::string>& triggers) {
  if (!tag.is_object()) fail("structural_tag must be an object with \"structures\" and \"triggers\"");
  if (!tag.contains("structures") || !tag.at("structures").is_array() || tag.at("structures").empty())
    fail("structural_tag needs a non-empty list \"structures\"");
  if (!tag.contains("triggers") || !tag.at("triggers").is_array() || tag.at("triggers").empty())
    fail("structural_tag needs a non-empty list \"triggers\"");
  if (tag.at("structures").size() > kMaxStructures)
    fail("structural_tag has ", tag.at("structures").size(), " structures; the limit is ", kMaxStructures);
  size_t trigger_bytes = 0;
  for (const ordered_json& trigger : tag.at("triggers")) {
    if (!trigger.is_string() || trigger.get<std::string>().empty())
      fail("structural_tag triggers must be non-empty strings, got ", trigger.dump());
    triggers.push_back(trigger.get<std::string>());
    trigger_bytes += triggers.back().size();
  }
  if (trigger_bytes > kMaxTriggerBytes)
    fail("structural_tag triggers hold ", trigger_bytes, " bytes; the limit is ", kMaxTriggerBytes);
  for (size_t i = 0; i < tag.at("structures").size(); ++i) {
    const ordered_json& structure = tag.at("structures")[i];
    const std::string where = "structural_tag structures[" + std::to_string(i) + "]";
    if (!structure.is_object()) fail(where, " must be an object with \"begin\", \"schema\" and \"end\"");
    TaggedStructure parsed{string_member(structure, "begin", where), ordered_json(true),
                           string_member(structure, "end", where)};
    if (structure.contains("schema")) parsed.schema = structure.at("schema");
    bool triggered = false;
    for (const std::string& trigger : triggers) triggered = triggered || parsed.begin.starts_with(trigger);
    if (!triggered) fail(where, " begins with \"", parsed.begin, "\", which starts with none of the triggers");
    structures.push_back(std::move(parsed));
  }
}

Grammar compile_structural_tag(const std::vector<TaggedStructure>& structures, const std::vector<std::string>& triggers,
                               const JsonGrammarOptions& options) {
  const TriggerAutomaton automaton(triggers);
  GrammarBuilder builder;
  const size_t nodes = automaton.next.size();
  std::vector<int32_t> text(nodes);  // free text, with this node's prefix of a trigger just read
  for (size_t node = 0; node < nodes; ++node) text[node] = builder.add_rule("text");
  // After a whole trigger: the structures that begin with it (the longest trigger each
  // begin starts with is the one that completes first), then free text again.
  std::map<int32_t, int32_t> after_trigger;
  for (size_t t = 0; t < triggers.size(); ++t) {
    const int32_t rule = builder.add_rule("after " + triggers[t]);
    bool any = false;
    for (const TaggedStructure& structure : structures) {
      if (!structure.begin.starts_with(triggers[t])) continue;
      any = true;
      const int32_t body = builder.add_rule("structure");
      structure_rule(builder, structure, triggers[t].size(), options, body);
      builder.add_alternative(rule, {GrammarBuilder::ref(body), GrammarBuilder::ref(text[0])});
    }
    if (!any) builder.add_alternative(rule, {GrammarBuilder::ref(text[0])});  // a trigger no structure uses
    after_trigger[static_cast<int32_t>(t)] = rule;
  }
  for (size_t node = 0; node < nodes; ++node) {
    builder.add_alternative(text[node], {});  // the output may end in free text
    // Bytes grouped by where they lead.
    std::map<int32_t, ByteSet> by_target;
    for (size_t byte = 0; byte < 256; ++byte) by_target[automaton.next[node][byte]].add(static_cast<uint8_t>(byte));
    for (const auto& [target, bytes] : by_target) {
      const int32_t completed = automaton.trigger[static_cast<size_t>(target)];
      const int32_t then = completed >= 0 ? after_trigger.at(completed) : text[static_cast<size_t>(target)];
      builder.add_alternative(text[node], {GrammarBuilder::bytes(bytes), GrammarBuilder::ref(then)});
    }
  }
  return builder.build(text[0]);
}

Grammar compile_structure_sequence(const std::vector<TaggedStructure>& structures, const std::string& separator,
                                   int min, int max, const JsonGrammarOptions& options) {
  if (structures.empty()) fail("there is no structure to choose from");
  if (min < 1 || (max >= 0 && max < min)) fail("internal: a structure sequence needs 1 <= min <= max");
  GrammarBuilder builder;
  const int32_t one = builder.add_rule("structure");
  for (const TaggedStructure& structure : structures) structure_rule(builder, structure, 0, options, one);
  const int32_t more = builder.add_rule("separated structure");
  Sequence separated = GrammarBuilder::literal(separator);
  separated.push_back(GrammarBuilder::ref(one));
  builder.add_alternative(more, std::move(separated));
  const int32_t rest = builder.repeat(GrammarBuilder::ref(more), min - 1, max < 0 ? -1 : max - 1, "structures");
  const int32_t newlines = builder.repeat(GrammarBuilder::bytes(ByteSet::single('\n')), 0, 2, "newlines");
  const int32_t root = builder.add_rule("root");
  builder.add_alternative(root, {GrammarBuilder::ref(newlines), GrammarBuilder::ref(one), GrammarBuilder::ref(rest),
                                 GrammarBuilder::ref(newlines)});
  return builder.build(root);
}

}  // namespace ernie::structured
