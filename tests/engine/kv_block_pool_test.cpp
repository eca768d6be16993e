#include "engine/kv_block_pool.h"

#include <gtest/gtest.h>

#include <unistd.h>

#include <cstring>
#include <fstream>
#include <set>
#include <string>
#include <vector>

#include "util/error.h"

namespace ernie {
namespace {

TEST(KvBlockPoolTest, AllocatesEveryBlockOnceThenRunsOut) {
  KvBlockPool pool(2, 8, 4, 5);
  std::set<BlockId> seen;
  for (int i = 0; i < 5; ++i) {
    const auto block = pool.allocate();
    ASSERT_TRUE(block.has_value());
    EXPECT_TRUE(seen.insert(*block).second);
  }
  EXPECT_FALSE(pool.allocate().has_value());
  EXPECT_EQ(pool.num_free_blocks(), 0);
  pool.release(*seen.begin());
  EXPECT_EQ(pool.num_free_blocks(), 1);
  EXPECT_THROW(pool.release(*seen.begin()), Error) << "double release";
}

TEST(KvBlockPoolTest, RowsOfDifferentBlocksLayersAndKindsDoNotOverlap) {
  KvBlockPool pool(3, 8 * sizeof(float), 4, 2);  // rows of 8 floats
  std::set<void*> rows;
  for (BlockId block = 0; block < 2; ++block)
    for (int layer = 0; layer < 3; ++layer)
      for (int offset = 0; offset < 4; ++offset) {
        EXPECT_TRUE(rows.insert(pool.key(block, layer, offset)).second);
        EXPECT_TRUE(rows.insert(pool.value(block, layer, offset)).second);
      }
  // Rows are row_bytes apart at least: writing a whole row touches only that row.
  auto* row = static_cast<float*>(pool.key(1, 2, 3));
  for (int i = 0; i < 8; ++i) row[i] = 7.0f;
  EXPECT_EQ(static_cast<float*>(pool.value(1, 2, 3))[0], 0.0f);
  EXPECT_EQ(KvBlockPool::bytes_per_block(3, 32, 4), 2u * 3 * 4 * 32);
}

// Whether the kernel backs anonymous memory with transparent huge pages unasked: then a
// first write may bring in a whole huge page rather than one page.
bool transparent_huge_pages_always() {
  std::ifstream mode("/sys/kernel/mm/transparent_hugepage/enabled");
  std::string text;
  std::getline(mode, text);
  return text.find("[always]") != std::string::npos;
}

TEST(KvBlockPoolTest, ResidentBytesCountOnlyThePagesWritten) {
  // Blocks of exactly 64 KiB (2 layers x 16 positions x 1 KiB x K and V), so a block
  // covers whole pages for any page size up to 64 KiB.
  constexpr size_t kRowBytes = 1024;
  KvBlockPool pool(2, kRowBytes, 16, 300);
  const uint64_t block_bytes = KvBlockPool::bytes_per_block(2, kRowBytes, 16);
  ASSERT_EQ(block_bytes, 64u * 1024);
  EXPECT_EQ(pool.resident_bytes(), 0u) << "a fresh pool holds no RAM";
  // Every row of blocks 3 and 250, then one byte of block 100: megabytes apart, so no
  // huge page holds two of them.
  for (BlockId block : {3, 250})
    for (int layer = 0; layer < 2; ++layer)
      for (int offset = 0; offset < 16; ++offset) {
        std::memset(pool.key(block, layer, offset), 1, kRowBytes);
        std::memset(pool.value(block, layer, offset), 1, kRowBytes);
      }
  const uint64_t two_blocks = pool.resident_bytes();
  *static_cast<uint8_t*>(pool.key(100, 0, 0)) = 1;
  const uint64_t and_a_byte = pool.resident_bytes();
  const uint64_t page = static_cast<uint64_t>(sysconf(_SC_PAGESIZE));
  if (!transparent_huge_pages_always()) {
    EXPECT_EQ(two_blocks, 2 * block_bytes);
    EXPECT_EQ(and_a_byte, 2 * block_bytes + page);
  } else {
    constexpr uint64_t kHugePage = 2u << 20;
    EXPECT_GE(two_blocks, 2 * block_bytes);
    EXPECT_LE(two_blocks, 2 * kHugePage);
    EXPECT_GE(and_a_byte, two_blocks + page);
    EXPECT_LE(and_a_byte, 3 * kHugePage);
  }
}

TEST(KvBlockPoolTest, CachedBlocksAreFoundByHashAndTokensAndEvictedLeastRecentlyReleasedFirst) {
  KvBlockPool pool(1, 4, 2, 3);
  const std::vector<int32_t> a = {1, 2}, b = {3, 4};
  const uint64_t hash_a = chain_block_hash(kRootBlockHash, a), hash_b = chain_block_hash(kRootBlockHash, b);
  EXPECT_NE(hash_a, hash_b);
  EXPECT_NE(chain_block_hash(hash_a, b), hash_b) << "the parent is part of the identity";

  const BlockId block_a = *pool.allocate(), block_b = *pool.allocate();
  pool.register_cached(block_a, hash_a, a);
  pool.register_cached(block_b, hash_b, b);
  EXPECT_EQ(pool.stats().cached_blocks, 2);
  // A hit while referenced adds a reference.
  EXPECT_EQ(pool.acquire_cached(hash_a, a), block_a);
  EXPECT_EQ(pool.ref_count(block_a), 2);
  // Same hash, other tokens: no false hit.
  EXPECT_FALSE(pool.acquire_cached(hash_a, b).has_value());
  pool.release(block_a);
  pool.release(block_a);
  pool.release(block_b);  // released order: a, then b
  EXPECT_EQ(pool.num_free_blocks(), 3);
  // Freed cached blocks can still be found, which takes them off the free queue.
  EXPECT_EQ(pool.acquire_cached(hash_b, b), block_b);
  EXPECT_EQ(pool.num_free_blocks(), 2);
  pool.release(block_b);
  // Allocation takes the never-used block first, then the least recently released (a).
  const BlockId fresh = *pool.allocate();
  EXPECT_NE(fresh, block_a);
  EXPECT_NE(fresh, block_b);
  EXPECT_EQ(*pool.allocate(), block_a);
  EXPECT_FALSE(pool.acquire_cached(hash_a, a).has_value()) << "evicted on reuse";
  EXPECT_EQ(pool.acquire_cached(hash_b, b), block_b);
}

}  // namespace
}  // namespace ernie

