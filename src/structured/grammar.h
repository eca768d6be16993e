// The one form every output constraint compiles to (JSON Schema, regex, choices,
// EBNF): a context-free grammar over bytes. Working on bytes, not characters, lets a
// constraint judge any token, whose text may end inside a UTF-8 character.
//
// A rule is a list of alternatives; an alternative is a sequence of elements; an element
// is a set of byte values (one byte) or a reference to a rule. Repetition and optional
// parts are written as helper rules (see GrammarBuilder). The empty sequence is allowed.
// Left recursion is refused when the grammar is checked: the matcher expands rules
// top-down and would never stop.
#pragma once

#include <array>
#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace ernie::structured {

// A set of byte values, as a 256-bit map.
class ByteSet {
 public:
  static ByteSet single(uint8_t byte);
  static ByteSet range(uint8_t first, uint8_t last);  // both ends included
  static ByteSet all();

  void add(uint8_t byte) { bits_[byte >> 6] |= uint64_t{1} << (byte & 63); }
  void add_range(uint8_t first, uint8_t last);
  void add_all(const ByteSet& other);
  ByteSet complement() const;
  bool contains(uint8_t byte) const { return (bits_[byte >> 6] >> (byte & 63)) & 1u; }
  bool empty() const;
  bool operator==(const ByteSet& other) const = default;

 private:
  std::array<uint64_t, 4> bits_{};
};

struct Element {
  enum class Kind : uint8_t { kBytes, kRule };
  Kind kind = Kind::kBytes;
  ByteSet bytes;     // kBytes
  int32_t rule = -1;  // kRule
};

using Sequence = std::vector<Element>;

struct Rule {
  std::string name;
  std::vector<Sequence> alternatives;
};

struct Grammar {
  std::vector<Rule> rules;
  int32_t root = 0;

  // Throws ernie::Error naming the rule when a reference points nowhere, a rule has no
  // alternative, or a rule can reach itself without consuming a byte (left recursion).
  void check() const;
};

// Builds a grammar rule by rule; names are for messages and need not be unique.
class GrammarBuilder {
 public:
  // A new, empty rule; its alternatives are added later (rules may refer to each
  // other before they are filled in).
  int32_t add_rule(std::string name);
  void add_alternative(int32_t rule, Sequence sequence);

  static Element bytes(ByteSet set) { return {Element::Kind::kBytes, set, -1}; }
  static Element ref(int32_t rule) { return {Element::Kind::kRule, {}, rule}; }
  // The bytes of `text`, one element each.
  static Sequence literal(std::string_view text);

  // Helper rules for repetition: `element` zero or more times, at least once, at most
  // once, and between `min` and `max` times (max < 0: no upper bound).
  int32_t star(const Element& element, const std::string& name);
  int32_t plus(const Element& element, const std::string& name);
  int32_t optional(const Element& element, const std::string& name);
  int32_t repeat(const Element& element, int min, int max, const std::string& name);

  // Copies every rule of `grammar` in (renumbered); returns the id of its root here.
  int32_t add_grammar(const Grammar& grammar);

  // The finished grammar (checked) with `root` as its start rule.
  Grammar build(int32_t root);

  // Rules plus alternatives plus elements a grammar may have; adding more throws
  // ernie::Error (a 400 for the client).
  static constexpr size_t kMaxGrammarElements = size_t{1} << 21;

 private:
  void count_elements(size_t more);

  Grammar grammar_;
  size_t elements_ = 0;
};

}  // namespace ernie::structured
