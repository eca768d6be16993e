// The quantized-weights cache (FastDeploy's FD_ENABLE_MODEL_LOAD_CACHE): after a load
// with --quantization has packed the weights, they are written to one safetensors file
// under the cache directory, keyed by the checkpoint's files (names, sizes, modification
// times), its config.json, the quantization plan and this cache's format version. The next
// start with the same key maps that file and copies the packed weights out of it into
// huge-page memory (util/weight_buffer.h): no bf16 page is read and nothing is converted.
// A stale or damaged file is never used; it is rebuilt.
//
// File layout: for each quantized Linear, in the loader's fixed order, "linear.N.data"
// (U8: the packed values as the kernels read them, with the integer formats' fp16 scales
// in their panels) and, for FP8, "linear.N.scales" (F32); the metadata holds the key and,
// per Linear, "format group rows cols".
#pragma once

#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "model/ernie_weights.h"
#include "model/quantization.h"
#include "model/safetensors.h"
#include "model/safetensors_writer.h"
#include "util/thread_pool.h"

namespace ernie {

// FD_ENABLE_MODEL_LOAD_CACHE=1 turns the cache on; the directory is ERNIE_CACHE_DIR, else
// $XDG_CACHE_HOME/ernie.cpp, else ~/.cache/ernie.cpp. Empty when the cache is off.
std::string quantized_cache_dir();

// What identifies the packed weights of these checkpoints under this plan (`model_dirs`:
// the main checkpoint and an MTP head's, when it comes from another one); the file name is
// its hash, the file holds it whole.
std::string quantized_cache_key(const std::vector<std::string>& model_dirs, const QuantizationPlan& plan);
std::string quantized_cache_path(const std::string& cache_dir, const std::string& key);

// Replaces the Linears of `weights` by copies of those in the cache file at `path` when it
// holds exactly them (the same key, shapes and formats), the file read in on `pool`'s
// threads first (with a progress line when `report_progress`). Returns false (nothing
// changed) when the file is absent, stale or damaged.
bool load_quantized_cache(const std::string& path, const std::string& key, ErnieWeights& weights, ThreadPool& pool,
                          bool report_progress);

// The packed-Linear format the cache and `ernie quantize` checkpoints share: per quantized
// Linear N (in linear_weights order) metadata "linear.N" = "format group rows cols" and
// tensors "linear.N.data" (U8) and, for formats with a scales array, "linear.N.scales",
// each on a 64-byte boundary.
// Bumped whenever the packed layout changes: files of another version are not used.
constexpr const char* kPackedLayoutVersion = "ernie.cpp quantized weights v4";
constexpr size_t kPackedAlignment = 64;

struct PackedTensor {
  const TensorInfo* info = nullptr;  // null when absent
  const uint8_t* bytes = nullptr;
};
// Where packed Linears are read from: the file's metadata and its tensors by name.
struct PackedSource {
  const std::map<std::string, std::string>& metadata;
  std::function<PackedTensor(const std::string&)> tensor;
};

// Replaces each Linear of `weights` that `source` describes by a copy of its packed data.
// On any mismatch (shape, format, size, alignment) changes nothing and returns why.
std::optional<std::string> attach_packed_linears(const PackedSource& source, ErnieWeights& weights);
// The quantized Linears of `weights` as tensors to write (their bytes are copied when
// written), with their descriptions added to `metadata`.
std::vector<TensorToWrite> packed_linear_tensors(const ErnieWeights& weights, std::map<std::string, std::string>& metadata);

// Writes the quantized Linears of `weights` to `path` under `key` (through a temporary
// file and a rename, so a reader never sees half a file). Returns false, having logged
// why, when it cannot (a full disk must not stop the server).
bool save_quantized_cache(const std::string& path, const std::string& key, const ErnieWeights& weights);

}  // namespace ernie
