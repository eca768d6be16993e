#include "util/weight_buffer.h"

#include <gtest/gtest.h>

#include <sys/mman.h>

#include <cstdint>
#include <cstring>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

namespace ernie {
namespace {

constexpr size_t kMiB = size_t{1} << 20;

// Every block is 64-byte aligned, blocks over 8 MiB (which get memory of their own) start
// on a 2 MiB boundary, and every byte asked for is there and zero.
TEST(WeightBufferTest, AlignedAndZeroed) {
  for (const size_t bytes : {size_t{1}, size_t{100}, size_t{4096}, 2 * kMiB - 1, 2 * kMiB, 5 * kMiB + 7, 8 * kMiB + 64,
                             20 * kMiB + 3}) {
    const std::shared_ptr<uint8_t> block = allocate_weight_buffer(bytes);
    ASSERT_NE(block, nullptr) << bytes;
    const auto address = reinterpret_cast<uintptr_t>(block.get());
    EXPECT_EQ(address % 64, 0u) << bytes;
    if (bytes > 8 * kMiB) {
      EXPECT_EQ(address % (2 * kMiB), 0u) << bytes;
    }
    for (size_t i = 0; i < bytes; i += 4093) ASSERT_EQ(block.get()[i], 0) << bytes << " at " << i;
    EXPECT_EQ(block.get()[bytes - 1], 0) << bytes;
  }
}

TEST(WeightBufferTest, AnEmptyBlockIsStillABlock) { EXPECT_NE(allocate_weight_buffer(0), nullptr); }

// Small blocks share memory: each must be its own, zero when handed out whatever its
// neighbours hold, and stay valid when the blocks around it are freed.
TEST(WeightBufferTest, SmallBlocksAreDisjointAndOutliveTheirNeighbours) {
  std::vector<std::shared_ptr<uint8_t>> blocks;
  std::vector<size_t> sizes;
  for (int i = 0; i < 40; ++i) {
    const size_t bytes = 1000 + static_cast<size_t>(i) * 100 * 1024;  // 1 KB .. 4 MB, 78 MB in all: several regions
    blocks.push_back(allocate_weight_buffer(bytes));
    ASSERT_NE(blocks.back(), nullptr);
    sizes.push_back(bytes);
    const uint8_t* block = blocks.back().get();
    for (size_t j = 0; j < bytes; j += 511) ASSERT_EQ(block[j], 0) << "block " << i << " at " << j;
    std::memset(blocks.back().get(), i + 1, bytes);
  }
  for (size_t i = 0; i < blocks.size(); i += 2) blocks[i].reset();
  for (size_t i = 1; i < blocks.size(); i += 2) {
    const uint8_t* block = blocks[i].get();
    for (size_t j = 0; j < sizes[i]; j += 509) ASSERT_EQ(block[j], static_cast<uint8_t>(i + 1)) << "block " << i;
    ASSERT_EQ(block[sizes[i] - 1], static_cast<uint8_t>(i + 1)) << "block " << i;
  }
}

#if defined(MADV_HUGEPAGE)
// The VmFlags of the mapping that holds `address` (/proc/self/smaps), empty if none.
std::string mapping_flags(uintptr_t address) {
  std::ifstream smaps("/proc/self/smaps");
  std::string line;
  bool inside = false;
  while (std::getline(smaps, line)) {
    uintptr_t first = 0, last = 0;
    char dash = 0;
    std::istringstream range(line);
    if (range >> std::hex >> first >> dash >> last && dash == '-') {
      inside = first <= address && address < last;
    } else if (inside && line.rfind("VmFlags:", 0) == 0) {
      return line;
    }
  }
  return "";
}

// A small matrix's block lies in memory advised for huge pages ("hg"), as a large one's
// whole 2 MiB pages do: the advice is what Debian's default THP mode needs.
TEST(WeightBufferTest, BlocksLieInMemoryAdvisedForHugePages) {
  for (const size_t bytes : {size_t{4096}, 600 * 1024 + size_t{1}, 3 * kMiB, 12 * kMiB}) {
    const std::shared_ptr<uint8_t> block = allocate_weight_buffer(bytes);
    ASSERT_NE(block, nullptr);
    const std::string flags = mapping_flags(reinterpret_cast<uintptr_t>(block.get()));
    ASSERT_FALSE(flags.empty()) << bytes;
    EXPECT_NE(flags.find(" hg"), std::string::npos) << bytes << ": " << flags;
  }
}
#endif

}  // namespace
}  // namespace ernie
