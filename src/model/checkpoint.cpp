#include "model/checkpoint.h"

#include <cstring>
#include <filesystem>
#include <string_view>

#include <nlohmann/json.hpp>

#include "model/config.h"
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

std::string rank_dir(const std::string& model_dir, int rank) { return model_dir + "/rank" + std::to_string(rank); }

bool ends_with(const std::string& name, std::string_view suffix) { return name.ends_with(suffix); }

// How FastDeploy's tensor-parallel mappings split a tensor over the ranks (the decoder's
// in ernie4_5_moe.py, the MTP block's alike in ernie4_5_mtp.py).
enum class Split { kReplicated, kRows, kColumns, kPairColumns, kHeadColumns, kPerRank };

Split split_of(const std::string& name) {
  if (name.find(".mlp.experts.") != std::string::npos &&
      (ends_with(name, ".quant_weight") || ends_with(name, ".weight_scale") || ends_with(name, ".activation_scale")))
    return Split::kPerRank;  // W4A8 experts: each rank's scales cover its part only
  if (ends_with(name, "self_attn.qkv_proj.weight")) return Split::kHeadColumns;
  if (ends_with(name, "up_gate_proj.weight")) return Split::kPairColumns;
  if (ends_with(name, "o_proj.weight") || ends_with(name, "down_proj.weight") || ends_with(name, "embed_tokens.weight") ||
      ends_with(name, "cachek_matmul.activation_scale") || ends_with(name, "cachev_matmul.activation_scale"))
    return Split::kRows;
  if (name == "lm_head.weight" || name.find("mtp_linear_proj.") != std::string::npos) return Split::kColumns;
  return Split::kReplicated;
}

// The parts' bytes side by side along axis 1 of [rows, Σ cols]: each part is `pieces`
// runs of columns (q | k | v, gate | up) and piece p of every part comes before piece
// p + 1 of any. `widths[part][piece]` in columns.
std::vector<uint8_t> join_columns(const std::vector<TensorView>& parts, const std::vector<std::vector<int64_t>>& widths,
                                  int64_t rows, size_t element) {
  int64_t total = 0;
  for (const auto& part : widths)
    for (int64_t w : part) total += w;
  std::vector<uint8_t> out(static_cast<size_t>(rows * total) * element);
  int64_t column = 0;
  for (size_t piece = 0; piece < widths.front().size(); ++piece)
    for (size_t part = 0; part < parts.size(); ++part) {
      const int64_t width = widths[part][piece];
      int64_t offset = 0, part_cols = 0;
      for (size_t q = 0; q < widths[part].size(); ++q) {
        if (q < piece) offset += widths[part][q];
        part_cols += widths[part][q];
      }
      for (int64_t r = 0; r < rows; ++r)
        std::memcpy(out.data() + static_cast<size_t>(r * total + column) * element,
                    parts[part].data + static_cast<size_t>(r * part_cols + offset) * element,
                    static_cast<size_t>(width) * element);
      column += width;
    }
  return out;
}

}  // namespace

std::string Checkpoint::part_name(int rank, const std::string& name) const {
  return ranks_.empty() ? name : "rank" + std::to_string(rank) + "/" + name;
}

