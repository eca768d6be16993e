// ernie run: generate a continuation of a prompt through the engine and stream it to
// stdout.
#include <cstdio>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/engine_setup.h"
#include "cli/model_loading.h"
#include "model/generation_config.h"
#include "util/error.h"
#include "util/log.h"
#include "util/process_stats.h"
#include "util/stopwatch.h"

namespace ernie {

int run_command(int argc, char** argv) {
  std::vector<OptionSpec> options = {
      {"model", "DIR", "checkpoint directory (config.json, safetensors, tokenizer.model)", ""},
      {"prompt", "TEXT", "the text to continue", ""},
      {"max-tokens", "N", "most tokens to generate", "128"},
      {"temperature", "T", "sampling temperature, 0 = greedy (default: generation_config.json, else 0.8)", ""},
      {"top-p", "P", "nucleus sampling mass in (0, 1] (default: generation_config.json, else 0.8)", ""},
      {"top-k", "K", "sample among the K most likely tokens, 0 = all", "0"},
      {"ignore-eos", "", "keep generating past end-of-sequence tokens", ""}};
  for (OptionSpec& option : engine_option_specs()) options.push_back(std::move(option));
  const ArgParser parser(
      "ernie run --model DIR --prompt TEXT [--max-tokens N] [--temperature T] [--top-p P] [--seed S] [engine flags]",
      "Generates a continuation of the prompt (raw text, no chat template, no BOS added) and streams it to "
      "stdout. Temperature 0 is greedy. Sampling defaults come from the model's generation_config.json.",
      options);
  const ParsedArgs args = parser.parse(argc, argv, 2);
  if (args.help_requested()) {
    std::fputs(parser.help_text().c_str(), stdout);
    return 0;
  }
  const std::string model_dir = resolve_model_path(args.get("model"));
  const std::string prompt = args.get("prompt");
  const int64_t max_tokens = args.get_int("max-tokens");
  if (max_tokens < 1 || max_tokens > INT32_MAX) fail("--max-tokens must be at least 1, got ", max_tokens);

  EngineConfig config = engine_config_from_args(args);
  const GenerationConfig defaults = load_generation_config(model_dir);
  GenerateRequest request;
  request.id = "run";
  request.params.temperature = args.has("temperature") ? static_cast<float>(args.get_double("temperature"))
                                                       : defaults.temperature.value_or(0.8f);
  request.params.top_p = args.has("top-p") ? static_cast<float>(args.get_double("top-p")) : defaults.top_p.value_or(0.8f);
  request.params.top_k = static_cast<int>(args.get_int("top-k"));
  request.params.max_tokens = static_cast<int>(max_tokens);
  request.params.ignore_eos = args.flag("ignore-eos");

  LoadedEngine engine = load_engine(model_dir, config, thread_count_from_flag(args.get_int("threads")));
  request.prompt = engine.tokenizer->encode(prompt);
  if (request.prompt.empty()) fail("--prompt is empty; give some text to continue");

  Stopwatch clock;
  double first_token_seconds = 0;
  const auto stream = engine.client->submit(std::move(request));
  RequestOutput last;
  while (std::optional<RequestOutput> output = stream->next()) {
    if (first_token_seconds == 0.0) first_token_seconds = clock.seconds();
    std::fputs(output->text.c_str(), stdout);
    std::fflush(stdout);
    last = std::move(*output);
  }
  std::fputs("\n", stdout);
  if (last.finish_reason == FinishReason::kError) fail(last.error);
  const double total_seconds = clock.seconds();
  const double decode_seconds = total_seconds - first_token_seconds;
  log_info("prompt: ", last.prompt_tokens, " tokens in ", first_token_seconds, " s; generated ",
           last.completion_tokens, " tokens in ", total_seconds, " s (",
           last.completion_tokens > 1 ? static_cast<double>(last.completion_tokens - 1) / decode_seconds : 0.0,
           " tokens/s after the first); finish reason ", finish_reason_name(*last.finish_reason), "; peak RSS ",
           peak_rss_bytes() / 1e6, " MB",
           last.draft_tokens > 0 ? str_cat("; drafts accepted ", last.accepted_draft_tokens, "/", last.draft_tokens)
                                 : std::string());
  return 0;
}

}  // namespace ernie
