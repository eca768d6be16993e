// ernie perplexity: how well a model predicts a text file, the figure to compare
// checkpoints and quantizations by (protocol in model/perplexity.h).
#include <cstdio>

#include <nlohmann/json.hpp>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/model_loading.h"
#include "model/perplexity.h"
#include "text/tokenizer.h"
#include "util/error.h"
#include "util/log.h"
#include "util/stopwatch.h"
#include "util/text_file.h"

namespace ernie {

int perplexity_command(int argc, char** argv) {
  const ArgParser parser(
      "ernie perplexity --model DIR --file TEXT [--context 256] [--quantization NAME|JSON]",
      "Prints the perplexity of the model on a UTF-8 text file: the file is tokenized as it is (no BOS), cut into "
      "windows of --context tokens, and every token but a window's first is predicted from the tokens before it in "
      "its window.",
      {{"model", "DIR", "checkpoint directory (config.json + safetensors + tokenizer)", ""},
       {"file", "TEXT", "the text to score", ""},
       {"context", "N", "tokens per window", "256"},
       {"threads", "N", "worker threads, 0 = all hardware threads", "0"},
       {"quantization", "NAME|JSON", "quantize the weights at load, as ernie serve does", ""},
       {"json", "", "print the result as one JSON object", ""}});
  const ParsedArgs args = parser.parse(argc, argv, 2);
  if (args.help_requested()) {
    std::fputs(parser.help_text().c_str(), stdout);
    return 0;
  }
  const std::string path = args.get("file");
  const std::string text = read_text_file(path);
  const int64_t context = args.get_int("context");

  const std::string model_dir = resolve_model_path(args.get("model"));
  const Tokenizer tokenizer = Tokenizer::load(model_dir);
  // Special-token strings in the text are plain text here, as in any corpus.
  const std::vector<int32_t> tokens = tokenizer.encode(text, /*parse_special=*/false);
  const std::string quantization = args.get_optional("quantization").value_or("");
  ThreadPool pool(thread_count_from_flag(args.get_int("threads")));
  auto model = load_model_reporting(model_dir, pool, quantization_from_flag(model_dir, quantization));

  Stopwatch clock;
  const PerplexityResult result = evaluate_perplexity(*model, tokens, context, [](int64_t done, int64_t total) {
    if (done % 16 == 0 || done == total) log_info("scored ", done, " of ", total, " windows");
  });
  const double seconds = clock.seconds();
  if (args.flag("json")) {
    const nlohmann::ordered_json report = {{"file", path},
                                           {"tokens", tokens.size()},
                                           {"context", context},
                                           {"predicted_tokens", result.predicted_tokens},
                                           {"mean_nll", result.mean_nll},
                                           {"perplexity", result.perplexity},
                                           {"quantization", quantization.empty() ? "none" : quantization},
                                           {"seconds", seconds}};
    std::printf("%s\n", report.dump().c_str());
  } else {
    std::printf("perplexity %.4f (mean NLL %.6f) over %lld predicted tokens of %zu, %lld windows of %lld; %.1f s, %.0f tokens/s\n",
                result.perplexity, result.mean_nll, static_cast<long long>(result.predicted_tokens), tokens.size(),
                static_cast<long long>(result.windows), static_cast<long long>(context), seconds,
                static_cast<double>(tokens.size()) / seconds);
  }
  return 0;
}

}  // namespace ernie
