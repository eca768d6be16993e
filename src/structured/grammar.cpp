#include "structured/grammar.h"

#include "util/error.h"

namespace ernie::structured {

ByteSet ByteSet::single(uint8_t byte) {
  ByteSet set;
  set.add(byte);
  return set;
}

ByteSet ByteSet::range(uint8_t first, uint8_t last) {
  ByteSet set;
  set.add_range(first, last);
  return set;
}

ByteSet ByteSet::all() { return ByteSet().complement(); }

void ByteSet::add_range(uint8_t first, uint8_t last) {
  for (int byte = first; byte <= last; ++byte) add(static_cast<uint8_t>(byte));
}

void ByteSet::add_all(const ByteSet& other) {
  for (size_t i = 0; i < bits_.size(); ++i) bits_[i] |= other.bits_[i];
}

ByteSet ByteSet::complement() const {
  ByteSet out;
  for (size_t i = 0; i < bits_.size(); ++i) out.bits_[i] = ~bits_[i];
  return out;
}

bool ByteSet::empty() const {
  for (uint64_t word : bits_)
    if (word != 0) return false;
  return true;
}

void Grammar::check() const {
  if (root < 0 || root >= static_cast<int32_t>(rules.size())) fail("grammar: the root rule does not exist");
  const auto count = static_cast<int32_t>(rules.size());
  for (const Rule& rule : rules) {
    if (rule.alternatives.empty()) fail("grammar: rule \"", rule.name, "\" has no alternative");
    for (const Sequence& sequence : rule.alternatives)
      for (const Element& element : sequence)
        if (element.kind == Element::Kind::kRule && (element.rule < 0 || element.rule >= count))
          fail("grammar: rule \"", rule.name, "\" refers to a rule that does not exist");
  }
  // Which rules can match the empty string (fixed point), then whether a rule can reach
  // itself through leading elements that may all match nothing.
  std::vector<char> nullable(rules.size(), 0);
  for (bool changed = true; changed;) {
    changed = false;
    for (size_t r = 0; r < rules.size(); ++r) {
      if (nullable[r]) continue;
      for (const Sequence& sequence : rules[r].alternatives) {
        bool all = true;
        for (const Element& element : sequence)
          all = all && element.kind == Element::Kind::kRule && nullable[static_cast<size_t>(element.rule)];
        if (all) {
          nullable[r] = 1;
          changed = true;
          break;
        }
      }
    }
  }
  // left[r]: rules r can begin with. Depth-first search for a cycle.
  std::vector<std::vector<int32_t>> left(rules.size());
  for (size_t r = 0; r < rules.size(); ++r)
    for (const Sequence& sequence : rules[r].alternatives)
      for (const Element& element : sequence) {
        if (element.kind != Element::Kind::kRule) break;
        left[r].push_back(element.rule);
        if (!nullable[static_cast<size_t>(element.rule)]) break;
      }
  std::vector<char> state(rules.size(), 0);  // 0 new, 1 on the path, 2 done
  std::vector<std::pair<int32_t, size_t>> path;
  for (int32_t start = 0; start < count; ++start) {
    if (state[static_cast<size_t>(start)]) continue;
    path.push_back({start, 0});
    state[static_cast<size_t>(start)] = 1;
    while (!path.empty()) {
      auto& [rule, next] = path.back();
      if (next == left[static_cast<size_t>(rule)].size()) {
        state[static_cast<size_t>(rule)] = 2;
        path.pop_back();
        continue;
      }
      const int32_t child = left[static_cast<size_t>(rule)][next++];
      if (state[static_cast<size_t>(child)] == 1)
        fail("grammar: rule \"", rules[static_cast<size_t>(child)].name,
             "\" is left-recursive (it can reach itself before matching a byte); rewrite it with repetition");
      if (state[static_cast<size_t>(child)] == 0) {
        state[static_cast<size_t>(child)] = 1;
        path.push_back({child, 0});
      }
    }
  }
}

int32_t GrammarBuilder::add_rule(std::string name) {
  count_elements(1);
  grammar_.rules.push_back({std::move(name), {}});
  return static_cast<int32_t>(grammar_.rules.size()) - 1;
}

void GrammarBuilder::add_alternative(int32_t rule, Sequence sequence) {
  count_elements(sequence.size() + 1);
  grammar_.rules.at(static_cast<size_t>(rule)).alternatives.push_back(std::move(sequence));
}

int32_t GrammarBuilder::add_grammar(const Grammar& grammar) {
  const auto offset = static_cast<int32_t>(grammar_.rules.size());
  for (const Rule& rule : grammar.rules) add_rule(rule.name);
  for (size_t r = 0; r < grammar.rules.size(); ++r) {
    for (Sequence sequence : grammar.rules[r].alternatives) {
      for (Element& element : sequence)
        if (element.kind == Element::Kind::kRule) element.rule += offset;
      add_alternative(offset + static_cast<int32_t>(r), std::move(sequence));
    }
  }
  return offset + grammar.root;
}

void GrammarBuilder::count_elements(size_t more) {
  // Repetition counts multiply: a few {1000} bounds in a small request could otherwise
  // build a grammar of billions of elements.
  elements_ += more;
  if (elements_ > kMaxGrammarElements)
    fail("the constraint compiles to a grammar of more than ", kMaxGrammarElements,
         " elements; use smaller repetition counts or lengths");
}

Sequence GrammarBuilder::literal(std::string_view text) {
  Sequence sequence;
  for (char c : text) sequence.push_back(bytes(ByteSet::single(static_cast<uint8_t>(c))));
  return sequence;
}

int32_t GrammarBuilder::star(const Element& element, const std::string& name) {
  // R ::= element R | ε  (right recursion: the matcher consumes a byte before recursing)
  const int32_t rule = add_rule(name);
  add_alternative(rule, {element, ref(rule)});
  add_alternative(rule, {});
  return rule;
}

int32_t GrammarBuilder::plus(const Element& element, const std::string& name) {
  const int32_t rest = star(element, name + "*");
  const int32_t rule = add_rule(name);
  add_alternative(rule, {element, ref(rest)});
  return rule;
}

int32_t GrammarBuilder::optional(const Element& element, const std::string& name) {
  const int32_t rule = add_rule(name);
  add_alternative(rule, {element});
  add_alternative(rule, {});
  return rule;
}

int32_t GrammarBuilder::repeat(const Element& element, int min, int max, const std::string& name) {
  if (min < 0 || (max >= 0 && max < min)) fail("grammar: repetition {", min, ",", max, "} of \"", name, "\" is empty");
  // The tail: up to (max - min) more as nested optionals, or any number more.
  int32_t tail = -1;
  if (max < 0) {
    tail = star(element, name + "*");
  } else {
    for (int i = 0; i < max - min; ++i) {
      const int32_t rule = add_rule(name + "?");
      Sequence more = {element};
      if (tail >= 0) more.push_back(ref(tail));
      add_alternative(rule, std::move(more));
      add_alternative(rule, {});
      tail = rule;
    }
  }
  const int32_t rule = add_rule(name);
  Sequence sequence(static_cast<size_t>(min), element);
  if (tail >= 0) sequence.push_back(ref(tail));
  add_alternative(rule, std::move(sequence));
  return rule;
}

Grammar GrammarBuilder::build(int32_t root) {
  grammar_.root = root;
  grammar_.check();
  return grammar_;
}

}  // namespace ernie::structured
