#include "cli/model_loading.h"

#include <unistd.h>

#include <cstdio>
#include <thread>

#include "util/error.h"
#include "util/log.h"
#include "util/process_stats.h"

namespace ernie {

std::unique_ptr<ErnieModel> load_model_reporting(const std::string& model_dir, ThreadPool& pool) {
  log_info("loading model from ", model_dir, " (", pool.num_threads(), " threads)");
  const bool interactive = isatty(STDERR_FILENO) != 0;
  auto progress = [interactive](int done, int total) {
    if (!interactive) return;
    std::fprintf(stderr, "\rloading layers %d/%d", done, total);
    if (done == total) std::fprintf(stderr, "\n");
    std::fflush(stderr);
  };
  auto model = ErnieModel::load(model_dir, pool, progress);
  const ModelConfig& config = model->config();
  const LoadReport& report = model->load_report();
  log_info("loaded ", config.architecture, " (", checkpoint_layout_name(report.layout), " layout, ",
           config.num_hidden_layers, " layers, hidden ", config.hidden_size, ", vocab ", config.vocab_size,
           config.moe ? ", MoE" : "", model->weights().mtp.empty() ? "" : ", with MTP", ") from ", report.num_files,
           " file(s), ", report.tensor_bytes / 1e6, " MB of tensors in ", report.seconds, " s; peak RSS ",
           peak_rss_bytes() / 1e6, " MB");
  return model;
}

size_t thread_count_from_flag(int64_t requested) {
  if (requested < 0) fail("--threads must be >= 0 (0 = all hardware threads), got ", requested);
  if (requested == 0) return std::max(1u, std::thread::hardware_concurrency());
  return static_cast<size_t>(requested);
}

}  // namespace ernie
