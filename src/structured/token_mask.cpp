#include "structured/token_mask.h"

#include <algorithm>
#include <deque>
#include <numeric>
#include <utility>

namespace ernie::structured {

TokenTrie::TokenTrie(const std::vector<std::string>& token_bytes, std::vector<int32_t> end_tokens)
    : end_tokens_(std::move(end_tokens)), vocab_size_(token_bytes.size()) {
  std::vector<int32_t> order;
  for (size_t id = 0; id < token_bytes.size(); ++id)
    if (!token_bytes[id].empty()) order.push_back(static_cast<int32_t>(id));
  std::sort(order.begin(), order.end(), [&](int32_t a, int32_t b) {
    return token_bytes[static_cast<size_t>(a)] < token_bytes[static_cast<size_t>(b)];
  });
  // Breadth first, so each node's children are created together and stay contiguous.
  struct Pending {
    uint32_t node;
    size_t lo, hi, depth;
  };
  nodes_.push_back({});
  std::deque<Pending> queue = {{0, 0, order.size(), 0}};
  while (!queue.empty()) {
    const Pending p = queue.front();
    queue.pop_front();
    size_t i = p.lo;
    // Sorted order puts the tokens that end here first.
    nodes_[p.node].first_token = static_cast<uint32_t>(tokens_.size());
    for (; i < p.hi && token_bytes[static_cast<size_t>(order[i])].size() == p.depth; ++i) tokens_.push_back(order[i]);
    nodes_[p.node].token_count = static_cast<uint32_t>(tokens_.size()) - nodes_[p.node].first_token;
    nodes_[p.node].first_child = static_cast<uint32_t>(nodes_.size());
    while (i < p.hi) {
      const auto byte = static_cast<uint8_t>(token_bytes[static_cast<size_t>(order[i])][p.depth]);
      size_t j = i;
      while (j < p.hi && static_cast<uint8_t>(token_bytes[static_cast<size_t>(order[j])][p.depth]) == byte) ++j;
      Node child;
      child.byte = byte;
      nodes_.push_back(child);
      queue.push_back({static_cast<uint32_t>(nodes_.size() - 1), i, j, p.depth + 1});
      i = j;
    }
    nodes_[p.node].child_count = static_cast<uint32_t>(nodes_.size()) - nodes_[p.node].first_child;
  }
}

void TokenTrie::allowed(GrammarMatcher& matcher, const MatchState& state, std::vector<uint32_t>& mask) const {
  const int32_t id = matcher.intern(state);
  if (id == GrammarMatcher::kDead) {
    mask.assign((vocab_size_ + 31) / 32, 0u);
    return;
  }
  mask = this->mask(matcher, id);
}

const std::vector<uint32_t>& TokenTrie::mask(GrammarMatcher& matcher, int32_t start,
                                             std::span<const LiteralToken> literal_tokens) const {
  // A state's mask never changes: compute it once per state (inside a JSON string every
  // character returns to the same state).
  std::vector<uint32_t>& mask = matcher.mask_cache(start);
  if (!mask.empty()) return mask;
  mask.assign((vocab_size_ + 31) / 32, 0u);
  const auto allow = [&](int32_t id) { mask[static_cast<size_t>(id) >> 5] |= 1u << (id & 31); };
  if (matcher.state(start).accepting)
    for (int32_t id : end_tokens_) allow(id);
  for (const LiteralToken& literal : literal_tokens) {
    int32_t state = start;
    for (size_t i = 0; i < literal.text.size() && state != GrammarMatcher::kDead; ++i)
      state = matcher.step_id(state, static_cast<uint8_t>(literal.text[i]));
    if (state != GrammarMatcher::kDead && static_cast<size_t>(literal.id) < vocab_size_) allow(literal.id);
  }
  // A state that most bytes lead back to (inside a JSON string) allows every token made
  // of those bytes: take them all at once and walk only the subtrees holding a token
  // with another byte (a quote, a backslash).
  ByteSet loop;
  size_t loop_bytes = 0;
  for (int byte = 0; byte < 256; ++byte) {
    if (matcher.step_id(start, static_cast<uint8_t>(byte)) != start) continue;
    loop.add(static_cast<uint8_t>(byte));
    ++loop_bytes;
  }
  if (loop_bytes < kMinLoopBytes) {
    walk(matcher, 0, start, mask);
    return mask;
  }
  const LoopTokens& inside = loop_tokens(loop);
  for (size_t w = 0; w < mask.size(); ++w) mask[w] |= inside.inside[w];
  std::vector<uint32_t> stack = {0u};  // nodes whose path stays in the loop (state `start`)
  while (!stack.empty()) {
    const Node& n = nodes_[stack.back()];
    stack.pop_back();
    for (uint32_t c = n.first_child; c < n.first_child + n.child_count; ++c) {
      if (!inside.mixed[c] && loop.contains(nodes_[c].byte)) continue;  // all allowed already
      if (loop.contains(nodes_[c].byte)) {
        stack.push_back(c);
        continue;
      }
      const int32_t next = matcher.step_id(start, nodes_[c].byte);
      if (next == GrammarMatcher::kDead) continue;
      allow_tokens_ending_at(c, mask);
      walk(matcher, c, next, mask);
    }
  }
  return mask;
}

void TokenTrie::allow_tokens_ending_at(uint32_t node, std::vector<uint32_t>& mask) const {
  const Node& n = nodes_[node];
  for (uint32_t t = n.first_token; t < n.first_token + n.token_count; ++t)
    mask[static_cast<size_t>(tokens_[t]) >> 5] |= 1u << (tokens_[t] & 31);
}

void TokenTrie::walk(GrammarMatcher& matcher, uint32_t root, int32_t state, std::vector<uint32_t>& mask) const {
  std::vector<std::pair<uint32_t, int32_t>> stack = {{root, state}};
  while (!stack.empty()) {
    const auto [node, current] = stack.back();
    stack.pop_back();
    const Node& n = nodes_[node];
    for (uint32_t c = n.first_child; c < n.first_child + n.child_count; ++c) {
      const Node& child = nodes_[c];
      const int32_t next = matcher.step_id(current, child.byte);
      if (next == GrammarMatcher::kDead) continue;
      allow_tokens_ending_at(c, mask);
      if (child.child_count > 0) stack.emplace_back(c, next);
    }
  }
}

const TokenTrie::LoopTokens& TokenTrie::loop_tokens(const ByteSet& loop) const {
  std::lock_guard lock(loop_mutex_);
  for (const auto& [set, tokens] : loops_)
    if (set == loop) return *tokens;
  if (loops_.size() >= kMaxLoopSets) loops_.clear();  // callers hold no reference across calls
  auto tokens = std::make_unique<LoopTokens>();
  tokens->inside.assign((vocab_size_ + 31) / 32, 0u);
  tokens->mixed.assign(nodes_.size(), false);
  // Parents come before their children (breadth-first order): "inside" flows down ...
  std::vector<bool> inside(nodes_.size(), false);
  inside[0] = true;
  for (uint32_t node = 0; node < nodes_.size(); ++node) {
    const Node& n = nodes_[node];
    if (node != 0) inside[node] = inside[node] && loop.contains(n.byte);
    if (inside[node]) allow_tokens_ending_at(node, tokens->inside);
    for (uint32_t c = n.first_child; c < n.first_child + n.child_count; ++c) inside[c] = inside[node];
  }
  // ... and "mixed" flows up.
  for (size_t node = nodes_.size(); node-- > 0;) {
    const Node& n = nodes_[node];
    bool mixed = false;
    for (uint32_t c = n.first_child; c < n.first_child + n.child_count && !mixed; ++c)
      mixed = tokens->mixed[c] || !loop.contains(nodes_[c].byte);
    tokens->mixed[node] = mixed;
  }
  loops_.emplace_back(loop, std::move(tokens));
  return *loops_.back().second;
}

std::vector<std::string> vocabulary_bytes(const Tokenizer& tokenizer, int64_t vocab_size) {
  std::vector<std::string> bytes(static_cast<size_t>(vocab_size));
  const int64_t known = std::min<int64_t>(vocab_size, tokenizer.vocab_size());
  for (int64_t id = 0; id < known; ++id)
    bytes[static_cast<size_t>(id)] = tokenizer.token_bytes(static_cast<int32_t>(id), /*skip_special=*/true);
  return bytes;
}

TokenTrie vocabulary_trie(const Tokenizer& tokenizer, int64_t vocab_size, std::vector<int32_t> end_tokens) {
  return TokenTrie(vocabulary_bytes(tokenizer, vocab_size), std::move(end_tokens));
}

}  // namespace ernie::structured
