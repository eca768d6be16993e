#include "kernels/cpu_features.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <string>

namespace ernie {
namespace {

TEST(CpuFeaturesTest, ActiveLevelNeverExceedsWhatTheCpuHasOrWhatErnieIsaAllows) {
  const CpuFeatures& features = cpu_features();
  const IsaLevel active = active_isa_level();
  EXPECT_LE(static_cast<int>(active), static_cast<int>(features.best));
  if (features.avx512) {
    EXPECT_TRUE(features.avx2) << "every AVX-512 CPU has AVX2";
  }
  const char* cap = std::getenv("ERNIE_ISA");
  if (cap != nullptr && std::string(cap) == "generic") {
    EXPECT_EQ(active, IsaLevel::kGeneric);
  }
  if (cap != nullptr && std::string(cap) == "avx2") {
    EXPECT_LE(static_cast<int>(active), static_cast<int>(IsaLevel::kAvx2));
  }
  if (cap == nullptr) {
    EXPECT_EQ(active, features.best);
  }
  std::printf("cpu best %s, active %s\n", isa_level_name(features.best), isa_level_name(active));
}

}  // namespace
}  // namespace ernie
