// What a request's stream delivers: increments of tokens and text as they are
// generated, and a final output with the finish reason and counts.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "engine/sampler.h"

namespace ernie {

enum class FinishReason { kStop, kLength, kAbort, kError };
const char* finish_reason_name(FinishReason reason);  // "stop", "length", "abort", "error"

struct RequestOutput {
  std::string request_id;
  std::vector<int32_t> token_ids;        // tokens generated since the previous output
  std::string text;                      // their text (stop strings trimmed unless asked)
  std::vector<SampledToken> logprobs;    // one per token when logprobs were requested
  std::optional<FinishReason> finish_reason;
  std::string error;                     // with FinishReason::kError
  bool server_fault = false;             // the error is the engine's, not the request's
  bool waited_too_long = false;          // refused: not admitted within EngineConfig::max_waiting_time
  // With the first generated token, when the request asked for prompt logprobs: one entry
  // per prompt token after the first.
  std::vector<PromptTokenLogprob> prompt_logprobs;
  int64_t prompt_tokens = 0;
  int64_t cached_tokens = 0;             // prompt tokens served by the prefix cache
  int64_t completion_tokens = 0;         // generated so far
  int64_t draft_tokens = 0;              // speculative drafts verified so far, and those accepted
  int64_t accepted_draft_tokens = 0;

  bool finished() const { return finish_reason.has_value(); }
};

}  // namespace ernie
