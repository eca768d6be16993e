#include "engine/guided_decoding.h"

#include <algorithm>

#include "util/error.h"
#include "util/log.h"

namespace ernie {

using structured::GrammarMatcher;

GuidedDecoding::GuidedDecoding(const Tokenizer& tokenizer, int64_t vocab_size, std::vector<int32_t> end_tokens)
    : tokenizer_(tokenizer), vocab_size_(vocab_size), end_tokens_(std::move(end_tokens)) {}

GuidedDecoding::~GuidedDecoding() {
  if (!worker_.joinable()) return;
  {
    std::lock_guard lock(mutex_);
    stopping_ = true;
  }
  wake_.notify_all();
  worker_.join();
}

const structured::TokenTrie& GuidedDecoding::trie() {
  if (!trie_) {
    const auto started = std::chrono::steady_clock::now();
    token_bytes_ = structured::vocabulary_bytes(tokenizer_, vocab_size_);
    trie_ = std::make_unique<structured::TokenTrie>(token_bytes_, end_tokens_);
    log_info("structured output: the vocabulary trie (", trie_->node_count(), " nodes) took ",
             std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count(), " s");
  }
  return *trie_;
}

GuidedState GuidedDecoding::begin(const std::shared_ptr<const structured::CompiledConstraint>& constraint,
                                  std::span<const int32_t> visible_special_tokens) {
  trie();  // before the worker first reads it
  // The special tokens a request shows decide which tokens its grammar may take, so they
  // are part of what identifies the matcher.
  std::string key = constraint->key;
  for (const int32_t id : visible_special_tokens) key += "\x01" + std::to_string(id);
  auto found = std::find_if(grammars_.begin(), grammars_.end(), [&](const auto& grammar) { return grammar->key == key; });
  if (found != grammars_.end()) {
    grammars_.splice(grammars_.begin(), grammars_, found);
  } else {
    auto grammar = std::make_shared<GuidedGrammar>(key, constraint->grammar);
    for (const int32_t id : visible_special_tokens)
      grammar->literal_tokens.push_back({id, tokenizer_.token_bytes(id, /*skip_special=*/false)});
    grammars_.push_front(std::move(grammar));
    // Forget the least recently used constraints that no request holds any more.
    size_t idle = 0;
    for (auto it = grammars_.begin(); it != grammars_.end();) {
      const bool unused = it->use_count() == 1;
      if (unused && ++idle > kKeptGrammars) it = grammars_.erase(it);
      else ++it;
    }
  }
  GuidedState state;
  state.grammar = grammars_.front();
  state.state = state.grammar->matcher.intern(state.grammar->matcher.start());
  return state;
}

int32_t GuidedDecoding::advance(GuidedGrammar& grammar, int32_t state, int32_t token) {
  if (token < 0 || token >= vocab_size_) return GrammarMatcher::kDead;
  const std::string* text = &token_bytes_[static_cast<size_t>(token)];
  for (const structured::LiteralToken& literal : grammar.literal_tokens)
    if (literal.id == token) text = &literal.text;
  if (text->empty()) return GrammarMatcher::kDead;  // end tokens and hidden specials have no text to match
  for (const char byte : *text) {
    state = grammar.matcher.step_id(state, static_cast<uint8_t>(byte));
    if (state == GrammarMatcher::kDead) break;
  }
  if (grammar.matcher.state_count() > kMaxStates)
    fail("the output constraint needed more than ", kMaxStates, " parser states; the request was ended to bound memory");
  return state;
}

void GuidedDecoding::compute(MaskJob& job) {
  GuidedGrammar& grammar = *job.guide->grammar;
  job.rows.assign(job.drafts.size() + 1, nullptr);
  int32_t state = job.guide->state;
  for (size_t row = 0; row < job.rows.size() && state != GrammarMatcher::kDead; ++row) {
    job.rows[row] = trie_->mask(grammar.matcher, state, grammar.literal_tokens).data();
    if (row < job.drafts.size()) state = advance(grammar, state, job.drafts[row]);
  }
}

void GuidedDecoding::start_masks(std::vector<MaskJob>& jobs) {
  if (!worker_.joinable()) worker_ = std::thread([this] { worker_loop(); });
  {
    std::lock_guard lock(mutex_);
    jobs_ = &jobs;
    busy_ = true;
    failure_ = nullptr;
  }
  wake_.notify_all();
}

void GuidedDecoding::wait_masks() {
  std::unique_lock lock(mutex_);
  wake_.wait(lock, [&] { return !busy_; });
  jobs_ = nullptr;
  if (failure_) std::rethrow_exception(std::exchange(failure_, nullptr));
}

void GuidedDecoding::worker_loop() {
  std::unique_lock lock(mutex_);
  for (;;) {
    wake_.wait(lock, [&] { return stopping_ || (busy_ && jobs_ != nullptr); });
    if (stopping_) return;
    std::vector<MaskJob>& jobs = *jobs_;
    lock.unlock();
    std::exception_ptr failure;
    try {
      // Masks are dropped before any is made, so none this step's rows point to goes.
      for (MaskJob& job : jobs)
        if (job.guide->grammar->matcher.cached_masks() > kMaxCachedMasks) job.guide->grammar->matcher.drop_masks();
      for (MaskJob& job : jobs) {
        try {
          compute(job);
        } catch (const Error& error) {
          job.error = error.what();
        }
      }
    } catch (...) {
      failure = std::current_exception();
    }
    lock.lock();
    failure_ = failure;
    busy_ = false;
    wake_.notify_all();
  }
}

}  // namespace ernie
