// Decides, every engine step, which requests compute how many tokens. One token budget
// per step; no prefill or decode phases: each running request first takes what it
// needs (1 token when decoding, the rest of its prompt chunk when prefilling), then
// waiting requests are admitted in arrival order (taking turns between the groups of
// batched requests) with chunks of their prompts; while some wait, a running prompt's
// chunk leaves them half of the step. When
// blocks run out, the most recently admitted running request is preempted: its blocks
// are freed and it goes back to the front of the queue to be recomputed later.
#pragma once

#include <cstdint>
#include <deque>
#include <unordered_map>
#include <vector>

#include "engine/kv_cache_manager.h"
#include "engine/request.h"

namespace ernie {

struct SchedulerConfig {
  int max_num_seqs = 8;
  int64_t max_num_batched_tokens = 512;
  bool chunked_prefill = true;
  // FastDeploy's older (V0) admission: prompts may hold at most this share of the
  // blocks at admission; the rest stays for decoding. Off (V1) by default.
  bool v0_admission = false;
  double kv_cache_ratio = 0.75;
};

struct ScheduledChunk {
  EngineRequest* request = nullptr;
  int64_t start = 0;  // first token position computed in this step
  int64_t num_tokens = 0;
};

struct SchedulerStep {
  std::vector<ScheduledChunk> chunks;
  std::vector<EngineRequest*> preempted;
  // Admitted with blocks for their whole prompt, to be computed by a prefill instance
  // (EngineRequest::remote_prefill); they are kRemote until resume_remote.
  std::vector<EngineRequest*> remote_started;
  int64_t num_tokens() const;
};

// Prompt tokens of a request asking for prompt logprobs computed in one step, which
// bounds the step's logits buffer at this many vocabulary-sized rows.
inline constexpr int64_t kMaxPromptLogprobRowsPerStep = 256;

class Scheduler {
 public:
  Scheduler(const SchedulerConfig& config, KvCacheManager& cache) : config_(config), cache_(cache) {}

  void add(EngineRequest* request);
  // Removes a request wherever it is and frees its blocks.
  void remove(EngineRequest* request);
  SchedulerStep schedule();
  // A kRemote request's prompt is in its blocks up to num_computed_tokens (all of it
  // but the last token, or only its cached prefix when the prefill instance failed): it
  // runs from the next step, computing the rest itself.
  void resume_remote(EngineRequest* request);

  size_t num_running() const { return running_.size() + remote_.size(); }
  size_t num_waiting() const { return waiting_.size(); }
  // Requests away at a prefill instance give the engine nothing to do until they return.
  bool idle() const { return running_.empty() && waiting_.empty(); }

 private:
  void preempt(EngineRequest* request);
  bool admit_under_v0_ratio(const EngineRequest& request) const;
  // Tokens of the request's prompt to compute this step, out of `remaining`, in `budget`.
  static int64_t prompt_chunk(const EngineRequest& request, int64_t remaining, int64_t budget);
  // The waiting request to admit next: the first whose group has the fewest running.
  size_t next_to_admit(const std::unordered_map<uint64_t, int>& running_per_group) const;

  SchedulerConfig config_;
  KvCacheManager& cache_;
  std::deque<EngineRequest*> running_;  // in admission order: the back is preempted first
  std::deque<EngineRequest*> waiting_;
  std::vector<EngineRequest*> remote_;  // kRemote: they hold seats and blocks
};

}  // namespace ernie
