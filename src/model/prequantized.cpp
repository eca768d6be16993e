#include "model/prequantized.h"

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <set>

#include "model/quantization.h"
#include "model/quantized_cache.h"
#include "model/safetensors_writer.h"
#include "util/error.h"
#include "util/text_file.h"

namespace ernie {
namespace {

namespace fs = std::filesystem;
using nlohmann::ordered_json;

constexpr const char* kLayoutField = "ernie.packed_layout";

// The checkpoint tensors whose every Linear was quantized: the packed copy replaces them.
std::set<std::string> replaced_tensors(const ErnieWeights& weights) {
  std::set<std::string> quantized, kept;
  for (const WeightMatrix* linear : linear_weights(weights)) {
    if (linear->source_tensor == nullptr) continue;
    (linear->dense() ? kept : quantized).insert(*linear->source_tensor);
  }
  std::set<std::string> replaced;
  for (const std::string& name : quantized)
    if (!kept.count(name)) replaced.insert(name);
  return replaced;
}

void write_config(const std::string& source_dir, const std::string& quantization, const std::string& out_dir) {
  ordered_json config = ordered_json::parse(read_text_file(source_dir + "/config.json"));
  ordered_json value = quantization;
  // FastDeploy's mix_quant form stays an object, as a quantization_config would hold it.
  if (!quantization.empty() && quantization.front() == '{') value = ordered_json::parse(quantization);
  config["quantization_config"] = {{"quantization", value}, {"ernie_packed_layout", kPackedLayoutVersion}};
  std::ofstream out(out_dir + "/config.json");
  out << config.dump(2) << '\n';
  if (!out) fail("cannot write ", out_dir, "/config.json");
}

}  // namespace

WeightMatrix prequantized_placeholder(int64_t rows, int64_t cols) {
  WeightMatrix placeholder;
  placeholder.rows = rows;
  placeholder.cols = cols;
  return placeholder;
}

bool is_prequantized(const Checkpoint& checkpoint) { return checkpoint.metadata().count(kLayoutField) != 0; }

void attach_prequantized_linears(Checkpoint& checkpoint, ErnieWeights& weights) {
  const std::map<std::string, std::string>& metadata = checkpoint.metadata();
  const std::string& version = metadata.at(kLayoutField);
  if (version != kPackedLayoutVersion)
    fail("this pre-quantized checkpoint uses the packed layout \"", version, "\" and this build reads \"",
         kPackedLayoutVersion, "\": run ernie quantize again from the original checkpoint");
  const PackedSource source{metadata, [&](const std::string& name) -> PackedTensor {
                              const TensorView* tensor = checkpoint.take_if_present(name);
                              if (tensor == nullptr) return {};
                              return {tensor->info, tensor->data};
                            }};
  if (const std::optional<std::string> why = attach_packed_linears(source, weights))
    fail("the pre-quantized checkpoint's packed weights do not fit its config.json: ", *why);
  for (const WeightMatrix* linear : linear_weights(weights))
    if (linear->empty())
      fail("the pre-quantized checkpoint has neither a tensor nor packed data for a ", linear->rows, "x",
           linear->cols, " Linear");
}

std::optional<std::string> prequantized_quantization(const std::string& model_dir) {
  // A config.json that does not parse is load_model_config's to report, with its path.
  const ordered_json config = ordered_json::parse(read_text_file(model_dir + "/config.json"), nullptr, false);
  if (!config.is_object()) return std::nullopt;
  const auto found = config.find("quantization_config");
  if (found == config.end() || !found->is_object() || !found->contains("ernie_packed_layout")) return std::nullopt;
  const auto value = found->find("quantization");
  if (value == found->end()) fail(model_dir, "/config.json: quantization_config names no \"quantization\"");
  return value->is_string() ? value->get<std::string>() : value->dump();
}

PrequantizedWrite write_prequantized_checkpoint(const std::string& source_dir, Checkpoint& source,
                                                const ErnieWeights& weights, const std::string& quantization,
                                                const std::string& out_dir) {
  if (fs::exists(out_dir + "/config.json") || fs::exists(out_dir + "/model.safetensors"))
    fail(out_dir, " already holds a checkpoint; give --out a new or empty directory");
  fs::create_directories(out_dir);
  PrequantizedWrite report;
  std::map<std::string, std::string> metadata = {{kLayoutField, kPackedLayoutVersion}};
  std::vector<TensorToWrite> tensors = packed_linear_tensors(weights, metadata);
  report.packed_linears = static_cast<size_t>(std::count_if(tensors.begin(), tensors.end(), [](const TensorToWrite& t) {
    return t.name.ends_with(".data");  // each packed Linear has one; only FP8 has scales
  }));
  const std::set<std::string> replaced = replaced_tensors(weights);
  for (const std::string& name : source.names()) {
    if (replaced.count(name)) continue;
    const TensorView* view = source.take_if_present(name);
    TensorToWrite tensor{name, view->dtype(), view->shape(), {}};
    const uint8_t* bytes = view->data;
    const uint64_t size = view->info->size;
    tensor.produce = [bytes, size] { return std::vector<uint8_t>(bytes, bytes + size); };
    tensors.push_back(std::move(tensor));
    ++report.copied_tensors;
  }
  write_safetensors(out_dir + "/model.safetensors", tensors, metadata, kPackedAlignment);
  report.bytes = fs::file_size(out_dir + "/model.safetensors");
  // Everything else of the checkpoint (tokenizer, generation config, templates) as it is.
  for (const auto& entry : fs::directory_iterator(source_dir)) {
    const std::string name = entry.path().filename().string();
    if (!entry.is_regular_file() || entry.path().extension() == ".safetensors" ||
        name == "model.safetensors.index.json" || name == "config.json")
      continue;
    fs::copy_file(entry.path(), out_dir + "/" + name, fs::copy_options::overwrite_existing);
  }
  write_config(source_dir, quantization, out_dir);
  return report;
}

}  // namespace ernie
