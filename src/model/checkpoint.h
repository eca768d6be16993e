// A checkpoint directory's tensors: one model.safetensors, or shards listed by
// model.safetensors.index.json. Tensors are views into the mapped files (zero-copy).
//
// FastDeploy's pre-sharded releases (W4A8C8-TP4) hold instead rank0/ .. rankN-1/, each a
// complete checkpoint of one tensor-parallel rank with the same tensor names
// (load_weight_utils.py). Those are presented as one checkpoint of the whole model: each
// split tensor is put back together along the axis FastDeploy's tensor-parallel
// mapping splits it (ernie4_5_moe.py weight_infos: fused q|k|v by heads, gate|up pairs,
// row-parallel inputs, the embedding and LM head by vocabulary, the C8 KV scales by
// heads), a replicated one is read from rank0, and the W4A8 expert tensors, whose
// scales belong to one rank's part, stay apart under "rankR/NAME".
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "model/safetensors.h"
#include "util/progress.h"
#include "util/thread_pool.h"

namespace ernie {

struct TensorView {
  const TensorInfo* info = nullptr;
  const uint8_t* data = nullptr;
  const std::string* file = nullptr;  // the shard it lives in, for messages

  const std::string& name() const { return info->name; }
  DType dtype() const { return info->dtype; }
  const std::vector<int64_t>& shape() const { return info->shape; }
};

class Checkpoint {
 public:
  // Opens MODEL_DIR: model.safetensors.index.json if present, else model.safetensors.
  static std::unique_ptr<Checkpoint> open(const std::string& model_dir);

  // 1, or the number of rank directories of a pre-sharded release.
  int rank_parts() const { return ranks_.empty() ? 1 : static_cast<int>(ranks_.size()); }
  // The name of part `rank` of a tensor kept per rank ("rankR/NAME"; NAME when unsharded).
  std::string part_name(int rank, const std::string& name) const;

  bool contains(const std::string& name) const { return tensors_.count(name) != 0; }
  // Throws "missing tensor NAME (expected shape ...)" when absent. Marks it used.
  TensorView take(const std::string& name, const std::vector<int64_t>& expected_shape_for_message = {});
  // Returns the tensor if present and marks it used.
  const TensorView* take_if_present(const std::string& name);

  std::vector<std::string> names() const;
  std::vector<std::string> unused_names() const;
  size_t num_files() const;
  uint64_t total_tensor_bytes() const;
  // Reads every tensor's pages into memory (in parallel on `pool`, counting bytes on
  // `progress`), so the first request does not wait for the disk.
  void page_in(ThreadPool& pool, ByteProgress& progress) const;
  // "__metadata__" of the first file, e.g. {"format": "pt"} or {"format": "np"}.
  const std::map<std::string, std::string>& metadata() const;

 private:
  void add_file(const std::string& path, const std::set<std::string>* expected_names);
  void merge_ranks(const std::string& model_dir);

  // A tensor put back together from the ranks' parts, owned here.
  struct MergedTensor {
    TensorInfo info;
    std::vector<uint8_t> bytes;
    std::string source;
  };

  std::vector<std::unique_ptr<SafetensorsFile>> files_;
  std::map<std::string, TensorView> tensors_;
  std::set<std::string> used_;
  std::vector<std::unique_ptr<Checkpoint>> ranks_;
  std::vector<std::unique_ptr<MergedTensor>> merged_;
};

}  // namespace ernie
