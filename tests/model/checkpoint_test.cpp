#include "model/checkpoint.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <filesystem>

#include "support/test_support.h"
#include "util/error.h"

namespace ernie {
namespace {

using ::testing::HasSubstr;
using testing::TempDir;

std::string open_error(const std::string& dir) {
  try {
    Checkpoint::open(dir);
  } catch (const Error& error) {
    return error.what();
  }
  return "(no error)";
}

TEST(CheckpointTest, ShardedCheckpointHoldsTheSameTensorsAsOneFile) {
  TempDir temp;
  const SyntheticModelSpec spec = synthetic_preset("tiny-moe");
  const std::string single = testing::make_checkpoint(temp, "single", spec, CheckpointLayout::kTorch, 1);
  const std::string sharded = testing::make_checkpoint(temp, "sharded", spec, CheckpointLayout::kTorch, 4);
  EXPECT_TRUE(std::filesystem::exists(sharded + "/model-00004-of-00004.safetensors"));
  auto one = Checkpoint::open(single);
  auto many = Checkpoint::open(sharded);
  EXPECT_EQ(one->num_files(), 1u);
  EXPECT_EQ(many->num_files(), 4u);
  ASSERT_EQ(one->names(), many->names());
  for (const std::string& name : one->names()) {
    const TensorView a = one->take(name), b = many->take(name);
    ASSERT_EQ(a.shape(), b.shape()) << name;
    ASSERT_EQ(0, std::memcmp(a.data, b.data, a.info->size)) << name;
  }
  EXPECT_TRUE(one->unused_names().empty());
}

TEST(CheckpointTest, MissingTensorIsNamedWithItsExpectedShape) {
  TempDir temp;
  auto checkpoint = Checkpoint::open(
      testing::make_checkpoint(temp, "m", synthetic_preset("tiny-dense"), CheckpointLayout::kTorch));
  try {
    checkpoint->take("model.nothing.weight", {3, 4});
    FAIL() << "expected an error";
  } catch (const Error& error) {
    EXPECT_THAT(error.what(), HasSubstr("missing tensor \"model.nothing.weight\" (expected shape [3, 4])"));
  }
}

TEST(CheckpointTest, RefusesBrokenIndexes) {
  TempDir temp;
  const std::string dir = testing::make_checkpoint(temp, "m", synthetic_preset("tiny-dense"), CheckpointLayout::kTorch, 2);
  const std::string index_path = dir + "/model.safetensors.index.json";
  const std::string index = testing::read_file(index_path);

  testing::write_file(index_path, "{\"weight_map\": ");
  EXPECT_THAT(open_error(dir), HasSubstr("invalid JSON"));
  testing::write_file(index_path, R"({"weight_map": {"model.norm.weight": "../elsewhere.safetensors"}})");
  EXPECT_THAT(open_error(dir), HasSubstr("expected a file in the same directory"));
  testing::write_file(index_path, R"({"weight_map": {"model.norm.weight": "model-00009-of-00009.safetensors"}})");
  EXPECT_THAT(open_error(dir), HasSubstr("model-00009-of-00009.safetensors"));
  // An index that places a tensor in the wrong shard.
  std::string moved = index;
  const size_t at = moved.find("\"model.norm.weight\": \"model-00002-of-00002");
  ASSERT_NE(at, std::string::npos);
  moved.replace(moved.find("00002-of", at), 5, "00001");
  testing::write_file(index_path, moved);
  EXPECT_THAT(open_error(dir), HasSubstr("\"model.norm.weight\""));

  EXPECT_THAT(open_error(temp.file("nowhere")), HasSubstr("does not exist"));
  std::filesystem::create_directories(temp.file("empty"));
  EXPECT_THAT(open_error(temp.file("empty")), HasSubstr("expected model.safetensors, model.safetensors.index.json or rank0/"));
}

// A pre-sharded release (rank0/ .. rankN-1/, FastDeploy's TP4 layout) is joined back
// by the tensor-parallel split (tests/model/numpy_reference_test.cpp checks the join
// against an independent numpy one); ranks that are not one model's parts are refused.
TEST(CheckpointTest, RankDirectoriesThatAreNotOneModelsPartsAreRefused) {
  TempDir temp;
  namespace fs = std::filesystem;
  const std::string root = temp.file("release");
  const std::string rank0 =
      testing::make_checkpoint(temp, "release/rank0", synthetic_preset("tiny-moe"), CheckpointLayout::kPaddle);
  fs::copy_file(rank0 + "/config.json", root + "/config.json");
  fs::copy(rank0, root + "/rank1");
  // Two whole models: each rank's fused q|k|v has all heads, not its share.
  EXPECT_THAT(open_error(root), HasSubstr("qkv_proj.weight\" has"));
  EXPECT_THAT(open_error(root), HasSubstr("(this rank's query, key and value heads)"));
  fs::remove(root + "/rank1/model.safetensors");
  EXPECT_THAT(open_error(root), HasSubstr("no weights in " + root + "/rank1"));
}

}  // namespace
}  // namespace ernie
