#include "engine/sampling_params.h"

#include <cmath>
#include <cstdlib>
#include <span>

#include "util/error.h"
#include "util/log.h"

namespace ernie {
namespace {

// NaN fails every comparison, so each check is written as "fail unless in range".
void require_in_range(const char* field, float value, float low, float high) {
  if (!(value >= low && value <= high)) fail(field, " must lie in [", low, ", ", high, "], got ", value);
}

void require_token_ids_in_vocabulary(const char* field, std::span<const int32_t> ids, int vocab_size) {
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] < 0 || ids[i] >= vocab_size)
      fail(field, "[", i, "] = ", ids[i], " is not a token id; ids lie in [0, ", vocab_size, ")");
  }
}

}  // namespace

void validate_sampling_params(const SamplingParams& params, int vocab_size) {
  if (vocab_size <= 0) fail("vocabulary size must be positive, got ", vocab_size);
  if (!(params.temperature >= 0.0f) || !std::isfinite(params.temperature))
    fail("temperature must be a finite number >= 0 (0 means greedy), got ", params.temperature);
  require_in_range("top_p", params.top_p, 0.0f, 1.0f);
  if (params.top_k < -1) fail("top_k must be >= -1 (-1 or 0 turn it off), got ", params.top_k);
  require_in_range("min_p", params.min_p, 0.0f, 1.0f);
  if (!(params.repetition_penalty > 0.0f) || !std::isfinite(params.repetition_penalty))
    fail("repetition_penalty must be a finite number > 0 (1 turns it off), got ", params.repetition_penalty);
  require_in_range("presence_penalty", params.presence_penalty, -kMaxAbsolutePenalty, kMaxAbsolutePenalty);
  require_in_range("frequency_penalty", params.frequency_penalty, -kMaxAbsolutePenalty, kMaxAbsolutePenalty);
  if (params.max_tokens < 1) fail("max_tokens must be >= 1, got ", params.max_tokens);
  if (params.min_tokens < 0) fail("min_tokens must be >= 0, got ", params.min_tokens);
  if (params.min_tokens > params.max_tokens)
    fail("min_tokens must be <= max_tokens (", params.max_tokens, "), got ", params.min_tokens);
  if (params.seed && *params.seed > kMaxSeed) fail("seed must lie in [0, ", kMaxSeed, "], got ", *params.seed);
  if (params.reasoning_max_tokens && *params.reasoning_max_tokens < 1)
    fail("reasoning_max_tokens must be >= 1, got ", *params.reasoning_max_tokens);
  if (params.logprobs && (*params.logprobs < 0 || *params.logprobs > vocab_size))
    fail("logprobs (top_logprobs) must lie in [0, ", vocab_size, "] (the vocabulary size), got ", *params.logprobs);
  if (params.prompt_logprobs && (*params.prompt_logprobs < 0 || *params.prompt_logprobs > vocab_size))
    fail("prompt_logprobs must lie in [0, ", vocab_size, "] (the vocabulary size), got ", *params.prompt_logprobs);
  for (size_t i = 0; i < params.stop.size(); ++i) {
    // An empty stop string would match before every token.
    if (params.stop[i].empty()) fail("stop[", i, "] is an empty string; stop strings must be non-empty");
  }
  require_token_ids_in_vocabulary("stop_token_ids", params.stop_token_ids, vocab_size);
  require_token_ids_in_vocabulary("bad_words_token_ids", params.bad_words_token_ids, vocab_size);
}

void validate_prompt_tokens(std::span<const int32_t> prompt, int vocab_size) {
  for (const int32_t token : prompt)
    if (token < 0 || token >= vocab_size) fail("prompt token id ", token, " is outside the vocabulary 0..", vocab_size - 1);
}

SamplingClass parse_sampling_class(std::string_view name) {
  if (name == "base") return SamplingClass::kBase;
  if (name == "rejection") return SamplingClass::kRejection;
  if (name == "base_non_truncated" || name == "air") {
    // FastDeploy's variants of its GPU top-p kernel; here base already is the strict
    // nucleus that base_non_truncated names, and air is a GPU-only algorithm.
    log_warning("FD_SAMPLING_CLASS=", name, " runs as base (strict nucleus sampling) in ernie.cpp");
    return SamplingClass::kBase;
  }
  fail("FD_SAMPLING_CLASS must be one of base, rejection, base_non_truncated, air; got \"", name, "\"");
}

SamplingClass sampling_class_from_env() {
  const char* value = std::getenv("FD_SAMPLING_CLASS");
  if (value == nullptr || *value == '\0') return SamplingClass::kBase;
  return parse_sampling_class(value);
}

const char* sampling_class_name(SamplingClass sampling_class) {
  switch (sampling_class) {
    case SamplingClass::kBase: return "base";
    case SamplingClass::kRejection: return "rejection";
  }
  return "?";
}

}  // namespace ernie
