// The KV cache's second tier (--swap-space GB): full prefix-cache blocks evicted from the
// block pool are kept here instead of dropped, with their hash identity, and a later
// prefix lookup that misses the pool copies them back instead of recomputing them.
//
// The tier is a file on local disk (an unlinked file in $ERNIE_SWAP_DIR, else $TMPDIR,
// else /tmp), mapped shared: the primary pool already lives in RAM, so the second tier is
// the slower, larger storage below it, and the kernel writes its pages back to disk under
// memory pressure instead of the process holding them. Slots are whole blocks, kept
// least recently used first out.
#pragma once

#include <cstdint>
#include <list>
#include <span>
#include <unordered_map>
#include <vector>

namespace ernie {

struct KvSwapStats {
  int capacity_blocks = 0;
  int stored_blocks = 0;
  int64_t swapped_out = 0;  // blocks written to the tier
  int64_t swapped_in = 0;   // blocks brought back on a prefix hit
  int block_size = 0;       // tokens per block
};

class KvSwapTier {
 public:
  // `capacity_bytes` of slots of `block_bytes` each (at least one slot); `block_size`
  // tokens identify a block. Throws ernie::Error when the file cannot be made.
  KvSwapTier(uint64_t capacity_bytes, size_t block_bytes, int block_size);
  ~KvSwapTier();
  KvSwapTier(const KvSwapTier&) = delete;
  KvSwapTier& operator=(const KvSwapTier&) = delete;

  // Keeps a copy of a block's bytes under (hash, tokens), evicting the least recently
  // stored block when full; an identity already held is refreshed.
  void store(uint64_t hash, std::span<const int32_t> tokens, const uint8_t* bytes);
  // Whether (hash, tokens) is held.
  bool contains(uint64_t hash, std::span<const int32_t> tokens) const;
  // Copies the block held under (hash, tokens) to `bytes` and drops it from the tier;
  // false on a miss.
  bool take(uint64_t hash, std::span<const int32_t> tokens, uint8_t* bytes);

  KvSwapStats stats() const;

 private:
  struct Slot {
    uint64_t hash = 0;
    std::list<int>::iterator position;  // in lru_ while the slot holds a block
  };
  int find(uint64_t hash, std::span<const int32_t> tokens) const;
  void drop(int slot);

  size_t block_bytes_;
  int block_size_;
  int capacity_ = 0;
  uint8_t* storage_ = nullptr;
  uint64_t storage_bytes_ = 0;
  std::vector<Slot> slots_;
  std::vector<int32_t> tokens_;  // [capacity][block_size]
  std::vector<int> free_slots_;
  std::list<int> lru_;  // front: stored longest ago
  std::unordered_map<uint64_t, int> by_hash_;
  int64_t swapped_out_ = 0, swapped_in_ = 0;
};

}  // namespace ernie
