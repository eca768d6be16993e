// The quantized-weights cache (FD_ENABLE_MODEL_LOAD_CACHE): a second load takes the
// packed weights the first one wrote and computes bit-identical logits; a changed
// checkpoint, another plan or a damaged file is never used, and is rebuilt.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <optional>

#include "model/ernie_model.h"
#include "model/quantized_cache.h"
#include "model/synthetic_checkpoint.h"
#include "support/test_support.h"

namespace ernie {
namespace {

namespace fs = std::filesystem;

class QuantizedCacheTest : public ::testing::Test {
 protected:
  void SetUp() override {
    model_dir_ = testing::make_checkpoint(temp_, "model", synthetic_preset("tiny-moe"), CheckpointLayout::kTorch, 1);
    cache_dir_ = temp_.file("cache");
    setenv("FD_ENABLE_MODEL_LOAD_CACHE", "1", 1);
    setenv("ERNIE_CACHE_DIR", cache_dir_.c_str(), 1);
  }
  void TearDown() override {
    unsetenv("FD_ENABLE_MODEL_LOAD_CACHE");
    unsetenv("ERNIE_CACHE_DIR");
  }

  // Logits of a fixed prompt, and whether the packed weights came from the cache.
  std::pair<std::vector<float>, bool> run(const std::string& quantization) {
    auto model = ErnieModel::load(model_dir_, pool_, nullptr, parse_quantization(quantization, load_model_config(model_dir_)));
    auto cache = model->new_kv_cache();
    const std::vector<int32_t> ids = {1, 17, 300, 45, 9, 1200, 3, 77};
    return {model->forward(single_sequence_batch(*cache, ids, 0, true)), model->load_report().from_cache};
  }

  size_t cache_files() const {
    if (!fs::exists(cache_dir_)) return 0;
    return static_cast<size_t>(std::distance(fs::directory_iterator(cache_dir_), fs::directory_iterator()));
  }

  testing::TempDir temp_;
  ThreadPool pool_{2};
  std::string model_dir_, cache_dir_;
};

TEST_F(QuantizedCacheTest, TheSecondLoadMapsThePackedWeightsAndComputesTheSame) {
  for (const char* plan : {"wint4", "wint8", "block_wise_fp8"}) {
    SCOPED_TRACE(plan);
    const auto [first, first_cached] = run(plan);
    EXPECT_FALSE(first_cached);
    const auto [second, second_cached] = run(plan);
    EXPECT_TRUE(second_cached);
    EXPECT_EQ(first, second) << "the packed weights must be the very same bytes";
  }
  EXPECT_EQ(cache_files(), 3u) << "one file per plan";
}

// The cached weights are copied out of the file (into huge-page memory), not read from
// its mapping: once loaded, the model computes the same with the file cut to nothing,
// where a read through the mapping would fault.
TEST_F(QuantizedCacheTest, ALoadedModelNoLongerReadsTheFile) {
  const auto [reference, unused] = run("wint4");
  ASSERT_EQ(cache_files(), 1u);
  const fs::path file = fs::directory_iterator(cache_dir_)->path();
  auto model = ErnieModel::load(model_dir_, pool_, nullptr, parse_quantization("wint4", load_model_config(model_dir_)));
  ASSERT_TRUE(model->load_report().from_cache);
  fs::resize_file(file, 0);
  auto cache = model->new_kv_cache();
  const std::vector<int32_t> ids = {1, 17, 300, 45, 9, 1200, 3, 77};
  EXPECT_EQ(model->forward(single_sequence_batch(*cache, ids, 0, true)), reference);
}

TEST_F(QuantizedCacheTest, AChangedCheckpointOrADamagedFileIsRebuiltNeverUsed) {
  const auto [reference, unused] = run("wint4");
  ASSERT_EQ(cache_files(), 1u);
  const fs::path file = fs::directory_iterator(cache_dir_)->path();
  // Damaged: cut in half. The load quantizes again (same logits) and rewrites it.
  fs::resize_file(file, fs::file_size(file) / 2);
  const auto [after_damage, cached_damaged] = run("wint4");
  EXPECT_FALSE(cached_damaged);
  EXPECT_EQ(after_damage, reference);
  EXPECT_TRUE(run("wint4").second) << "rewritten after the damage";
  // The checkpoint changes (a newer file): another key, so another file, built afresh.
  fs::last_write_time(model_dir_ + "/model.safetensors", fs::last_write_time(model_dir_ + "/model.safetensors") + std::chrono::hours(1));
  EXPECT_FALSE(run("wint4").second);
  EXPECT_EQ(cache_files(), 2u);
}

// The integer formats keep their scales inside their panels, so their Linears are written
// as one data tensor each; a file that brings a scales tensor for one (another layout's)
// or lacks its data is refused, naming the Linear.
TEST_F(QuantizedCacheTest, AnIntegerLinearIsOneDataTensor) {
  auto model = ErnieModel::load(model_dir_, pool_, nullptr, parse_quantization("wint4", load_model_config(model_dir_)));
  std::map<std::string, std::string> metadata;
  std::map<std::string, std::pair<TensorInfo, std::vector<uint8_t>>> stored;
  for (const TensorToWrite& tensor : packed_linear_tensors(model->weights(), metadata)) {
    std::vector<uint8_t> bytes = tensor.produce ? tensor.produce() : tensor.bytes;
    TensorInfo info{tensor.name, tensor.dtype, tensor.shape, 0, bytes.size()};
    stored.emplace(tensor.name, std::make_pair(info, std::move(bytes)));
  }
  ASSERT_FALSE(stored.empty());
  for (const auto& [name, unused] : stored) EXPECT_TRUE(name.ends_with(".data")) << name;
  const PackedSource source{metadata, [&](const std::string& name) {
                              const auto it = stored.find(name);
                              return it == stored.end() ? PackedTensor{} : PackedTensor{&it->second.first, it->second.second.data()};
                            }};
  // The first packed Linear in the loader's order, so its check is the first to run.
  int first = -1;
  for (const auto& [name, unused] : metadata)
    if (name.starts_with("linear.")) first = first < 0 ? std::stoi(name.substr(7)) : std::min(first, std::stoi(name.substr(7)));
  ASSERT_GE(first, 0);
  const std::string linear = "linear." + std::to_string(first);
  ErnieWeights weights = model->weights();
  stored.emplace(linear + ".scales", stored.at(linear + ".data"));
  std::optional<std::string> refused = attach_packed_linears(source, weights);
  ASSERT_TRUE(refused.has_value());
  EXPECT_EQ(*refused, linear + " has scales its format keeps in its data");
  stored.erase(linear + ".scales");
  stored.erase(linear + ".data");
  refused = attach_packed_linears(source, weights);
  ASSERT_TRUE(refused.has_value());
  EXPECT_EQ(*refused, linear + " lacks its data or scales");
}

TEST_F(QuantizedCacheTest, OffUnlessAsked) {
  unsetenv("FD_ENABLE_MODEL_LOAD_CACHE");
  EXPECT_EQ(quantized_cache_dir(), "");
  run("wint4");
  EXPECT_EQ(cache_files(), 0u);
}

}  // namespace
}  // namespace ernie
