// ernie quantize: packs a checkpoint's weights once, into a checkpoint that ernie serve
// (and every other command) loads with no conversion (format in model/prequantized.h).
#include <cstdio>

#include "cli/args.h"
#include "cli/commands.h"
#include "cli/model_loading.h"
#include "model/prequantized.h"
#include "util/error.h"
#include "util/log.h"
#include "util/stopwatch.h"

namespace ernie {

int quantize_command(int argc, char** argv) {
  const ArgParser parser(
      "ernie quantize --model DIR --quantization NAME|JSON --out DIR",
      "Quantizes the checkpoint in --model as ernie serve --quantization would and writes the result to --out: the "
      "packed weights, every other tensor unchanged, the tokenizer and configuration files, and config.json's "
      "quantization_config, so `ernie serve --model OUT` starts without converting anything.",
      {{"model", "DIR", "checkpoint directory (config.json + safetensors + tokenizer)", ""},
       {"quantization", "NAME|JSON", "wint8, wint4, block_wise_fp8 or FastDeploy's mix_quant JSON", ""},
       {"out", "DIR", "where to write the pre-quantized checkpoint (new or empty)", ""},
       {"threads", "N", "worker threads, 0 = all hardware threads", "0"}});
  const ParsedArgs args = parser.parse(argc, argv, 2);
  if (args.help_requested()) {
    std::fputs(parser.help_text().c_str(), stdout);
    return 0;
  }
  const std::string model_dir = resolve_model_path(args.get("model"));
  const std::string quantization = args.get("quantization");
  const std::string out_dir = args.get("out");
  if (prequantized_quantization(model_dir))
    fail(model_dir, " is already pre-quantized; ernie quantize reads an original (bf16) checkpoint");
  if (const auto release = load_model_config(model_dir).release)
    fail(model_dir, " is FastDeploy's ", release->scheme, " release, which is read as it is stored; ernie quantize "
         "reads an original (bf16) checkpoint");
  const QuantizationPlan plan = quantization_from_flag(model_dir, quantization);
  if (!plan.quantizes_weights())
    fail("--quantization ", quantization, " changes no weights (only the KV cache); there is nothing to pack");
  ThreadPool pool(thread_count_from_flag(args.get_int("threads")));
  auto model = load_model_reporting(model_dir, pool, plan);
  Stopwatch clock;
  const PrequantizedWrite written =
      write_prequantized_checkpoint(model_dir, model->checkpoint(), model->weights(), quantization, out_dir);
  log_info("wrote ", out_dir, ": ", written.packed_linears, " packed Linears and ", written.copied_tensors,
           " other tensors, ", written.bytes / 1e6, " MB in ", clock.seconds(), " s");
  return 0;
}

}  // namespace ernie
