#include "model/safetensors_writer.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <future>

#include <nlohmann/json.hpp>

#include "util/error.h"

namespace ernie {

uint64_t TensorToWrite::byte_size() const {
  uint64_t elements = 1;
  for (int64_t dim : shape) elements *= static_cast<uint64_t>(dim);
  return elements * dtype_size(dtype);
}

namespace {

void check_size(const TensorToWrite& tensor, size_t bytes) {
  if (bytes != tensor.byte_size())
    fail("write_safetensors: tensor \"", tensor.name, "\" has ", bytes, " bytes, its shape needs ", tensor.byte_size());
}

}  // namespace

void write_safetensors(const std::string& path, const std::vector<TensorToWrite>& tensors,
                       const std::map<std::string, std::string>& metadata, size_t alignment) {
  nlohmann::ordered_json header;
  if (!metadata.empty()) header["__metadata__"] = metadata;
  uint64_t offset = 0;
  for (const TensorToWrite& tensor : tensors) {
    if (!tensor.produce) check_size(tensor, tensor.bytes.size());
    header[tensor.name] = {{"dtype", safetensors_dtype_name(tensor.dtype)},
                           {"shape", tensor.shape},
                           {"data_offsets", {offset, offset + tensor.byte_size()}}};
    offset += tensor.byte_size();
  }
  std::string text = header.dump();
  // Pad with spaces so the data area (after the 8-byte length and the header) is aligned.
  alignment = std::max<size_t>(8, alignment);
  text.append((alignment - (8 + text.size()) % alignment) % alignment, ' ');
  std::ofstream file(path, std::ios::binary | std::ios::trunc);
  if (!file) fail("cannot write ", path);
  uint8_t length[8];
  for (int i = 0; i < 8; ++i) length[i] = static_cast<uint8_t>(static_cast<uint64_t>(text.size()) >> (8 * i));
  file.write(reinterpret_cast<const char*>(length), 8);
  file.write(text.data(), static_cast<std::streamsize>(text.size()));
  // Produced tensors are made one ahead on another thread while the current one is
  // written: twice the speed on two cores, at most two tensors in memory.
  const auto make = [&](size_t i) {
    return std::async(std::launch::async, [&tensor = tensors[i]] { return tensor.produce(); });
  };
  std::future<std::vector<uint8_t>> next;
  for (size_t i = 0; i < tensors.size(); ++i) {
    const TensorToWrite& tensor = tensors[i];
    if (!tensor.produce) {
      file.write(reinterpret_cast<const char*>(tensor.bytes.data()), static_cast<std::streamsize>(tensor.bytes.size()));
      continue;
    }
    std::future<std::vector<uint8_t>> current = next.valid() ? std::move(next) : make(i);
    size_t ahead = i + 1;
    while (ahead < tensors.size() && !tensors[ahead].produce) ++ahead;
    if (ahead < tensors.size()) next = make(ahead);
    const std::vector<uint8_t> bytes = current.get();
    check_size(tensor, bytes.size());
    file.write(reinterpret_cast<const char*>(bytes.data()), static_cast<std::streamsize>(bytes.size()));
  }
  if (!file) fail("error while writing ", path);
}

void write_sharded_safetensors(const std::string& dir, const std::vector<TensorToWrite>& tensors,
                               const std::map<std::string, std::string>& metadata, int num_shards) {
  if (num_shards <= 1) {
    write_safetensors(dir + "/model.safetensors", tensors, metadata);
    return;
  }
  uint64_t total = 0;
  for (const TensorToWrite& tensor : tensors) total += tensor.byte_size();
  const uint64_t target = (total + static_cast<uint64_t>(num_shards) - 1) / static_cast<uint64_t>(num_shards);

  std::vector<std::vector<TensorToWrite>> shards(static_cast<size_t>(num_shards));
  uint64_t filled = 0;
  size_t shard = 0;
  for (const TensorToWrite& tensor : tensors) {
    if (filled >= target * (shard + 1) && shard + 1 < shards.size()) ++shard;
    shards[shard].push_back(tensor);
    filled += tensor.byte_size();
  }
  nlohmann::ordered_json index;
  index["metadata"] = {{"total_size", total}};
  nlohmann::ordered_json weight_map = nlohmann::ordered_json::object();
  for (size_t i = 0; i < shards.size(); ++i) {
    char name[64];
    std::snprintf(name, sizeof name, "model-%05zu-of-%05d.safetensors", i + 1, num_shards);
    write_safetensors(dir + "/" + name, shards[i], metadata);
    for (const TensorToWrite& tensor : shards[i]) weight_map[tensor.name] = name;
  }
  index["weight_map"] = weight_map;
  std::ofstream file(dir + "/model.safetensors.index.json", std::ios::trunc);
  if (!file) fail("cannot write ", dir, "/model.safetensors.index.json");
  file << index.dump(2) << "\n";
}

}  // namespace ernie