void Checkpoint::merge_ranks(const std::string& model_dir) {
  const ModelConfig config = load_model_config(model_dir);
  const int parts = static_cast<int>(ranks_.size());
  if (config.num_attention_heads % parts != 0 || config.num_key_value_heads % parts != 0)
    fail(model_dir, ": ", parts, " rank directories do not divide ", config.num_attention_heads, " heads and ",
         config.num_key_value_heads, " KV heads");
  const int64_t q = config.q_width() / parts, kv = config.kv_width() / parts;
  const Checkpoint& first = *ranks_.front();
  for (const auto& [name, view] : first.tensors_) {
    std::vector<TensorView> views;
    for (int r = 0; r < parts; ++r) {
      const auto found = ranks_[static_cast<size_t>(r)]->tensors_.find(name);
      if (found == ranks_[static_cast<size_t>(r)]->tensors_.end())
        fail(rank_dir(model_dir, r), " lacks tensor \"", name, "\", which rank0 holds");
      if (found->second.dtype() != view.dtype() || found->second.shape().size() != view.shape().size())
        fail(rank_dir(model_dir, r), ": tensor \"", name, "\" has another dtype or rank than in rank0");
      views.push_back(found->second);
    }
    const Split split = split_of(name);
    if (split == Split::kPerRank) {
      for (int r = 0; r < parts; ++r) {
        TensorView part = views[static_cast<size_t>(r)];
        tensors_[part_name(r, name)] = part;
      }
      continue;
    }
    if (split == Split::kReplicated) {
      for (const TensorView& part : views)
        if (part.shape() != view.shape())
          fail(*part.file, ": tensor \"", name, "\" has shape ", shape_to_string(part.shape()), " but ",
               shape_to_string(view.shape()), " in rank0; ernie.cpp knows no tensor-parallel split for it");
      tensors_[name] = view;
      continue;
    }
    auto merged = std::make_unique<MergedTensor>();
    merged->info = *view.info;
    merged->source = model_dir + "/rank*/ (" + std::to_string(parts) + " parts joined)";
    const size_t element = dtype_size(view.dtype());
    if (split == Split::kRows) {
      for (const TensorView& part : views) {
        if (part.shape().size() > 1 && std::vector<int64_t>(part.shape().begin() + 1, part.shape().end()) !=
                                           std::vector<int64_t>(view.shape().begin() + 1, view.shape().end()))
          fail(*part.file, ": tensor \"", name, "\" parts disagree beyond their first axis");
        merged->bytes.insert(merged->bytes.end(), part.data, part.data + part.info->size);
      }
      merged->info.shape[0] = 0;
      for (const TensorView& part : views) merged->info.shape[0] += part.shape()[0];
    } else {
      if (view.shape().size() != 2) fail(*view.file, ": tensor \"", name, "\" is not 2-D");
      const int64_t rows = view.shape()[0];
      std::vector<std::vector<int64_t>> widths;
      for (const TensorView& part : views) {
        const int64_t cols = part.shape()[1];
        if (part.shape()[0] != rows) fail(*part.file, ": tensor \"", name, "\" parts disagree in their first axis");
        if (split == Split::kHeadColumns) {
          if (cols != q + 2 * kv)
            fail(*part.file, ": tensor \"", name, "\" has ", cols, " columns, expected ", q + 2 * kv,
                 " (this rank's query, key and value heads)");
          widths.push_back({q, kv, kv});
        } else if (split == Split::kPairColumns) {
          if (cols % 2 != 0) fail(*part.file, ": tensor \"", name, "\" has an odd number of columns (gate | up)");
          widths.push_back({cols / 2, cols / 2});
        } else {
          widths.push_back({cols});
        }
      }
      merged->bytes = join_columns(views, widths, rows, element);
      merged->info.shape[1] = static_cast<int64_t>(merged->bytes.size() / element) / rows;
    }
    merged->info.size = merged->bytes.size();
    tensors_[name] = TensorView{&merged->info, merged->bytes.data(), &merged->source};
    merged_.push_back(std::move(merged));
  }
  for (int r = 1; r < parts; ++r)
    for (const auto& [name, view] : ranks_[static_cast<size_t>(r)]->tensors_)
      if (first.tensors_.count(name) == 0)
        fail(rank_dir(model_dir, r), " holds tensor \"", name, "\", which rank0 lacks");
}

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
  } else if (fs::is_directory(rank_dir(model_dir, 0))) {
    for (int rank = 0; fs::is_directory(rank_dir(model_dir, rank)); ++rank)
      checkpoint->ranks_.push_back(open(rank_dir(model_dir, rank)));
    checkpoint->merge_ranks(model_dir);
  } else {
    fail("no weights in ", model_dir, ": expected model.safetensors, model.safetensors.index.json or rank0/ .. rankN-1/");
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

size_t Checkpoint::num_files() const {
  size_t count = files_.size();
  for (const auto& rank : ranks_) count += rank->num_files();
  return count;
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

const std::map<std::string, std::string>& Checkpoint::metadata() const {
  return ranks_.empty() ? files_.front()->header().metadata : ranks_.front()->metadata();
}

}  // namespace ernie
