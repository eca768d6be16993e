#include "cli/model_loading.h"

#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <thread>

#include "model/prequantized.h"
#include "util/error.h"
#include "util/log.h"
#include "util/process_stats.h"

namespace ernie {

namespace fs = std::filesystem;

std::string resolve_model_path(const std::string& model) {
  if (fs::is_directory(model)) return model;
  // A hub name: models--{org}--{name}/snapshots/<revision>/ in the Hugging Face cache.
  if (model.find('/') != std::string::npos && model.find("..") == std::string::npos && model.front() != '/' &&
      model.front() != '.') {
    std::vector<std::string> caches;
    if (const char* hub = std::getenv("HF_HUB_CACHE")) caches.push_back(hub);
    if (const char* home = std::getenv("HF_HOME")) caches.push_back(std::string(home) + "/hub");
    if (const char* home = std::getenv("HOME")) caches.push_back(std::string(home) + "/.cache/huggingface/hub");
    std::string folder = "models--" + model;
    for (size_t at = folder.find('/'); at != std::string::npos; at = folder.find('/')) folder.replace(at, 1, "--");
    for (const std::string& cache : caches) {
      const fs::path snapshots = fs::path(cache) / folder / "snapshots";
      if (!fs::is_directory(snapshots)) continue;
      // Prefer the revision refs/main points at, else any snapshot with a config.
      std::ifstream ref(fs::path(cache) / folder / "refs" / "main");
      std::string revision;
      if (ref >> revision && fs::exists(snapshots / revision / "config.json")) return (snapshots / revision).string();
      for (const auto& entry : fs::directory_iterator(snapshots))
        if (fs::exists(entry.path() / "config.json")) return entry.path().string();
    }
    fail("--model ", model, " is neither a directory nor in the local Hugging Face cache (looked for ", folder,
         " under $HF_HUB_CACHE, $HF_HOME/hub and ~/.cache/huggingface/hub); nothing is downloaded");
  }
  fail("--model ", model, " is not a directory");
}

QuantizationPlan quantization_from_flag(const std::string& model_dir, const std::string& flag) {
  // A pre-quantized checkpoint's own quantization_config takes priority over the flag,
  // as FastDeploy's does.
  std::string value = flag;
  const ModelConfig config = load_model_config(model_dir);
  if (const std::optional<FastDeployQuantization>& release = config.release) {
    if (!flag.empty()) log_warning("the checkpoint is FastDeploy's ", release->scheme, " release; --quantization ", flag, " is ignored");
    if (release->scheme == "wint2")
      log_info("FastDeploy WINT2 checkpoint: routed experts past layer ", release->moe_w4_quant_end_layer,
               " are read as stored; dense layers ", release->dense_quant_type);
    else
      log_info("FastDeploy W4A8 checkpoint: routed experts read as stored (int4 weights, static int8 activations); "
               "dense layers ", release->dense_quant_type,
               release->static_kv_int8 ? "; KV cache int8 with the checkpoint's static scales" : "");
    value = release->quantization();
  } else if (const std::optional<std::string> stored = prequantized_quantization(model_dir)) {
    if (!flag.empty() && flag != *stored)
      log_warning("the checkpoint was quantized with ", *stored, " by ernie quantize; --quantization ", flag,
                  " is ignored");
    value = *stored;
  }
  if (value.empty()) return {};
  const char* head = std::getenv("ERNIE_QUANTIZE_LM_HEAD");
  const std::string head_flag = head != nullptr ? head : "1";
  if (head_flag != "0" && head_flag != "1" && head_flag != "int8")
    fail("ERNIE_QUANTIZE_LM_HEAD must be 1 (the head follows --quantization), 0 (bf16) or int8, got \"", head_flag, "\"");
  const HeadRule rule = head_flag == "0" ? HeadRule::kBf16 : head_flag == "int8" ? HeadRule::kInt8 : HeadRule::kFollow;
  QuantizationPlan plan = parse_quantization(value, config, rule);
  if (config.release) plan.experts_as_stored = config.release->scheme == "wint2" ? "WINT2" : "W4A8";
  return plan;
}

std::unique_ptr<ErnieModel> load_model_reporting(const std::string& model_dir, ThreadPool& pool,
                                                 const QuantizationPlan& quantization, const std::string& mtp_dir,
                                                 const ShardPlan& shard, Communicator* communicator) {
  log_info("loading model from ", model_dir, " (", pool.num_threads(), " threads)");
  const bool interactive = isatty(STDERR_FILENO) != 0;
  auto progress = [interactive](int done, int total) {
    if (!interactive) return;
    std::fprintf(stderr, "\rloading layers %d/%d", done, total);
    if (done == total) std::fprintf(stderr, "\n");
    std::fflush(stderr);
  };
  auto model = ErnieModel::load(model_dir, pool, progress, quantization, mtp_dir, /*report_progress=*/true, shard,
                                communicator);
  if (shard.sharded())
    log_info("tensor parallelism: rank ", shard.rank, " of ", shard.size, " holds its shard",
             shard.expert_parallel ? " (whole experts)" : "", "; KV row ", model->kv_row_bytes(), " bytes");
  const ModelConfig& config = model->config();
  const LoadReport& report = model->load_report();
  log_info("loaded ", config.architecture, " (", checkpoint_layout_name(report.layout), " layout, ",
           config.num_hidden_layers, " layers, hidden ", config.hidden_size, ", vocab ", config.vocab_size,
           config.moe ? ", MoE" : "", model->weights().mtp.empty() ? "" : ", with MTP", ") from ", report.num_files,
           " file(s), ", report.tensor_bytes / 1e6, " MB of tensors in ", report.seconds, " s; peak RSS ",
           peak_rss_bytes() / 1e6, " MB");
  if (quantization.quantizes_weights()) {
    if (report.prequantized) {
      // The file's head is whatever ERNIE_QUANTIZE_LM_HEAD asked for when it was packed.
      QuantizationPlan held = quantization;
      const WeightFormat head = model->weights().lm_head.format;
      held.head = head == WeightFormat::kBf16Packed ? WeightFormat::kDense : head;
      log_info("quantization: ", held.describe(), "; weights ", report.weight_bytes / 1e6, " MB, packed by ernie quantize");
    }
    else
      log_info("quantization: ", quantization.describe(), "; weights now ", report.weight_bytes / 1e6,
               " MB (quantized in ", report.quantize_seconds, " s)");
    if (report.kept_dense > 0)
      log_warning(report.kept_dense, " weight matrices stay bf16: their input width is not a multiple of 32, which the "
               "integer formats need");
  }
  else if (quantization.kv_cache != KvStorage::kF32) log_info("KV cache in ", kv_storage_name(quantization.kv_cache));
  return model;
}

size_t thread_count_from_flag(int64_t requested) {
  if (requested < 0) fail("--threads must be >= 0 (0 = all hardware threads), got ", requested);
  if (requested == 0) return std::max(1u, std::thread::hardware_concurrency());
  return static_cast<size_t>(requested);
}

}  // namespace ernie
