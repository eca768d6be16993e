#include "model/quantized_cache.h"

#include <sys/stat.h>

#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <sstream>

#include "kernels/quantize.h"
#include "model/safetensors_writer.h"
#include "util/error.h"
#include "util/hash.h"
#include "util/log.h"
#include "util/page_in.h"
#include "util/progress.h"
#include "util/text_file.h"

namespace ernie {
namespace {

namespace fs = std::filesystem;

// Every array starts on a cache line, as the kernels' own copies do: a packed line read
// across two lines costs decode a third of its speed.
constexpr uint64_t kAlign = kPackedAlignment;

uint64_t aligned(uint64_t bytes) { return (bytes + kAlign - 1) / kAlign * kAlign; }

// `view` (packed bytes in a file mapping) copied into a weight buffer of its own, the
// mapping's pages handed back as they are copied. A file's page cache comes in 4 KiB
// pages, and the decode kernels streamed those 4-12% slower than the same weights in
// huge pages (util/weight_buffer.h), for every token the server will ever make (an
// `ernie quantize` 0.3B at wint4: tg128 7% faster, 10 alternating pairs); the copy costs
// the load one memcpy of the packed weights.
WeightMatrix owned_copy(const WeightMatrix& view) {
  WeightMatrix copy = copy_quantized_weight(view);
  release_mapped_range(view.data, packed_value_bytes(view));
  if (view.scales != nullptr) release_mapped_range(view.scales, packed_scale_bytes(view));
  return copy;
}

constexpr const char* kKeyField = "ernie.quantized_cache_key";

// What identifies a checkpoint directory's contents without reading its weights.
std::string describe_checkpoint(const std::string& dir) {
  std::ostringstream out;
  out << read_text_file(dir + "/config.json");
  std::vector<fs::path> files;
  for (const auto& entry : fs::directory_iterator(dir))
    if (entry.path().extension() == ".safetensors" || entry.path().filename() == "model.safetensors.index.json")
      files.push_back(entry.path());
  std::sort(files.begin(), files.end());
  for (const fs::path& file : files) {
    struct stat info {};
    if (stat(file.c_str(), &info) != 0) fail("cannot stat ", file.string());
    out << '\n' << file.filename().string() << ' ' << info.st_size << ' ' << info.st_mtim.tv_sec << '.'
        << info.st_mtim.tv_nsec;
  }
  return out.str();
}

std::string plan_text(const QuantizationPlan& plan) {
  return str_cat(weight_format_name(plan.dense), "/", weight_format_name(plan.experts), "/", weight_format_name(plan.head));
}

// The one format with a scales array of its own, FP8, keeps float scales; the integer
// formats keep theirs inside their panels (kernels/quantize.h).
constexpr DType kScaleDtype = DType::kF32;

std::string describe_linear(const WeightMatrix& m) {
  return str_cat(weight_format_name(m.format), " ", m.group, " ", m.rows, " ", m.cols);
}

}  // namespace

std::string quantized_cache_dir() {
  const char* enabled = std::getenv("FD_ENABLE_MODEL_LOAD_CACHE");
  if (enabled == nullptr || std::string_view(enabled) != "1") return "";
  if (const char* dir = std::getenv("ERNIE_CACHE_DIR"); dir != nullptr && *dir != '\0') return dir;
  if (const char* xdg = std::getenv("XDG_CACHE_HOME"); xdg != nullptr && *xdg != '\0') return std::string(xdg) + "/ernie.cpp";
  if (const char* home = std::getenv("HOME"); home != nullptr && *home != '\0') return std::string(home) + "/.cache/ernie.cpp";
  return "";
}

std::string quantized_cache_key(const std::vector<std::string>& model_dirs, const QuantizationPlan& plan) {
  std::string key = std::string(kPackedLayoutVersion) + '\n' + plan_text(plan);
  for (const std::string& dir : model_dirs) key += '\n' + describe_checkpoint(dir);
  return key;
}

std::string quantized_cache_path(const std::string& cache_dir, const std::string& key) {
  char name[64];
  std::snprintf(name, sizeof name, "quantized-%016llx.safetensors",
                static_cast<unsigned long long>(fnv1a(key)));
  return cache_dir + "/" + name;
}

bool load_quantized_cache(const std::string& path, const std::string& key, ErnieWeights& weights, ThreadPool& pool,
                          bool report_progress) {
  if (!fs::exists(path)) return false;
  std::unique_ptr<SafetensorsFile> file;
  try {
    file = std::make_unique<SafetensorsFile>(path);
  } catch (const Error& error) {
    log_warning("the quantized-weights cache ", path, " is damaged (", error.what(), "); it is rebuilt");
    return false;
  }
  const auto& metadata = file->header().metadata;
  const auto stored_key = metadata.find(kKeyField);
  const auto stale = [&](const std::string& why) {
    log_warning("the quantized-weights cache ", path, " does not match (", why, "); it is rebuilt");
    return false;
  };
  // The key is checked in full (the file name is only its hash), then every Linear.
  if (stored_key == metadata.end() || stored_key->second != key) return stale("another checkpoint or plan");
  const std::vector<TensorInfo>& all = file->header().tensors;
  if (report_progress && !all.empty()) {
    // Read in on every thread first, with progress: the copies then come from memory.
    const std::span<const uint8_t> whole(file->data(all.front()), all.back().offset + all.back().size - all.front().offset);
    ByteProgress progress("reading cached weights", whole.size());
    page_in(pool, std::span<const std::span<const uint8_t>>(&whole, 1), &progress);
  }
  std::map<std::string, const TensorInfo*> tensors;
  for (const TensorInfo& tensor : all) tensors[tensor.name] = &tensor;
  const PackedSource source{metadata, [&](const std::string& name) -> PackedTensor {
                              const auto found = tensors.find(name);
                              if (found == tensors.end()) return {};
                              return {found->second, file->data(*found->second)};
                            }};
  if (const std::optional<std::string> why = attach_packed_linears(source, weights)) return stale(*why);
  return true;  // the weights own copies: the file is unmapped here
}

std::optional<std::string> attach_packed_linears(const PackedSource& source, ErnieWeights& weights) {
  // The source must hold exactly what these weights need, or nothing changes.
  std::vector<std::pair<WeightMatrix*, WeightMatrix>> replacements;
  const std::vector<WeightMatrix*> linears = linear_weights(weights);
  for (size_t i = 0; i < linears.size(); ++i) {
    const std::string name = "linear." + std::to_string(i);
    const auto entry = source.metadata.find(name);
    if (entry == source.metadata.end()) continue;  // kept dense, or read as stored
    std::istringstream fields(entry->second);
    std::string format_name;
    WeightMatrix packed;
    fields >> format_name >> packed.group >> packed.rows >> packed.cols;
    const std::optional<WeightFormat> format = parse_weight_format(format_name);
    if (!fields || !format || *format == WeightFormat::kDense) return name + " is malformed";
    packed.format = *format;
    if (packed.rows != linears[i]->rows || packed.cols != linears[i]->cols) return name + " has another shape";
    // The integer formats keep their scales in their data: no scales tensor.
    const bool has_scales = packed_scale_bytes(packed) > 0;
    const PackedTensor data = source.tensor(name + ".data"), scales = source.tensor(name + ".scales");
    if (data.info == nullptr || (has_scales && scales.info == nullptr)) return name + " lacks its data or scales";
    if (!has_scales && scales.info != nullptr) return name + " has scales its format keeps in its data";
    if (data.info->dtype != DType::kU8 || data.info->size != aligned(packed_value_bytes(packed)) ||
        (has_scales && (scales.info->dtype != kScaleDtype || scales.info->size != aligned(packed_scale_bytes(packed)))))
      return name + " has the wrong size";
    packed.data = data.bytes;
    packed.scales = has_scales ? scales.bytes : nullptr;
    packed.source_tensor = linears[i]->source_tensor;
    if (reinterpret_cast<uintptr_t>(packed.data) % kAlign != 0 || reinterpret_cast<uintptr_t>(packed.scales) % kAlign != 0)
      return name + " is not aligned to cache lines";
    replacements.emplace_back(linears[i], packed);
  }
  if (replacements.empty()) return std::string("it holds no weights");
  for (auto& [target, packed] : replacements) *target = owned_copy(packed);
  return std::nullopt;
}

std::vector<TensorToWrite> packed_linear_tensors(const ErnieWeights& weights, std::map<std::string, std::string>& metadata) {
  std::vector<TensorToWrite> tensors;
  const std::vector<const WeightMatrix*> linears = linear_weights(weights);
  // Each array padded with zeros to a whole number of cache lines.
  const auto add = [&](const std::string& name, DType dtype, const void* data, uint64_t bytes) {
    const uint64_t padded = aligned(bytes);
    TensorToWrite tensor{name, dtype, {static_cast<int64_t>(padded / dtype_size(dtype))}, {}};
    tensor.produce = [data, bytes, padded] {
      std::vector<uint8_t> out(padded, 0);
      std::memcpy(out.data(), data, bytes);
      return out;
    };
    tensors.push_back(std::move(tensor));
  };
  // Scales, then the packed values: each array's own read stays one stream.
  for (const bool scales : {true, false})
    for (size_t i = 0; i < linears.size(); ++i) {
      const WeightMatrix& m = *linears[i];
      if (m.dense() || read_as_stored(m)) continue;
      const std::string name = "linear." + std::to_string(i);
      metadata[name] = describe_linear(m);
      if (!scales) add(name + ".data", DType::kU8, m.data, packed_value_bytes(m));
      else if (packed_scale_bytes(m) > 0) add(name + ".scales", kScaleDtype, m.scales, packed_scale_bytes(m));
    }
  return tensors;
}

bool save_quantized_cache(const std::string& path, const std::string& key, const ErnieWeights& weights) {
  std::map<std::string, std::string> metadata;
  const std::vector<TensorToWrite> tensors = packed_linear_tensors(weights, metadata);
  if (tensors.empty()) return false;
  const std::string temporary = path + ".partial";
  try {
    fs::create_directories(fs::path(path).parent_path());
    metadata[kKeyField] = key;
    write_safetensors(temporary, tensors, metadata, kPackedAlignment);
    fs::rename(temporary, path);
  } catch (const std::exception& error) {
    std::error_code ignored;
    fs::remove(temporary, ignored);
    log_warning("the quantized-weights cache could not be written to ", path, " (", error.what(),
                "); the next start quantizes again");
    return false;
  }
  return true;
}

}  // namespace ernie
