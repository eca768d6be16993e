// Blocks for requests: the prefix-cache lookup at admission, growing a request's block
// table as its tokens are computed, offering its full blocks to the prefix cache, and
// giving everything back when it finishes or is preempted.
#pragma once

#include <cstdint>

#include "engine/kv_block_pool.h"
#include "engine/request.h"
#include "model/kv_cache.h"

namespace ernie {

struct PrefixCacheStats {
  int64_t queried_tokens = 0;  // prompt tokens looked up
  int64_t hit_tokens = 0;      // of them, found cached
  int64_t queries = 0;
  int64_t hits = 0;            // lookups that reused at least one block
};

class KvCacheManager {
 public:
  KvCacheManager(KvBlockPool& pool, bool prefix_caching) : pool_(pool), prefix_caching_(prefix_caching) {}

  // For a request with no blocks: takes the longest cached run of full blocks of its
  // tokens, always leaving the last token to compute so its logits exist. Returns the
  // number of tokens found (0 with prefix caching off).
  int64_t acquire_cached_prefix(EngineRequest& request);
  // Ensures blocks for positions [0, num_tokens). False, with nothing changed, when the
  // pool cannot provide them.
  bool allocate_slots(EngineRequest& request, int64_t num_tokens);
  // Gives back the blocks past those `num_tokens` positions need (speculative drafts that
  // were rejected), never a block already offered to the prefix cache.
  void release_slots_beyond(EngineRequest& request, int64_t num_tokens);
  // Registers the request's newly completed full blocks with the prefix cache.
  void register_computed_blocks(EngineRequest& request);
  // Returns all of the request's blocks to the pool, last block first so that the
  // tail of a sequence is evicted before its shared prefix.
  void free(EngineRequest& request);

  int blocks_needed(int64_t num_tokens) const {
    return static_cast<int>((num_tokens + pool_.block_size() - 1) / pool_.block_size());
  }
  bool prefix_caching() const { return prefix_caching_; }
  const PrefixCacheStats& stats() const { return stats_; }
  KvBlockPool& pool() { return pool_; }

 private:
  KvBlockPool& pool_;
  bool prefix_caching_;
  PrefixCacheStats stats_;
};

// The KvCache view of one request's block table, for the forward pass.
class PagedKvCache final : public KvCache {
 public:
  PagedKvCache(KvBlockPool& pool, const std::vector<BlockId>& block_table) : pool_(pool), table_(block_table) {}
  void reserve(int64_t num_positions) override;
  void* key(int layer, int64_t position) override;
  void* value(int layer, int64_t position) override;
  const std::vector<BlockId>& block_table() const { return table_; }

 private:
  KvBlockPool& pool_;
  const std::vector<BlockId>& table_;
};

}  // namespace ernie
