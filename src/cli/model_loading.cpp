#include "cli/model_loading.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <thread>

#include "util/error.h"
#include "util/log.h"
#include "util/process_stats.h"

namespace ernie {

QuantizationPlan quantization_from_flag(const std::string& model_dir, const std::string& value) {
  if (value.empty()) return {};
  const char* head = std::getenv("ERNIE_QUANTIZE_LM_HEAD");
  const std::string head_flag = head != nullptr ? head : "1";
  if (head_flag != "0" && head_flag != "1") fail("ERNIE_QUANTIZE_LM_HEAD must be 0 or 1, got \"", head_flag, "\"");
  return parse_quantization(value, load_model_config(model_dir), head_flag == "1");
}

std::unique_ptr<ErnieModel> load_model_reporting(const std::string& model_dir, ThreadPool& pool,
                                                 const QuantizationPlan& quantization) {
  log_info("loading model from ", model_dir, " (", pool.num_threads(), " threads)");
  const bool interactive = isatty(STDERR_FILENO) != 0;
  auto progress = [interactive](int done, int total) {
    if (!interactive) return;
    std::fprintf(stderr, "\rloading layers %d/%d", done, total);
    if (done == total) std::fprintf(stderr, "\n");
    std::fflush(stderr);
  };
  auto model = ErnieModel::load(model_dir, pool, progress, quantization);
  const ModelConfig& config = model->config();
  const LoadReport& report = model->load_report();
  log_info("loaded ", config.architecture, " (", checkpoint_layout_name(report.layout), " layout, ",
           config.num_hidden_layers, " layers, hidden ", config.hidden_size, ", vocab ", config.vocab_size,
           config.moe ? ", MoE" : "", model->weights().mtp.empty() ? "" : ", with MTP", ") from ", report.num_files,
           " file(s), ", report.tensor_bytes / 1e6, " MB of tensors in ", report.seconds, " s; peak RSS ",
           peak_rss_bytes() / 1e6, " MB");
  if (quantization.quantizes_weights() || quantization.kv_cache != KvStorage::kF32) {
    log_info("quantization: ", quantization.describe(), "; weights now ", report.weight_bytes / 1e6, " MB (quantized in ",
             report.quantize_seconds, " s)");
    if (report.kept_dense > 0)
      log_warning(report.kept_dense, " weight matrices stay bf16: their input width is not a multiple of 32, which the "
               "integer formats need");
  }
  return model;
}

size_t thread_count_from_flag(int64_t requested) {
  if (requested < 0) fail("--threads must be >= 0 (0 = all hardware threads), got ", requested);
  if (requested == 0) return std::max(1u, std::thread::hardware_concurrency());
  return static_cast<size_t>(requested);
}

}  // namespace ernie
