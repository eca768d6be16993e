#include "engine/scheduler.h"

#include <algorithm>
#include <limits>

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
  std::erase(remote_, request);
  std::erase(waiting_, request);
  cache_.free(*request);
}

void Scheduler::preempt(EngineRequest* request) {
  cache_.free(*request);
  request->drafts.clear();  // proposed for the step that will not happen
  request->num_computed_tokens = 0;
  request->status = RequestStatus::kWaiting;
  ++request->num_preemptions;
  waiting_.push_front(request);
}

void Scheduler::resume_remote(EngineRequest* request) {
  std::erase(remote_, request);
  request->status = RequestStatus::kRunning;
  running_.push_back(request);
}

bool Scheduler::admit_under_v0_ratio(const EngineRequest& request) const {
  int prompt_blocks = cache_.blocks_needed(request.num_tokens());
  for (const EngineRequest* running : running_) prompt_blocks += cache_.blocks_needed(running->prompt_length);
  return prompt_blocks <= static_cast<int>(config_.kv_cache_ratio * cache_.pool().num_blocks());
}

size_t Scheduler::next_to_admit(const std::unordered_map<uint64_t, int>& running_per_group) const {
  size_t best = 0;
  int best_running = std::numeric_limits<int>::max();
  for (size_t i = 0; i < waiting_.size() && best_running > 0; ++i) {
    const uint64_t group = waiting_[i]->fairness_group;
    const auto found = group == 0 ? running_per_group.end() : running_per_group.find(group);
    const int running = found == running_per_group.end() ? 0 : found->second;
    if (running < best_running) {
      best = i;
      best_running = running;
    }
  }
  return best;
}

int64_t Scheduler::prompt_chunk(const EngineRequest& request, int64_t remaining, int64_t budget) {
  const int64_t wanted = std::min(remaining, budget);
  // Each prompt-logprob row is a vocabulary of logits (400 KB at ERNIE's 103k tokens).
  return request.params.prompt_logprobs ? std::min(wanted, kMaxPromptLogprobRowsPerStep) : wanted;
}

SchedulerStep Scheduler::schedule() {
  SchedulerStep step;
  int64_t budget = config_.max_num_batched_tokens;
  // While requests wait for a seat, prompt chunks of running requests leave them half
  // the step: a long prefill then shares every step with newcomers instead of holding
  // them back until it ends (decode tokens are never held back).
  const bool seats_free = static_cast<int>(num_running()) < config_.max_num_seqs;
  const int64_t reserved = !waiting_.empty() && seats_free && config_.chunked_prefill ? budget / 2 : 0;

  // Running requests first, in admission order: every decode (one token) before any
  // prompt chunk, so a long prefill admitted earlier cannot take a whole step from
  // requests that are already generating.
  bool preempted_self = false;
  for (const bool decodes : {true, false}) {
    for (size_t i = 0; i < running_.size() && budget > 0 && !preempted_self;) {
      EngineRequest* request = running_[i];
      const int64_t remaining = request->num_tokens() - request->num_computed_tokens;
      if ((remaining <= 1) != decodes) {
        ++i;
        continue;
      }
      // A decode verifies its speculative drafts in the same chunk, budget permitting.
      const int64_t drafts = static_cast<int64_t>(request->drafts.size());
      const int64_t wanted =
          decodes ? std::min(remaining + drafts, budget) : prompt_chunk(*request, remaining, budget - reserved);
      if (wanted <= 0) {
        ++i;
        continue;
      }
      while (!cache_.allocate_slots(*request, request->num_computed_tokens + wanted)) {
        EngineRequest* victim = running_.back();
        running_.pop_back();
        // A decode scheduled earlier in this step may be the victim: give its tokens back.
        const auto scheduled = std::find_if(step.chunks.begin(), step.chunks.end(),
                                            [&](const ScheduledChunk& chunk) { return chunk.request == victim; });
        if (scheduled != step.chunks.end()) {
          budget += scheduled->num_tokens;
          step.chunks.erase(scheduled);
        }
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
  }

  // Then waiting requests, unless this step had to preempt: in arrival order, except
  // that a request whose group has fewer running members goes first.
  std::unordered_map<uint64_t, int> running_per_group;
  for (const EngineRequest* running : running_)
    if (running->fairness_group != 0) ++running_per_group[running->fairness_group];
  while (step.preempted.empty() && budget > 0 && !waiting_.empty() &&
         static_cast<int>(num_running()) < config_.max_num_seqs) {
    const size_t index = next_to_admit(running_per_group);
    EngineRequest* request = waiting_[index];
    if (config_.v0_admission && !admit_under_v0_ratio(*request)) break;
    // Prompt logprobs need every prompt position's logits, so such a prompt is computed
    // in full, not taken from the prefix cache.
    const int64_t cached = request->params.prompt_logprobs ? 0 : cache_.acquire_cached_prefix(*request);
    if (!request->cached_tokens) request->cached_tokens = cached;
    request->num_computed_tokens = cached;
    const int64_t remaining = request->num_tokens() - cached;
    if (request->remote_prefill && remaining > 1) {
      // Blocks for the whole prompt now (a prefill instance fills them), and no tokens
      // of this step's budget.
      if (!cache_.allocate_slots(*request, request->num_tokens())) {
        cache_.free(*request);
        request->num_computed_tokens = 0;
        break;
      }
      waiting_.erase(waiting_.begin() + static_cast<std::ptrdiff_t>(index));
      request->remote_prefill = false;
      request->status = RequestStatus::kRemote;
      remote_.push_back(request);
      step.remote_started.push_back(request);
      continue;
    }
    request->remote_prefill = false;  // nothing left for a prefill instance to compute
    if (!config_.chunked_prefill && remaining > budget) {
      cache_.free(*request);  // wait for a step with room for the whole prompt
      request->num_computed_tokens = 0;
      break;
    }
    const int64_t wanted = prompt_chunk(*request, remaining, budget);
    if (!cache_.allocate_slots(*request, cached + wanted)) {
      cache_.free(*request);
      request->num_computed_tokens = 0;
      break;
    }
    waiting_.erase(waiting_.begin() + static_cast<std::ptrdiff_t>(index));
    if (request->fairness_group != 0) ++running_per_group[request->fairness_group];
    request->status = RequestStatus::kRunning;
    running_.push_back(request);
    step.chunks.push_back({request, cached, wanted});
    budget -= wanted;
  }
  return step;
}

}  // namespace ernie
