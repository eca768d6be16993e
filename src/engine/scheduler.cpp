#include "engine/scheduler.h"

#include <algorithm>

namespace ernie {

int64_t SchedulerStep::num_tokens() const {
  int64_t total = 0;
  for (const ScheduledChunk& chunk : chunks) total += chunk.num_tokens;
  return total;
}

void Scheduler::add(EngineRequest* request) {
  request->status = RequestStatus::kWaiting;
  waiting_.push_back(request);
}

void Scheduler::remove(EngineRequest* request) {
  std::erase(running_, request);
  std::erase(waiting_, request);
  cache_.free(*request);
}

void Scheduler::preempt(EngineRequest* request) {
  cache_.free(*request);
  request->num_computed_tokens = 0;
  request->status = RequestStatus::kWaiting;
  ++request->num_preemptions;
  waiting_.push_front(request);
}

bool Scheduler::admit_under_v0_ratio(const EngineRequest& request) const {
  int prompt_blocks = cache_.blocks_needed(request.num_tokens());
  for (const EngineRequest* running : running_) prompt_blocks += cache_.blocks_needed(running->prompt_length);
  return prompt_blocks <= static_cast<int>(config_.kv_cache_ratio * cache_.pool().num_blocks());
}

SchedulerStep Scheduler::schedule() {
  SchedulerStep step;
  int64_t budget = config_.max_num_batched_tokens;

  // Running requests first, in admission order.
  for (size_t i = 0; i < running_.size() && budget > 0;) {
    EngineRequest* request = running_[i];
    const int64_t wanted = std::min(request->num_tokens() - request->num_computed_tokens, budget);
    bool preempted_self = false;
    while (!cache_.allocate_slots(*request, request->num_computed_tokens + wanted)) {
      EngineRequest* victim = running_.back();
      running_.pop_back();
      preempt(victim);
      step.preempted.push_back(victim);
      if (victim == request) {
        preempted_self = true;
        break;
      }
    }
    if (preempted_self) break;
    step.chunks.push_back({request, request->num_computed_tokens, wanted});
    budget -= wanted;
    ++i;
  }

  // Then waiting requests, in order, unless this step had to preempt.
  while (step.preempted.empty() && budget > 0 && !waiting_.empty() &&
         static_cast<int>(running_.size()) < config_.max_num_seqs) {
    EngineRequest* request = waiting_.front();
    if (config_.v0_admission && !admit_under_v0_ratio(*request)) break;
    const int64_t cached = cache_.acquire_cached_prefix(*request);
    if (!request->cached_tokens) request->cached_tokens = cached;
    request->num_computed_tokens = cached;
    const int64_t remaining = request->num_tokens() - cached;
    if (!config_.chunked_prefill && remaining > budget) {
      cache_.free(*request);  // wait for a step with room for the whole prompt
      request->num_computed_tokens = 0;
      break;
    }
    const int64_t wanted = std::min(remaining, budget);
    if (!cache_.allocate_slots(*request, cached + wanted)) {
      cache_.free(*request);
      request->num_computed_tokens = 0;
      break;
    }
    waiting_.pop_front();
    request->status = RequestStatus::kRunning;
    running_.push_back(request);
    step.chunks.push_back({request, cached, wanted});
    budget -= wanted;
  }
  return step;
}

}  // namespace ernie
