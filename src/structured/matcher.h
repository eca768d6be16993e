// Matching bytes against a Grammar (structured/grammar.h) as they are generated: a
// pushdown automaton whose stacks are kept as a tree of shared frames, so every way the
// text so far can be parsed is followed at once without copying stacks.
//
// A frame says "in this alternative of this rule, the next element is number `pos`,
// and when the rule is done continue in `parent`". The matcher's state is its frontier:
// the frames whose next element is a byte set (after expanding rule references and
// finishing completed rules), plus whether the whole grammar may end here. A byte keeps
// the frames whose set holds it. States are values, so a speculative token can be tried
// and dropped (token masks) or undone (rejected drafts) for free.
//
// A rule referenced as the last element of an alternative returns straight to that
// frame's parent (a tail call), so right-recursive repetition does not grow the stack:
// inside a JSON string every character leads back to the same state, which is what lets
// masks be cached per state.
#pragma once

#include <array>
#include <cstdint>
#include <memory>
#include <string_view>
#include <unordered_map>
#include <vector>

#include "structured/grammar.h"

namespace ernie::structured {

struct MatchState {
  std::vector<int32_t> frontier;  // frame ids, sorted
  bool accepting = false;         // the text so far is a complete sentence
  bool dead() const { return frontier.empty() && !accepting; }
  bool operator==(const MatchState& other) const = default;
};

class GrammarMatcher {
 public:
  // Keeps its own copy of the grammar.
  explicit GrammarMatcher(Grammar grammar);

  // Before any byte.
  const MatchState& start() const { return start_; }
  // The state after `byte`; dead when the grammar cannot take it.
  MatchState step(const MatchState& state, uint8_t byte);
  MatchState step(const MatchState& state, std::string_view bytes);
  // Whether some frontier frame could take `byte` (no state is built).
  bool can_take(const MatchState& state, uint8_t byte) const;
  // Whether `text` is a whole sentence of the grammar.
  bool matches(std::string_view text);

  const Grammar& grammar() const { return grammar_; }
  size_t frame_count() const { return frames_.size(); }

  // States by number, for caching work per state: equal states get the same id.
  // kDead is the state no byte leads out of.
  static constexpr int32_t kDead = 0;
  int32_t intern(const MatchState& state);
  const MatchState& state(int32_t id) const { return states_[static_cast<size_t>(id)]; }
  // The id of step(state(id), byte), cached.
  int32_t step_id(int32_t id, uint8_t byte);
  size_t state_count() const { return states_.size(); }
  // A cache the token mask keeps per state id (empty until filled).
  std::vector<uint32_t>& mask_cache(int32_t id) { return masks_[id]; }
  size_t cached_masks() const { return masks_.size(); }
  // Forgets every cached mask (each is a bit per vocabulary token), to bound memory.
  void drop_masks() { masks_.clear(); }

 private:
  struct Frame {
    int32_t rule, alternative, pos, parent;
  };
  int32_t frame(int32_t rule, int32_t alternative, int32_t pos, int32_t parent);
  const Element* next_element(const Frame& f) const;
  // Expands `seeds` into a state: rule references opened, finished rules closed.
  MatchState close(std::vector<int32_t>& seeds);

  const Grammar grammar_;
  std::vector<Frame> frames_;
  std::unordered_map<uint64_t, std::vector<int32_t>> by_key_;  // hash-consing of frames
  MatchState start_;
  std::vector<int32_t> work_;
  std::vector<char> seen_;
  std::vector<MatchState> states_;
  std::unordered_map<uint64_t, std::vector<int32_t>> state_ids_;  // by hash of the state
  // Transitions: a row of 256 per state for the first kDenseStates states (a trie walk
  // makes one lookup per trie node, so this is the mask's inner loop), a map beyond.
  static constexpr size_t kDenseStates = 8192;
  std::vector<std::unique_ptr<std::array<int32_t, 256>>> dense_;  // -1: not computed yet
  std::unordered_map<uint64_t, int32_t> transitions_;             // (id << 8 | byte) -> id
  std::unordered_map<int32_t, std::vector<uint32_t>> masks_;
};

}  // namespace ernie::structured
