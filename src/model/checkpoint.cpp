#include "model/checkpoint.h"

#include <filesystem>

#include <nlohmann/json.hpp>

#include "util/error.h"
#include "util/page_in.h"
#include "util/text_file.h"

namespace ernie {
namespace {

namespace fs = std::filesystem;

// weight_map: tensor name -> shard file name, validated.
std::map<std::string, std::string> read_index(const std::string& index_path) {
  nlohmann::json index;
  try {
    index = nlohmann::json::parse(read_text_file(index_path));
  } catch (const nlohmann::json::exception& error) {
    fail(index_path, ": invalid JSON (", error.what(), ")");
  }
  if (!index.is_object() || !index.contains("weight_map") || !index.at("weight_map").is_object())
    fail(index_path, ": expected an object with a \"weight_map\" of tensor name -> shard file");
  std::map<std::string, std::string> weight_map;
  for (const auto& [name, file] : index.at("weight_map").items()) {
    if (!file.is_string()) fail(index_path, ": weight_map entry \"", name, "\" must name a shard file");
    const std::string shard = file.get<std::string>();
    // Shards live next to the index; a path that climbs out is refused.
    if (shard.empty() || shard.find('/') != std::string::npos || shard == "." || shard == "..")
      fail(index_path, ": weight_map entry \"", name, "\" names \"", shard, "\", expected a file in the same directory");
    weight_map[name] = shard;
  }
  if (weight_map.empty()) fail(index_path, ": weight_map is empty");
  return weight_map;
}

}  // namespace

std::unique_ptr<Checkpoint> Checkpoint::open(const std::string& model_dir) {
  if (!fs::is_directory(model_dir)) fail("model directory ", model_dir, " does not exist or is not a directory");
  auto checkpoint = std::unique_ptr<Checkpoint>(new Checkpoint());
  const std::string index_path = model_dir + "/model.safetensors.index.json";
  const std::string single_path = model_dir + "/model.safetensors";
  if (fs::exists(index_path)) {
    const auto weight_map = read_index(index_path);
    std::map<std::string, std::set<std::string>> names_by_shard;
    for (const auto& [name, shard] : weight_map) names_by_shard[shard].insert(name);
    for (const auto& [shard, names] : names_by_shard) checkpoint->add_file(model_dir + "/" + shard, &names);
  } else if (fs::exists(single_path)) {
    checkpoint->add_file(single_path, nullptr);
  } else {
    fail("no weights in ", model_dir, ": expected model.safetensors or model.safetensors.index.json");
  }
  return checkpoint;
}

void Checkpoint::add_file(const std::string& path, const std::set<std::string>* expected_names) {
  files_.push_back(std::make_unique<SafetensorsFile>(path));
  const SafetensorsFile& file = *files_.back();
  for (const TensorInfo& info : file.header().tensors) {
    if (expected_names != nullptr && expected_names->count(info.name) == 0)
      fail(path, ": tensor \"", info.name, "\" is not assigned to this shard by model.safetensors.index.json");
    if (tensors_.count(info.name) != 0)
      fail(path, ": tensor \"", info.name, "\" also appears in ", *tensors_.at(info.name).file);
    tensors_[info.name] = TensorView{&info, file.data(info), &file.path()};
  }
  if (expected_names != nullptr) {
    for (const std::string& name : *expected_names) {
      if (tensors_.count(name) == 0)
        fail(path, ": model.safetensors.index.json places tensor \"", name, "\" in this shard but it is not there");
    }
  }
}

TensorView Checkpoint::take(const std::string& name, const std::vector<int64_t>& expected_shape_for_message) {
  const auto found = tensors_.find(name);
  if (found == tensors_.end()) {
    if (expected_shape_for_message.empty()) fail("checkpoint is missing tensor \"", name, "\"");
    fail("checkpoint is missing tensor \"", name, "\" (expected shape ", shape_to_string(expected_shape_for_message),
         ")");
  }
  used_.insert(name);
  return found->second;
}

const TensorView* Checkpoint::take_if_present(const std::string& name) {
  const auto found = tensors_.find(name);
  if (found == tensors_.end()) return nullptr;
  used_.insert(name);
  return &found->second;
}

std::vector<std::string> Checkpoint::names() const {
  std::vector<std::string> result;
  for (const auto& [name, view] : tensors_) result.push_back(name);
  return result;
}

std::vector<std::string> Checkpoint::unused_names() const {
  std::vector<std::string> result;
  for (const auto& [name, view] : tensors_)
    if (used_.count(name) == 0) result.push_back(name);
  return result;
}

uint64_t Checkpoint::total_tensor_bytes() const {
  uint64_t total = 0;
  for (const auto& [name, view] : tensors_) total += view.info->size;
  return total;
}

void Checkpoint::page_in(ThreadPool& pool, ByteProgress& progress) const {
  std::vector<std::span<const uint8_t>> regions;
  for (const auto& [name, view] : tensors_) regions.emplace_back(view.data, view.info->size);
  ernie::page_in(pool, regions, &progress);
}

const std::map<std::string, std::string>& Checkpoint::metadata() const { return files_.front()->header().metadata; }

}  // namespace ernie
