// Structured output in the engine: each constrained request's place in its grammar, and
// the allowed-token masks of a step, computed on a worker thread while the forward pass
// runs (the mask of the next token depends only on the tokens already sampled).
//
// Matchers (and with them every state's cached mask) are shared by all requests with
// the same constraint and kept, least recently used first out, after those requests
// end, so a repeated schema costs its cold masks once. Everything here runs on the
// engine thread, except that between start_masks and wait_masks the worker alone
// touches the matchers.
#pragma once

#include <condition_variable>
#include <cstdint>
#include <list>
#include <memory>
#include <mutex>
#include <span>
#include <string>
#include <thread>
#include <vector>

#include "structured/constraint.h"
#include "structured/matcher.h"
#include "structured/token_mask.h"
#include "text/tokenizer.h"

namespace ernie {

// One constraint's matcher, shared by the requests that use it.
struct GuidedGrammar {
  std::string key;
  structured::GrammarMatcher matcher;
  std::vector<structured::LiteralToken> literal_tokens;  // special tokens judged by their text
  explicit GuidedGrammar(std::string key_, structured::Grammar grammar) : key(std::move(key_)), matcher(std::move(grammar)) {}
};

// A request's constraint and where its output stands in it.
struct GuidedState {
  std::shared_ptr<GuidedGrammar> grammar;
  int32_t state = 0;
  // The constraint applies from the first token after </think> when the prompt leaves
  // the model thinking (the reasoning is free, the answer constrained, as FastDeploy).
  bool waits_for_think_end = false;
};

// The masks one sampling request needs this step: one per row (its last token's, then
// one per draft), computed by the worker.
struct MaskJob {
  GuidedState* guide = nullptr;
  std::vector<int32_t> drafts;
  // Filled by the worker: rows.size() == drafts.size() + 1; a row after a draft the
  // grammar refuses (or after an end token) is never sampled and gets null.
  std::vector<const uint32_t*> rows;
  std::string error;  // why the masks could not be made (the request then ends with it)
};

class GuidedDecoding {
 public:
  // `end_tokens` are allowed exactly where a grammar accepts.
  GuidedDecoding(const Tokenizer& tokenizer, int64_t vocab_size, std::vector<int32_t> end_tokens);
  ~GuidedDecoding();
  GuidedDecoding(const GuidedDecoding&) = delete;
  GuidedDecoding& operator=(const GuidedDecoding&) = delete;

  // The state of a new request: the constraint's shared matcher (made, or found by key
  // and `visible_special_tokens`, which are allowed as their text), at the start.
  GuidedState begin(const std::shared_ptr<const structured::CompiledConstraint>& constraint,
                    std::span<const int32_t> visible_special_tokens);

  // The state after `token`; kDead when the grammar refuses it. Throws ernie::Error when
  // the grammar's parse states outgrow kMaxStates (a request's bound on memory).
  int32_t advance(GuidedGrammar& grammar, int32_t state, int32_t token);

  // Starts computing `jobs` on the worker; the jobs must stay put until wait_masks.
  void start_masks(std::vector<MaskJob>& jobs);
  // Waits for them; rethrows what the worker threw.
  void wait_masks();

  // Interned parse states one constraint may reach before its requests fail; cached
  // masks kept per constraint before they are dropped and recomputed.
  static constexpr size_t kMaxStates = size_t{1} << 20;
  static constexpr size_t kMaxCachedMasks = 1024;
  // Constraints kept after their last request ends.
  static constexpr size_t kKeptGrammars = 16;

 private:
  void compute(MaskJob& job);
  void worker_loop();
  const structured::TokenTrie& trie();

  const Tokenizer& tokenizer_;
  int64_t vocab_size_;
  std::vector<int32_t> end_tokens_;
  std::vector<std::string> token_bytes_;  // built with the trie, on first use
  std::unique_ptr<structured::TokenTrie> trie_;
  std::list<std::shared_ptr<GuidedGrammar>> grammars_;  // most recently used first

  std::mutex mutex_;
  std::condition_variable wake_;
  std::vector<MaskJob>* jobs_ = nullptr;  // set while the worker has work
  bool busy_ = false;
  bool stopping_ = false;
  std::exception_ptr failure_;
  std::thread worker_;
};

}  // namespace ernie
