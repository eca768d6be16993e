// Perplexity of a model on a token sequence, the figure users compare to judge a
// checkpoint or a quantization. Two protocols, each fixed so that other implementations
// reproduce it exactly; the result is exp(mean negative log-likelihood) either way.
//
//   kWindows: the tokens are cut into consecutive windows of `context` tokens (the last
//     one shorter); inside each window, token i >= 1 is predicted from tokens 0..i-1 of
//     that window only.
//   kSecondHalf: llama.cpp's llama-perplexity. The tokens are cut into whole windows of
//     `context` tokens (a shorter tail is dropped) and only tokens context/2 + 1 ..
//     context-1 of each are scored, so every scored token sees at least half a window
//     of context. When the tokenizer adds BOS, the caller puts BOS first and passes its
//     id: each window's first token is then replaced by BOS.
#pragma once

#include <cstdint>
#include <functional>
#include <span>

#include "model/ernie_model.h"

namespace ernie {

enum class PerplexityProtocol { kWindows, kSecondHalf };

struct PerplexityOptions {
  int64_t context = 256;
  PerplexityProtocol protocol = PerplexityProtocol::kWindows;
  int32_t bos_id = -1;  // kSecondHalf: BOS to start each window with, or -1 for none
  // When set, every scored row is also run through this model (the same weights
  // unquantized, say) and the result says how far the two distributions are apart.
  ErnieModel* reference = nullptr;
};

struct PerplexityResult {
  int64_t predicted_tokens = 0;
  int64_t windows = 0;
  double mean_nll = 0;  // natural log
  double perplexity = 0;
  // With a reference model: mean KL(reference || model) over the scored rows (nats), and
  // the fraction of rows whose most likely token is the same in both.
  double mean_kl = 0;
  double same_top1 = 0;
};

// `on_window(done, total)` reports progress after each window. Throws ernie::Error for a
// context below 2 (kSecondHalf: 4), a token outside the vocabulary, or a text too short
// to score anything.
PerplexityResult evaluate_perplexity(ErnieModel& model, std::span<const int32_t> tokens, const PerplexityOptions& options,
                                     const std::function<void(int64_t, int64_t)>& on_window = nullptr);
// The kWindows protocol with windows of `context` tokens.
PerplexityResult evaluate_perplexity(ErnieModel& model, std::span<const int32_t> tokens, int64_t context,
                                     const std::function<void(int64_t, int64_t)>& on_window = nullptr);

}  // namespace ernie
