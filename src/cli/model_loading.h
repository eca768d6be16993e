// Loading a model for a command: progress on stderr, then the time it took, the
// layout found and the peak memory.
#pragma once

#include <memory>
#include <string>

#include "model/ernie_model.h"
#include "text/tokenizer.h"

namespace ernie {

// Finds a model: a directory as given, or a hub name ("baidu/ERNIE-4.5-0.3B-PT") in the
// local Hugging Face cache ($HF_HUB_CACHE, $HF_HOME/hub, ~/.cache/huggingface/hub).
// Every command that takes --model resolves it here; nothing is downloaded.
std::string resolve_model_path(const std::string& model);

// `mtp_dir`: where the MTP head comes from, when not the main checkpoint (empty).
// `shard`, `communicator`: tensor parallelism (ErnieModel::load).
std::unique_ptr<ErnieModel> load_model_reporting(const std::string& model_dir, ThreadPool& pool,
                                                 const QuantizationPlan& quantization = {}, const std::string& mtp_dir = "",
                                                 const ShardPlan& shard = {}, Communicator* communicator = nullptr);

// The plan for `--quantization VALUE` on the model in `model_dir` (reads its config.json
// and ERNIE_QUANTIZE_LM_HEAD); empty VALUE: unquantized.
QuantizationPlan quantization_from_flag(const std::string& model_dir, const std::string& value);

// `--threads`: 0 means one per hardware thread.
size_t thread_count_from_flag(int64_t requested);

}  // namespace ernie
