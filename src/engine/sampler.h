// Choosing each request's next token from a row of logits, as FastDeploy does
// (fastdeploy-behaviour.md §7), with per-request state: the tokens seen so far (for the
// penalties), the number generated (for min_tokens) and the request's own random stream.
//
// Pipeline, in order, on the row of processed logits l:
//   1. min_tokens: while fewer than min_tokens tokens were generated, every end token gets -1e10.
//   2. repetition penalty alpha on every token seen in the prompt or the output:
//      l <- (l < 0 ? l * alpha : l / alpha).
//   3. frequency beta and presence gamma on generated tokens: l <- l - count * beta - gamma.
//   4. bad_words_token_ids -> -1e10.
//   5. greedy (temperature < 1e-5, top_k == 1 or top_p < 1e-5): argmax of l; no randomness used.
//   6. otherwise weights w = exp((l - max l) / temperature), i.e. softmax at the temperature;
//   7. min_p keeps w >= min_p (p >= min_p * max p, since the largest w is 1);
//   8. top_k keeps {l >= k-th largest l}; top_p then keeps the strict nucleus of what is left
//      (renormalised after top_k): the smallest set of most likely tokens whose mass reaches
//      top_p of the remaining mass. Both are threshold sets: tokens tied with the last one
//      kept are kept too, so the result never depends on the order of equal logits.
//   9. one draw in proportion to w over the kept tokens, from the request's own Random
//      (seeded by params.seed, else by default_seed), so a seed reproduces the output
//      whatever else runs in the batch.
//
// SamplingClass::kBase and ::kRejection draw from exactly this distribution; they differ
// only in how they find it (docs/sampling.md): kBase prefilters the row and partially
// sorts what is left, kRejection rejection-samples without sorting the vocabulary. For one
// seed each class gives the same tokens run after run (the two classes give different
// tokens, from the same distribution).
//
// Logprobs are those of the raw model logits: log_softmax of the row as it arrives, before
// penalties, temperature and truncation. FastDeploy computes them that way (sampler.py
// forward_cuda calls compute_logprobs on the logits before apply_penalty_multi_scores, its
// "raw_logprobs"), and so does vLLM by default (logprobs_mode = raw_logprobs): they describe
// the model, not the sampling settings. FastDeploy's optional post-processing is done on
// request: temp_scaled_logprobs divides the raw row by the temperature first, and
// top_p_normalized_logprobs (with top_p < 1) renormalises over the top-p nucleus, giving
// the lowest float to tokens outside it.
#pragma once

#include <cstdint>
#include <span>
#include <unordered_map>
#include <vector>

#include "engine/sampling_params.h"
#include "util/random.h"

namespace ernie {

struct TokenLogprob {
  int32_t token;
  float logprob;
};

struct SampledToken {
  int32_t token = 0;
  float logprob = 0.0f;                    // of the chosen token; only filled when params.logprobs is set
  std::vector<TokenLogprob> top_logprobs;  // params.logprobs entries (fewer if the vocabulary is smaller),
                                           // most likely first, ties by lower token id
  // Of the chosen token under the processed row (penalties applied) at the request's
  // temperature (1 when greedy), before truncation; filled when report_probability is set.
  float probability = 1.0f;
};

// A prompt token's logprob under the raw row of logits that predicted it, its rank
// (1 + the number of tokens strictly more likely) and the `top` most likely tokens.
struct PromptTokenLogprob {
  int32_t token = 0;
  float logprob = 0.0f;
  int64_t rank = 1;
  std::vector<TokenLogprob> top;
};
PromptTokenLogprob score_prompt_token(std::span<const float> logits, int32_t token, size_t top);

class RequestSampler {
 public:
  // prompt: the request's prompt ids (they count as "seen" for repetition_penalty);
  // eos_token_ids: the model's end tokens (banned until min_tokens were generated);
  // default_seed: used when params.seed is unset; report_probability: fill
  // SampledToken::probability (the engine's early stop reads it). params should have
  // passed validate_sampling_params.
  RequestSampler(const SamplingParams& params, std::span<const int32_t> prompt, std::vector<int32_t> eos_token_ids,
                 uint64_t default_seed, SamplingClass sampling_class, bool report_probability = false);

  // logits: one row [vocab] of raw model logits. It is used as scratch: the penalties and
  // bans are written into it. Does not record the token: the engine calls accept(). NaN
  // logits are never drawn (argmax skips them too). Throws ernie::Error when the row is
  // empty, has no finite maximum (+inf, or nothing but NaN and -inf), or a token id it must
  // penalise or ban lies outside it. Allocates nothing once this thread has sampled a row
  // of this size (the vocabulary-sized scratch is per thread), except the returned
  // top_logprobs.
  //
  // allowed: null, or one bit per token (32 per word, bit id & 31 of word id / 32) set for
  // the tokens an output constraint allows; the others are never drawn, and the draw is
  // from the distribution above renormalised over the allowed tokens. Logprobs stay those
  // of the raw row. At least one token must be allowed.
  SampledToken sample(std::span<float> logits, const uint32_t* allowed = nullptr);

  // Records a token appended to the output (penalties and min_tokens count it). The engine
  // calls it for every generated token, including ones forced from outside.
  void accept(int32_t token);

  int num_generated() const { return num_generated_; }
  const SamplingParams& params() const { return params_; }
  SamplingClass sampling_class() const { return sampling_class_; }

 private:
  struct SeenToken {
    int32_t token;
    int32_t times_generated;  // 0 for a token seen only in the prompt
  };

  size_t note_seen(int32_t token);
  static void apply_token_mask(std::span<float> logits, const uint32_t* allowed);
  void apply_logit_processors(std::span<float> logits) const;
  void apply_penalties(std::span<float> logits) const;

  SamplingParams params_;
  std::vector<int32_t> eos_token_ids_;
  SamplingClass sampling_class_;
  Random random_;
  bool greedy_;
  float inverse_temperature_;
  int top_k_;    // 0: off
  float top_p_;  // 1: off
  bool report_probability_;
  int num_generated_ = 0;
  std::vector<SeenToken> seen_;
  std::unordered_map<int32_t, size_t> seen_index_;
  // The vocabulary-sized scratch (weights, candidates: ~2 MB at 103424 tokens) is per
  // thread, not per request, so that hundreds of waiting requests do not each hold it.
};

// Index of the largest logit (the first on ties; NaNs are skipped). Throws on an empty row.
int32_t argmax(std::span<const float> logits);

}  // namespace ernie
