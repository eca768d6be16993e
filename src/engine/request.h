// What the engine knows about one request while it runs. Its tokens (prompt, then
// output) are the single source of truth: num_computed_tokens catches up with them one
// chunk at a time, whether the request is prefilling, decoding, or recomputing after
// preemption.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "engine/guided_decoding.h"
#include "engine/kv_block_pool.h"
#include "engine/multimodal_prompt.h"
#include "engine/remote_prefill.h"
#include "engine/request_output.h"
#include "engine/sampler.h"
#include "engine/sampling_params.h"

namespace ernie {

// kRemote: a decode instance's request whose prompt another instance is computing
// (engine/remote_prefill.h); it holds its blocks but is not scheduled.
enum class RequestStatus { kWaiting, kRunning, kRemote, kFinished };

struct EngineRequest {
  std::string id;
  std::vector<int32_t> tokens;  // prompt followed by the generated tokens
  int64_t prompt_length = 0;
  SamplingParams params;
  int64_t max_total_tokens = 0;  // prompt + max_tokens, capped by max_model_len
  uint64_t fairness_group = 0;   // GenerateRequest::fairness_group
  std::shared_ptr<const MultimodalPrompt> multimodal;  // GenerateRequest::multimodal

  RequestStatus status = RequestStatus::kWaiting;
  int64_t num_computed_tokens = 0;  // tokens whose keys and values are in the cache
  std::vector<BlockId> block_table;
  int64_t num_registered_blocks = 0;  // leading full blocks already offered to the prefix cache
  uint64_t last_registered_hash = kRootBlockHash;
  std::optional<int64_t> cached_tokens;  // prefix-cache hit of the first admission
  int num_preemptions = 0;
  // Thinking budget (SamplingParams::reasoning_max_tokens): still inside <think>, and the
  // tokens generated there so far.
  bool thinking = false;
  int64_t reasoning_tokens = 0;
  // Prompt logprobs (SamplingParams::prompt_logprobs): the next prompt position to score
  // (position 0 has none), and the entries scored so far, sent with the first token.
  int64_t next_prompt_logprob = 1;
  std::vector<PromptTokenLogprob> prompt_logprobs;
  // Early stop: sampled tokens in a row whose probability passed the threshold.
  int confident_run = 0;
  // Speculative decoding: tokens proposed to follow the last one, verified next step
  // (the scheduler budgets them), and this request's draft and accepted-draft counts.
  std::vector<int32_t> drafts;
  int64_t draft_tokens = 0;
  int64_t accepted_draft_tokens = 0;
  int draft_misses = 0;  // verifications in a row that accepted nothing
  int draft_pause = 0;   // steps left without drafts

  // Structured output: the request's constraint and its place in it; null when free.
  std::unique_ptr<GuidedState> guide;

  // Prefill/decode disaggregation. Decode role: the prompt is to be computed by a
  // prefill instance when admitted (cleared once handed over; after a preemption it is
  // recomputed here). Prefill role: where each layer's keys and values go.
  bool remote_prefill = false;
  std::shared_ptr<KvExport> kv_export;

  std::unique_ptr<RequestSampler> sampler;
  std::chrono::steady_clock::time_point arrival;

  int64_t num_output_tokens() const { return static_cast<int64_t>(tokens.size()) - prompt_length; }
  int64_t num_tokens() const { return static_cast<int64_t>(tokens.size()); }
};

}  // namespace ernie
