// Prometheus metrics with FastDeploy's names and buckets (fastdeploy-behaviour.md §11),
// for the ones that apply on a CPU. The series of FastDeploy's second cache tier (CPU
// swap, SSD) are exported as zero: this server has no such tier yet. Request figures are recorded here; engine figures (running,
// waiting, blocks, prefix cache) are read from EngineStats when /metrics is scraped.
#pragma once

#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "engine/engine.h"

namespace ernie {

class Histogram {
 public:
  explicit Histogram(std::vector<double> bounds);
  void observe(double value);
  // Prometheus text lines for `name` (buckets, _sum, _count).
  void render(const std::string& name, const std::string& help, std::string& out) const;

 private:
  std::vector<double> bounds_;
  std::vector<uint64_t> counts_;  // per bucket, not cumulative
  double sum_ = 0;
  uint64_t count_ = 0;
};

struct FinishedRequestFigures {
  bool success = true;
  double ttft_seconds = 0;  // 0 when no token was produced
  double e2e_seconds = 0;
  double queue_seconds = 0;
  double inference_seconds = 0;  // from submission to the engine to the last output
  double prefill_seconds = 0;    // from submission to the first token
  double decode_seconds = 0;     // from the first token to the last output
  int64_t prompt_tokens = 0;
  int64_t generation_tokens = 0;
  int max_tokens = 0;
};

class ServingMetrics {
 public:
  // `cache_labels`: the labels of fastdeploy:cache_config_info, `key="value",...`.
  explicit ServingMetrics(std::string cache_labels = "");
  void request_received();
  void request_finished(const FinishedRequestFigures& figures);
  std::string render(const EngineStats& engine, uint64_t kv_resident_bytes, int max_num_seqs) const;

 private:
  mutable std::mutex mutex_;
  uint64_t requests_ = 0;
  uint64_t successes_ = 0;
  uint64_t prompt_tokens_ = 0;
  uint64_t generation_tokens_ = 0;
  double last_ttft_ = 0;       // fastdeploy:first_token_latency
  double last_inference_ = 0;  // fastdeploy:infer_latency
  std::string cache_labels_;
  Histogram ttft_, tpot_, e2e_, queue_, inference_, prefill_, decode_, prompt_lengths_, generation_lengths_, max_tokens_;
};

}  // namespace ernie
