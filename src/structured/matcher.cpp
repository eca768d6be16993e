#include "structured/matcher.h"

#include <algorithm>
#include <utility>

namespace ernie::structured {

GrammarMatcher::GrammarMatcher(Grammar grammar) : grammar_(std::move(grammar)) {
  grammar_.check();
  std::vector<int32_t> seeds;
  const auto& root = grammar_.rules[static_cast<size_t>(grammar_.root)];
  for (size_t a = 0; a < root.alternatives.size(); ++a) seeds.push_back(frame(grammar_.root, static_cast<int32_t>(a), 0, -1));
  start_ = close(seeds);
  states_.push_back({});  // kDead
  state_ids_[0].push_back(kDead);
}

int32_t GrammarMatcher::intern(const MatchState& state) {
  if (state.dead()) return kDead;
  uint64_t hash = state.accepting ? 0x51ed270b27a3d3e5ull : 0x2545f4914f6cdd1dull;
  for (int32_t id : state.frontier) hash = (hash ^ static_cast<uint64_t>(id)) * 0x100000001b3ull;
  std::vector<int32_t>& bucket = state_ids_[hash];
  for (int32_t id : bucket)
    if (states_[static_cast<size_t>(id)] == state) return id;
  states_.push_back(state);
  const auto id = static_cast<int32_t>(states_.size()) - 1;
  bucket.push_back(id);
  return id;
}

int32_t GrammarMatcher::step_id(int32_t id, uint8_t byte) {
  if (id == kDead) return kDead;
  const auto index = static_cast<size_t>(id);
  const uint64_t key = (static_cast<uint64_t>(id) << 8) | byte;
  if (index < kDenseStates) {
    if (index >= dense_.size()) dense_.resize(std::min(kDenseStates, std::max(index + 1, 2 * dense_.size())));
    if (!dense_[index]) {
      dense_[index] = std::make_unique<std::array<int32_t, 256>>();
      dense_[index]->fill(-1);
    }
    const int32_t known = (*dense_[index])[byte];
    if (known >= 0) return known;
  } else if (const auto found = transitions_.find(key); found != transitions_.end()) {
    return found->second;
  }
  // Copy: interning may grow states_.
  const MatchState current = states_[index];
  const int32_t next = can_take(current, byte) ? intern(step(current, byte)) : kDead;
  if (index < kDenseStates) (*dense_[index])[byte] = next;
  else transitions_.emplace(key, next);
  return next;
}

int32_t GrammarMatcher::frame(int32_t rule, int32_t alternative, int32_t pos, int32_t parent) {
  // Frames are shared: the same (rule, alternative, position, parent) is one id, so
  // states compare by value and frontiers stay small.
  const uint64_t key = (static_cast<uint64_t>(static_cast<uint32_t>(rule)) * 0x9e3779b97f4a7c15ull) ^
                       (static_cast<uint64_t>(static_cast<uint32_t>(alternative)) << 40) ^
                       (static_cast<uint64_t>(static_cast<uint32_t>(pos)) << 20) ^
                       static_cast<uint64_t>(static_cast<uint32_t>(parent + 1));
  std::vector<int32_t>& bucket = by_key_[key];
  for (int32_t id : bucket) {
    const Frame& f = frames_[static_cast<size_t>(id)];
    if (f.rule == rule && f.alternative == alternative && f.pos == pos && f.parent == parent) return id;
  }
  frames_.push_back({rule, alternative, pos, parent});
  const auto id = static_cast<int32_t>(frames_.size()) - 1;
  bucket.push_back(id);
  return id;
}

const Element* GrammarMatcher::next_element(const Frame& f) const {
  const Sequence& sequence =
      grammar_.rules[static_cast<size_t>(f.rule)].alternatives[static_cast<size_t>(f.alternative)];
  return f.pos < static_cast<int32_t>(sequence.size()) ? &sequence[static_cast<size_t>(f.pos)] : nullptr;
}

MatchState GrammarMatcher::close(std::vector<int32_t>& seeds) {
  MatchState state;
  work_.assign(seeds.begin(), seeds.end());
  std::vector<int32_t> visited;
  while (!work_.empty()) {
    const int32_t id = work_.back();
    work_.pop_back();
    if (seen_.size() <= static_cast<size_t>(id)) seen_.resize(frames_.size() + 1, 0);
    if (seen_[static_cast<size_t>(id)]) continue;
    seen_[static_cast<size_t>(id)] = 1;
    visited.push_back(id);
    const Frame f = frames_[static_cast<size_t>(id)];
    const Element* element = next_element(f);
    if (element == nullptr) {
      // The rule is done: continue in the parent after its reference.
      if (f.parent < 0) {
        state.accepting = true;
      } else {
        const Frame p = frames_[static_cast<size_t>(f.parent)];
        work_.push_back(frame(p.rule, p.alternative, p.pos + 1, p.parent));
      }
    } else if (element->kind == Element::Kind::kRule) {
      const auto& alternatives = grammar_.rules[static_cast<size_t>(element->rule)].alternatives;
      // A reference in tail position returns to this frame's parent directly.
      const Sequence& sequence =
          grammar_.rules[static_cast<size_t>(f.rule)].alternatives[static_cast<size_t>(f.alternative)];
      const int32_t parent = f.pos + 1 == static_cast<int32_t>(sequence.size()) ? f.parent : id;
      for (size_t a = 0; a < alternatives.size(); ++a)
        work_.push_back(frame(element->rule, static_cast<int32_t>(a), 0, parent));
    } else {
      state.frontier.push_back(id);
    }
  }
  for (int32_t id : visited) seen_[static_cast<size_t>(id)] = 0;
  std::sort(state.frontier.begin(), state.frontier.end());
  return state;
}

MatchState GrammarMatcher::step(const MatchState& state, uint8_t byte) {
  std::vector<int32_t> seeds;
  for (int32_t id : state.frontier) {
    const Frame f = frames_[static_cast<size_t>(id)];
    if (next_element(f)->bytes.contains(byte)) seeds.push_back(frame(f.rule, f.alternative, f.pos + 1, f.parent));
  }
  return close(seeds);
}

MatchState GrammarMatcher::step(const MatchState& state, std::string_view bytes) {
  MatchState current = state;
  for (char c : bytes) {
    if (current.frontier.empty()) return {};
    current = step(current, static_cast<uint8_t>(c));
  }
  return current;
}

bool GrammarMatcher::can_take(const MatchState& state, uint8_t byte) const {
  for (int32_t id : state.frontier)
    if (next_element(frames_[static_cast<size_t>(id)])->bytes.contains(byte)) return true;
  return false;
}

bool GrammarMatcher::matches(std::string_view text) { return step(start_, text).accepting; }

}  // namespace ernie::structured
