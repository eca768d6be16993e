#include "util/weight_buffer.h"

#include <gtest/gtest.h>

#include <cstdint>

namespace ernie {
namespace {

// Small blocks are 64-byte aligned, blocks of 2 MiB or more start on a 2 MiB boundary
// (where huge pages can back them), and every byte asked for is there and zero.
TEST(WeightBufferTest, AlignedAndZeroed) {
  for (const size_t bytes : {size_t{1}, size_t{100}, size_t{4096}, (size_t{2} << 20) - 1, size_t{2} << 20, (size_t{5} << 20) + 7}) {
    const std::shared_ptr<uint8_t> block = allocate_weight_buffer(bytes);
    ASSERT_NE(block, nullptr) << bytes;
    const auto address = reinterpret_cast<uintptr_t>(block.get());
    EXPECT_EQ(address % 64, 0u) << bytes;
    if (bytes >= (size_t{2} << 20)) {
      EXPECT_EQ(address % (size_t{2} << 20), 0u) << bytes;
    }
    for (size_t i = 0; i < bytes; i += 4093) ASSERT_EQ(block.get()[i], 0) << bytes << " at " << i;
    EXPECT_EQ(block.get()[bytes - 1], 0) << bytes;
  }
}

TEST(WeightBufferTest, AnEmptyBlockIsStillABlock) { EXPECT_NE(allocate_weight_buffer(0), nullptr); }

}  // namespace
}  // namespace ernie
