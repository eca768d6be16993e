// Perplexity of a model on a token sequence, the figure users compare to judge a
// checkpoint or a quantization. The protocol is fixed so that other implementations can
// reproduce it exactly: the tokens are cut into consecutive windows of `context` tokens
// (the last one shorter); inside each window, token i >= 1 is predicted from tokens
// 0..i-1 of that window only; the result is exp(mean negative log-likelihood).
#pragma once

#include <cstdint>
#include <functional>
#include <span>

#include "model/ernie_model.h"

namespace ernie {

struct PerplexityResult {
  int64_t predicted_tokens = 0;
  int64_t windows = 0;
  double mean_nll = 0;  // natural log
  double perplexity = 0;
};

// `on_window(done, total)` reports progress after each window. Throws ernie::Error for a
// context below 2 or a token outside the vocabulary.
PerplexityResult evaluate_perplexity(ErnieModel& model, std::span<const int32_t> tokens, int64_t context,
                                     const std::function<void(int64_t, int64_t)>& on_window = nullptr);

}  // namespace ernie
