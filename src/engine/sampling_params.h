// What a request asks of the sampler, with FastDeploy's (and OpenAI's) meanings and
// defaults, and the choice of sampling implementation (FD_SAMPLING_CLASS).
#pragma once

#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace ernie {

struct SamplingParams {
  float temperature = 1.0f;         // 0 (anything below 1e-5): greedy
  float top_p = 1.0f;               // [0, 1]; 1: off; 0 (below 1e-5): greedy, as FastDeploy's 1e-5 floor makes it
  int top_k = 0;                    // 0 or -1: off; 1: greedy
  float min_p = 0.0f;               // keep tokens with p >= min_p * max p; 0: off
  float repetition_penalty = 1.0f;  // > 0; 1: off. On every token seen in the prompt or the output
  float presence_penalty = 0.0f;    // [-2, 2]; on tokens generated at least once
  float frequency_penalty = 0.0f;   // [-2, 2]; times the number of times a token was generated
  int min_tokens = 0;               // the model's end tokens are banned until this many were generated
  int max_tokens = 16;              // enforced by the engine, not the sampler
  std::optional<uint64_t> seed;     // unset: the engine picks one
  std::vector<int32_t> stop_token_ids;
  std::vector<std::string> stop;   // stop strings, matched by the engine on the text
  bool include_stop_str_in_output = false;
  std::vector<int32_t> bad_words_token_ids;  // never sampled
  bool ignore_eos = false;                   // the engine keeps going past end tokens
  std::optional<int> logprobs;               // top logprobs wanted per token, 0..vocab; unset: no logprobs
  bool temp_scaled_logprobs = false;         // logprobs of the raw logits divided by the temperature
  bool top_p_normalized_logprobs = false;    // logprobs renormalised over the top-p nucleus (when top_p < 1)
  // Per prompt token after the first: its logprob and rank under the logits that predicted
  // it, plus this many most likely tokens; unset: none. The prompt skips the prefix cache.
  std::optional<int> prompt_logprobs;
  // Thinking budget (FastDeploy's reasoning_max_tokens): when a prompt leaves the model
  // inside <think>, at most this many tokens are generated before </think> is forced in;
  // an end token sampled earlier is replaced by </think> too. Unset: no budget.
  std::optional<int> reasoning_max_tokens;
};

// FastDeploy's limits (--max-logprobs defaults to 20 top logprobs).
inline constexpr uint64_t kMaxSeed = 922337203685477580ull;
inline constexpr float kMaxAbsolutePenalty = 2.0f;  // presence and frequency

// Throws ernie::Error naming the field, the bad value and the allowed range. vocab_size
// bounds the token ids (stop_token_ids, bad_words_token_ids).
void validate_sampling_params(const SamplingParams& params, int vocab_size);

// Throws ernie::Error naming the first prompt token outside [0, vocab_size).
void validate_prompt_tokens(std::span<const int32_t> prompt, int vocab_size);

// FD_SAMPLING_CLASS. Both classes draw from the same distribution (see sampler.h);
// they differ in how they find the top-k / top-p candidates.
enum class SamplingClass {
  kBase,       // prefilters the row, then partially sorts what is left (nth_element, sort)
  kRejection,  // FlashInfer-style rejection sampling: no sort of the vocabulary
};

// "base" -> kBase, "rejection" -> kRejection; FastDeploy's "base_non_truncated" and "air"
// are accepted and run as kBase (with a warning). Anything else throws, listing the names.
SamplingClass parse_sampling_class(std::string_view name);
// parse_sampling_class of $FD_SAMPLING_CLASS; kBase when it is unset or empty.
SamplingClass sampling_class_from_env();
const char* sampling_class_name(SamplingClass sampling_class);

}  // namespace ernie
