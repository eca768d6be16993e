#include "util/memory_info.h"

#include <gtest/gtest.h>

namespace ernie {
namespace {

TEST(MemoryInfoTest, ReadsMeminfoFields) {
  const std::string meminfo = "MemTotal:       24589804 kB\nMemFree:        20000000 kB\nMemAvailable:   19500000 kB\n";
  EXPECT_EQ(meminfo_field_bytes(meminfo, "MemAvailable"), 19500000ull * 1024);
  EXPECT_EQ(meminfo_field_bytes(meminfo, "MemTotal"), 24589804ull * 1024);
  EXPECT_FALSE(meminfo_field_bytes(meminfo, "Mem").has_value()) << "a prefix of a key is not the key";
  EXPECT_FALSE(meminfo_field_bytes(meminfo, "SwapTotal").has_value());
  EXPECT_EQ(meminfo_field_bytes("RssAnon:\t  2048 kB\n", "RssAnon"), 2048ull * 1024);
}

TEST(MemoryInfoTest, CgroupHeadroomCountsFileCacheAsReclaimable) {
  const std::string stat = "anon 300\nfile 200\nfile_mapped 50\n";
  EXPECT_EQ(cgroup_headroom_bytes("1000\n", "600\n", stat), 600u) << "1000 - (600 - 200)";
  EXPECT_FALSE(cgroup_headroom_bytes("max\n", "600\n", stat).has_value()) << "no limit";
  EXPECT_EQ(cgroup_headroom_bytes("500", "900", "file 100\n"), 0u) << "over the limit: nothing left";
  EXPECT_FALSE(cgroup_headroom_bytes("1000", "", stat).has_value());
}

TEST(MemoryInfoTest, ThisMachineHasSomeMemory) {
  const MemoryBudget budget = read_memory_budget();
  EXPECT_GT(budget.available, 0u);
  EXPECT_GT(budget.own_anonymous, 0u);
  EXPECT_FALSE(budget.source.empty());
}

}  // namespace
}  // namespace ernie
