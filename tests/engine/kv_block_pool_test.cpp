#include "engine/kv_block_pool.h"

#include <gtest/gtest.h>

#include <set>
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

}  // namespace
}  // namespace ernie
