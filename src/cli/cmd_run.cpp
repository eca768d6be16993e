// ernie run: generate a continuation of a prompt and stream it to stdout.
#include <algorithm>
#include <cstdio>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/model_loading.h"
#include "engine/sampler.h"
#include "model/generation_config.h"
#include "text/incremental_detokenizer.h"
#include "util/error.h"
#include "util/log.h"
#include "util/process_stats.h"
#include "util/stopwatch.h"

namespace ernie {

int run_command(int argc, char** argv) {
  const ArgParser parser(
      "ernie run --model DIR --prompt TEXT [--max-tokens N] [--temperature T] [--top-p P] [--seed S]",
      "Generates a continuation of the prompt (raw text, no chat template, no BOS added) and streams it to "
      "stdout. Temperature 0 is greedy. Sampling defaults come from the model's generation_config.json.",
      {{"model", "DIR", "checkpoint directory (config.json, safetensors, tokenizer.model)", ""},
       {"prompt", "TEXT", "the text to continue", ""},
       {"max-tokens", "N", "most tokens to generate", "128"},
       {"temperature", "T", "sampling temperature, 0 = greedy (default: generation_config.json, else 0.8)", ""},
       {"top-p", "P", "nucleus sampling mass in (0, 1] (default: generation_config.json, else 0.8)", ""},
       {"top-k", "K", "sample among the K most likely tokens, 0 = all", "0"},
       {"seed", "S", "random seed; the same seed gives the same output", "0"},
       {"ignore-eos", "", "keep generating past end-of-sequence tokens", ""},
       {"threads", "N", "worker threads, 0 = all hardware threads", "0"}});
  const ParsedArgs args = parser.parse(argc, argv, 2);
  if (args.help_requested()) {
    std::fputs(parser.help_text().c_str(), stdout);
    return 0;
  }
  const std::string model_dir = args.get("model");
  const std::string prompt = args.get("prompt");
  const int64_t max_tokens = args.get_int("max-tokens");
  if (max_tokens < 1) fail("--max-tokens must be at least 1, got ", max_tokens);

  const GenerationConfig defaults = load_generation_config(model_dir);
  SamplingParams sampling;
  sampling.temperature = args.has("temperature") ? static_cast<float>(args.get_double("temperature"))
                                                 : defaults.temperature.value_or(0.8f);
  sampling.top_p = args.has("top-p") ? static_cast<float>(args.get_double("top-p")) : defaults.top_p.value_or(0.8f);
  sampling.top_k = static_cast<int>(args.get_int("top-k"));
  validate_sampling_params(sampling);

  ThreadPool pool(thread_count_from_flag(args.get_int("threads")));
  const Tokenizer tokenizer = Tokenizer::load(model_dir);
  auto model = load_model_reporting(model_dir, pool);
  const ModelConfig& config = model->config();

  std::vector<int32_t> tokens = tokenizer.encode(prompt);
  if (tokens.empty()) fail("--prompt is empty; give some text to continue");
  if (static_cast<int64_t>(tokens.size()) + max_tokens > config.max_position_embeddings)
    fail("prompt (", tokens.size(), " tokens) + --max-tokens (", max_tokens, ") exceeds max_position_embeddings (",
         config.max_position_embeddings, ")");
  const size_t prompt_tokens = tokens.size();
  const std::vector<int> eos_ids = defaults.eos_token_ids.empty() ? config.eos_token_ids : defaults.eos_token_ids;

  auto cache = model->new_kv_cache();
  Sampler sampler(static_cast<uint64_t>(args.get_int("seed")));
  IncrementalDetokenizer detokenizer(tokenizer);
  Stopwatch prefill_clock;
  std::vector<float> logits = model->forward(single_sequence_batch(*cache, tokens, 0, /*all_rows=*/false));
  const double prefill_seconds = prefill_clock.seconds();

  Stopwatch decode_clock;
  int64_t generated = 0;
  for (;;) {
    const int32_t next = sampler.sample(logits, sampling);
    ++generated;
    const bool is_eos = std::find(eos_ids.begin(), eos_ids.end(), next) != eos_ids.end();
    if (is_eos && !args.flag("ignore-eos")) break;
    std::fputs(detokenizer.push(next).c_str(), stdout);
    std::fflush(stdout);
    if (generated >= max_tokens) break;
    logits = model->forward(single_sequence_batch(*cache, std::span(&next, 1), static_cast<int64_t>(tokens.size()), false));
    tokens.push_back(next);
  }
  std::fputs(detokenizer.flush().c_str(), stdout);
  std::fputs("\n", stdout);
  const double decode_seconds = decode_clock.seconds();
  log_info("prompt: ", prompt_tokens, " tokens in ", prefill_seconds, " s; generated ", generated, " tokens in ", decode_seconds, " s (",
           generated > 1 ? static_cast<double>(generated - 1) / decode_seconds : 0.0, " tokens/s); peak RSS ",
           peak_rss_bytes() / 1e6, " MB");
  return 0;
}

}  // namespace ernie