namespace ernie {
namespace {

// A lightly loaded server must keep reusing the same few blocks (their pages are
// already resident) instead of walking through the whole pool, which would make the
// process grow to the pool's full size.
TEST(KvBlockPoolTest, PlainBlocksAreReusedMostRecentlyReleasedFirst) {
  KvBlockPool pool(1, 4, 2, 100);
  EXPECT_EQ(*pool.allocate(), 0) << "a fresh pool hands out its blocks in order";
  for (int round = 0; round < 50; ++round) {
    const BlockId a = *pool.allocate(), b = *pool.allocate();
    EXPECT_LT(a, 3);
    EXPECT_LT(b, 3);
    pool.release(b);
    pool.release(a);
    EXPECT_EQ(*pool.allocate(), a) << "the block released last comes back first";
    pool.release(a);
  }
  EXPECT_EQ(pool.num_free_blocks(), 99);
}

TEST(KvBlockPoolTest, CachedBlocksAreEvictedOnlyWhenNoPlainBlockIsLeft) {
  KvBlockPool pool(1, 4, 2, 2);
  const std::vector<int32_t> tokens = {7, 8};
  const uint64_t hash = chain_block_hash(kRootBlockHash, tokens);
  const BlockId cached = *pool.allocate();
  pool.register_cached(cached, hash, tokens);
  const BlockId plain = *pool.allocate();
  pool.release(cached);
  pool.release(plain);
  EXPECT_EQ(*pool.allocate(), plain) << "the cached prefix survives while a plain block is free";
  EXPECT_EQ(pool.acquire_cached(hash, tokens), cached);
  pool.release(cached);
  EXPECT_EQ(*pool.allocate(), cached) << "evicted once nothing else is free";
  EXPECT_FALSE(pool.acquire_cached(hash, tokens).has_value());
}

// The second tier: blocks kept by identity, least recently stored out first.
TEST(KvSwapTierTest, KeepsBlocksByIdentityAndDropsTheOldestWhenFull) {
  constexpr size_t kBytes = 64;
  KvSwapTier tier(3 * kBytes, kBytes, 2);
  EXPECT_EQ(tier.stats().capacity_blocks, 3);
  const auto bytes_of = [](uint8_t fill) { return std::vector<uint8_t>(kBytes, fill); };
  for (uint8_t id = 1; id <= 4; ++id) {
    const std::vector<int32_t> tokens = {id, id + 10};
    tier.store(100 + id, tokens, bytes_of(id).data());
  }
  EXPECT_FALSE(tier.contains(101, std::vector<int32_t>{1, 11})) << "the oldest went when the fourth came";
  EXPECT_FALSE(tier.contains(102, std::vector<int32_t>{9, 9})) << "a hash with other tokens is not a hit";
  std::vector<uint8_t> out(kBytes);
  ASSERT_TRUE(tier.take(103, std::vector<int32_t>{3, 13}, out.data()));
  EXPECT_EQ(out, bytes_of(3));
  EXPECT_FALSE(tier.contains(103, std::vector<int32_t>{3, 13})) << "taken back, it leaves the tier";
  EXPECT_EQ(tier.stats().stored_blocks, 2);
  EXPECT_EQ(tier.stats().swapped_out, 4);
  EXPECT_EQ(tier.stats().swapped_in, 1);
  EXPECT_THROW(KvSwapTier(kBytes - 1, kBytes, 2), Error) << "less than one block";
}

// Evicted cached blocks go to the tier and come back, bytes and identity, on a lookup.
TEST(KvBlockPoolTest, EvictedCachedBlocksComeBackFromTheSwapTier) {
  constexpr int kLayers = 2, kBlockSize = 4, kBlocks = 3;
  constexpr size_t kRow = 16;
  KvBlockPool pool(kLayers, kRow, kBlockSize, kBlocks);
  pool.enable_swap(16 * KvBlockPool::bytes_per_block(kLayers, kRow, kBlockSize));
  const auto fill = [&](BlockId block, uint8_t value) {
    for (int layer = 0; layer < kLayers; ++layer)
      for (int offset = 0; offset < kBlockSize; ++offset) {
        std::memset(pool.key(block, layer, offset), value, kRow);
        std::memset(pool.value(block, layer, offset), value + 1, kRow);
      }
  };
  const auto holds = [&](BlockId block, uint8_t value) {
    for (int layer = 0; layer < kLayers; ++layer)
      for (int offset = 0; offset < kBlockSize; ++offset)
        for (size_t i = 0; i < kRow; ++i)
          if (static_cast<uint8_t*>(pool.key(block, layer, offset))[i] != value ||
              static_cast<uint8_t*>(pool.value(block, layer, offset))[i] != value + 1)
            return false;
    return true;
  };
  std::vector<std::vector<int32_t>> tokens;
  for (int b = 0; b < kBlocks; ++b) {
    tokens.push_back({b, b + 1, b + 2, b + 3});
    const BlockId block = *pool.allocate();
    fill(block, static_cast<uint8_t>(10 * (b + 1)));
    pool.register_cached(block, 1000 + b, tokens.back());
    pool.release(block);
  }
  // Three plain allocations evict all three cached blocks into the tier.
  std::vector<BlockId> taken;
  for (int b = 0; b < kBlocks; ++b) taken.push_back(*pool.allocate());
  EXPECT_EQ(pool.stats().cached_blocks, 0);
  EXPECT_EQ(pool.swap_tier()->stats().stored_blocks, kBlocks);
  for (BlockId block : taken) pool.release(block);
  for (int b = kBlocks - 1; b >= 0; --b) {
    const std::optional<BlockId> back = pool.acquire_cached(1000 + b, tokens[static_cast<size_t>(b)]);
    ASSERT_TRUE(back.has_value()) << b;
    EXPECT_TRUE(holds(*back, static_cast<uint8_t>(10 * (b + 1)))) << b;
    EXPECT_TRUE(pool.is_cached(*back));
    EXPECT_EQ(pool.ref_count(*back), 1);
  }
  EXPECT_EQ(pool.swap_tier()->stats().swapped_in, kBlocks);
  EXPECT_FALSE(pool.acquire_cached(2000, std::vector<int32_t>{9, 9, 9, 9}).has_value());
}

TEST(KvBlockPoolTest, LayerRowsOfARunOfPositionsGoOutAndComeBackThroughTheBlockTable) {
  // 3 layers, 4-byte rows, blocks of 4 positions; a sequence over blocks 5, 2, 7.
  KvBlockPool source(3, 4, 4, 8), destination(3, 4, 4, 8);
  const std::vector<BlockId> table = {5, 2, 7};
  const std::vector<BlockId> other_table = {1, 6, 0};
  for (int position = 0; position < 12; ++position)
    for (int layer = 0; layer < 3; ++layer) {
      const BlockId block = table[static_cast<size_t>(position / 4)];
      std::memset(source.key(block, layer, position % 4), 100 + position, 4);
      std::memset(source.value(block, layer, position % 4), 200 - position, 4);
    }
  // Positions 3..9 of layer 1: K rows then V rows, crossing two block boundaries.
  std::vector<uint8_t> rows(2 * 7 * 4);
  source.read_layer_rows(table, 1, 3, 7, rows.data());
  for (int i = 0; i < 7; ++i) {
    EXPECT_EQ(rows[static_cast<size_t>(4 * i)], 100 + 3 + i) << i;
    EXPECT_EQ(rows[static_cast<size_t>(4 * (7 + i))], 200 - 3 - i) << i;
  }
  destination.write_layer_rows(other_table, 1, 3, 7, rows.data());
  for (int position = 3; position < 10; ++position) {
    const BlockId block = other_table[static_cast<size_t>(position / 4)];
    EXPECT_EQ(static_cast<const uint8_t*>(destination.key(block, 1, position % 4))[3], 100 + position);
    EXPECT_EQ(static_cast<const uint8_t*>(destination.value(block, 1, position % 4))[0], 200 - position);
    EXPECT_EQ(static_cast<const uint8_t*>(destination.key(block, 0, position % 4))[0], 0) << "other layers untouched";
  }
  EXPECT_THROW(source.read_layer_rows(table, 1, 10, 3, rows.data()), Error) << "past the table's 12 positions";
}

}  // namespace
}  // namespace ernie
