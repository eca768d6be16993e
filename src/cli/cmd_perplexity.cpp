// ernie perplexity: how well a model predicts a text file, the figure to compare
// checkpoints and quantizations by (protocol in model/perplexity.h).
#include <cstdio>

#include <nlohmann/json.hpp>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/model_loading.h"
#include "model/perplexity.h"
#include "model/prequantized.h"
#include "text/tokenizer.h"
#include "util/error.h"
#include "util/log.h"
#include "util/stopwatch.h"
#include "util/text_file.h"

namespace ernie {

int perplexity_command(int argc, char** argv) {
  const ArgParser parser(
      "ernie perplexity --model DIR --file TEXT [--context 256] [--protocol windows|second-half] "
      "[--quantization NAME|JSON]",
      "Prints the perplexity of the model on a UTF-8 text file. With --protocol windows the file is tokenized as it "
      "is (no BOS), cut into windows of --context tokens, and every token but a window's first is predicted from the "
      "tokens before it in its window. With --protocol second-half (llama.cpp's llama-perplexity) only whole windows "
      "count and only the second half of each is scored; when the tokenizer adds BOS (add_bos_token), BOS goes first "
      "and each window starts with BOS in place of its first token.",
      {{"model", "DIR", "checkpoint directory (config.json + safetensors + tokenizer)", ""},
       {"file", "TEXT", "the text to score", ""},
       {"context", "N", "tokens per window", "256"},
       {"protocol", "windows|second-half", "which tokens are scored (see above)", "windows"},
       {"threads", "N", "worker threads, 0 = all hardware threads", "0"},
       {"quantization", "NAME|JSON", "quantize the weights at load, as ernie serve does", ""},
       {"kl-divergence", "", "also load the checkpoint unquantized and report the mean KL divergence of the "
        "quantized model's next-token distributions from it, and how often their top tokens agree", ""},
       {"json", "", "print the result as one JSON object", ""}});
  const ParsedArgs args = parser.parse(argc, argv, 2);
  if (args.help_requested()) {
    std::fputs(parser.help_text().c_str(), stdout);
    return 0;
  }
  const std::string path = args.get("file");
  const std::string text = read_text_file(path);

  const std::string model_dir = resolve_model_path(args.get("model"));
  const Tokenizer tokenizer = Tokenizer::load(model_dir);
  // Special-token strings in the text are plain text here, as in any corpus.
  std::vector<int32_t> tokens = tokenizer.encode(text, /*parse_special=*/false);
  PerplexityOptions options{.context = args.get_int("context")};
  const std::string protocol = args.get("protocol");
  if (protocol == "second-half") {
    options.protocol = PerplexityProtocol::kSecondHalf;
    if (tokenizer.adds_bos()) {
      options.bos_id = tokenizer.bos_id();
      tokens.insert(tokens.begin(), options.bos_id);
    }
  } else if (protocol != "windows") {
    fail("--protocol must be windows or second-half, got '", protocol, "'");
  }
  const std::string quantization = args.get_optional("quantization").value_or("");
  ThreadPool pool(thread_count_from_flag(args.get_int("threads")));
  auto model = load_model_reporting(model_dir, pool, quantization_from_flag(model_dir, quantization));
  std::unique_ptr<ErnieModel> reference;
  if (args.flag("kl-divergence")) {
    if (prequantized_quantization(model_dir))
      fail("--kl-divergence needs the original checkpoint: ", model_dir, " was packed by ernie quantize");
    if (quantization.empty()) fail("--kl-divergence compares a --quantization against the unquantized checkpoint");
    reference = load_model_reporting(model_dir, pool, quantization_from_flag(model_dir, ""));
    options.reference = reference.get();
  }

  Stopwatch clock;
  const PerplexityResult result = evaluate_perplexity(*model, tokens, options, [](int64_t done, int64_t total) {
    if (done % 16 == 0 || done == total) log_info("scored ", done, " of ", total, " windows");
  });
  const double seconds = clock.seconds();
  if (args.flag("json")) {
    nlohmann::ordered_json report = {{"file", path},
                                           {"tokens", tokens.size()},
                                           {"context", options.context},
                                           {"protocol", protocol},
                                           {"predicted_tokens", result.predicted_tokens},
                                           {"mean_nll", result.mean_nll},
                                           {"perplexity", result.perplexity},
                                           {"quantization", quantization.empty() ? "none" : quantization},
                                           {"seconds", seconds}};
    if (reference) {
      report["mean_kl_divergence"] = result.mean_kl;
      report["same_top1"] = result.same_top1;
    }
    std::printf("%s\n", report.dump().c_str());
  } else {
    std::printf("perplexity %.4f (mean NLL %.6f) over %lld predicted tokens of %zu, %lld windows of %lld; %.1f s, %.0f tokens/s\n",
                result.perplexity, result.mean_nll, static_cast<long long>(result.predicted_tokens), tokens.size(),
                static_cast<long long>(result.windows), static_cast<long long>(options.context), seconds,
                static_cast<double>(tokens.size()) / seconds);
    if (reference)
      std::printf("mean KL divergence from the unquantized model %.6f nats; same top token %.2f%%\n", result.mean_kl,
                  100.0 * result.same_top1);
  }
  return 0;
}

}  // namespace ernie
