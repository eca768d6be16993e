// The paged KV cache's storage and its block bookkeeping. Every block holds the keys
// and values of `block_size` consecutive positions for every layer, as rows of
// `row_bytes` (the model's KV row format). Blocks
// are reference-counted: a full block may be shared by several requests through the
// prefix cache. A block whose count drops to zero keeps its cached identity until it is
// handed out again. Blocks without an identity are handed out first, most recently
// released first (LIFO), so a lightly loaded server keeps reusing the same few warm
// pages instead of touching the whole pool; only then are cached blocks evicted, least
// recently released first (LRU).
#pragma once

#include <cstdint>
#include <list>
#include <optional>
#include <span>
#include <unordered_map>
#include <memory>
#include <vector>

#include "engine/kv_swap_tier.h"

namespace ernie {

using BlockId = int32_t;

// Chains a full block's hash over its parent's: equal hashes mean equal token prefixes
// (the pool also compares the tokens, so a hash collision can never alias two blocks).
uint64_t chain_block_hash(uint64_t parent_hash, std::span<const int32_t> tokens);
inline constexpr uint64_t kRootBlockHash = 0x45524e4945343521ull;  // parent of a sequence's first block

struct KvBlockPoolStats {
  int num_blocks = 0;
  int free_blocks = 0;    // unreferenced, including evictable cached ones
  int cached_blocks = 0;  // blocks that carry a prefix-cache identity
};

class KvBlockPool {
 public:
  KvBlockPool(int num_layers, size_t row_bytes, int block_size, int num_blocks);
  ~KvBlockPool();
  KvBlockPool(const KvBlockPool&) = delete;
  KvBlockPool& operator=(const KvBlockPool&) = delete;

  int block_size() const { return block_size_; }
  int num_blocks() const { return num_blocks_; }
  int num_free_blocks() const { return static_cast<int>(free_queue_.size() + free_plain_.size()); }
  // Bytes of one block: K and V for every layer and position.
  static uint64_t bytes_per_block(int num_layers, size_t row_bytes, int block_size);
  KvBlockPoolStats stats() const;
  // Bytes of the pool's storage now in RAM. The storage is reserved, not committed: a
  // block's pages become resident when first written and stay so. Reads only the
  // mapping's page table, so any thread may call it while the engine runs.
  uint64_t resident_bytes() const;

  void* key(BlockId block, int layer, int offset) { return row(block, layer, offset, 0); }
  void* value(BlockId block, int layer, int offset) { return row(block, layer, offset, 1); }
  size_t row_bytes() const { return row_bytes_; }
  int num_layers() const { return num_layers_; }

  // Moving a sequence's keys and values between instances (prefill/decode
  // disaggregation): one layer's rows of positions [first, first + count) of the
  // sequence whose blocks are `block_table`, as `count` K rows followed by `count` V
  // rows (2 * count * row_bytes() bytes). Touches only those rows, so other threads may
  // use other blocks meanwhile.
  void read_layer_rows(std::span<const BlockId> block_table, int layer, int64_t first, int64_t count, uint8_t* out);
  void write_layer_rows(std::span<const BlockId> block_table, int layer, int64_t first, int64_t count,
                        const uint8_t* in);

  // A block with reference count 1 and no cached identity: the most recently released
  // block without one, else the least recently released cached block, evicted; nullopt
  // when every block is referenced.
  std::optional<BlockId> allocate();
  // Drops one reference; at zero a cached block joins the eviction queue's tail, any
  // other block the top of the plain free stack.
  void release(BlockId block);

  // The cached block holding exactly `tokens` under `hash`, with one more reference
  // (taken off the free queue if it was there); nullopt on a miss.
  std::optional<BlockId> acquire_cached(uint64_t hash, std::span<const int32_t> tokens);
  // Gives a referenced, full block the identity (hash, tokens). If another block
  // already holds that identity, nothing changes: the first one stays the cached copy.
  void register_cached(BlockId block, uint64_t hash, std::span<const int32_t> tokens);
  bool is_cached(BlockId block) const { return blocks_[static_cast<size_t>(block)].cached; }

  // --swap-space: cached blocks evicted from now on are kept in a second tier of
  // `bytes` (engine/kv_swap_tier.h), and acquire_cached brings them back on a hit.
  void enable_swap(uint64_t bytes);
  const KvSwapTier* swap_tier() const { return swap_.get(); }
  int ref_count(BlockId block) const { return blocks_[static_cast<size_t>(block)].ref_count; }

 private:
  struct BlockState {
    int ref_count = 0;
    bool cached = false;
    uint64_t hash = 0;
    std::list<BlockId>::iterator free_position;  // valid while ref_count == 0 and cached
  };

  uint8_t* row(BlockId block, int layer, int offset, int kind);
  // A block's bytes: K and V of every layer and position, contiguous.
  uint8_t* block_bytes(BlockId block) { return storage_ + static_cast<size_t>(block) * bytes_per_block(num_layers_, row_bytes_, block_size_); }
  std::span<const int32_t> block_tokens(BlockId block) const {
    return {block_tokens_.data() + static_cast<size_t>(block) * static_cast<size_t>(block_size_), static_cast<size_t>(block_size_)};
  }
  void forget_identity(BlockId block);

  int num_layers_;
  size_t row_bytes_;
  int block_size_;
  int num_blocks_;
  size_t storage_bytes_ = 0;
  uint8_t* storage_ = nullptr;  // anonymous mapping: pages cost memory only once written
  std::vector<BlockState> blocks_;
  std::vector<int32_t> block_tokens_;  // [num_blocks][block_size], for cached blocks
  std::list<BlockId> free_queue_;      // unreferenced cached blocks; front = evicted first
  std::vector<BlockId> free_plain_;    // unreferenced blocks without identity; back = next out
  std::unordered_map<uint64_t, BlockId> cached_by_hash_;
  std::unique_ptr<KvSwapTier> swap_;  // null without --swap-space
};

}  // namespace ernie
