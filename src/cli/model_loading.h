// Loading a model for a command: progress on stderr, then the time it took, the
// layout found and the peak memory.
#pragma once

#include <memory>
#include <string>

#include "model/ernie_model.h"
#include "text/tokenizer.h"

namespace ernie {

std::unique_ptr<ErnieModel> load_model_reporting(const std::string& model_dir, ThreadPool& pool);

// `--threads`: 0 means one per hardware thread.
size_t thread_count_from_flag(int64_t requested);

}  // namespace ernie
