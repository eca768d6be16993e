#include "engine/kv_cache_manager.h"

#include <algorithm>
#include <span>

#include "util/error.h"

namespace ernie {
namespace {

// What block `index` of the request is cached under: its tokens, with an image's
// placeholders replaced by keys of the image's content (MultimodalPrompt::cache_identity).
std::span<const int32_t> block_identity(const EngineRequest& request, int64_t index, int block_size,
                                        std::vector<int32_t>& scratch) {
  const auto first = static_cast<size_t>(index * block_size);
  const std::span<const int32_t> tokens = std::span<const int32_t>(request.tokens).subspan(first, static_cast<size_t>(block_size));
  if (!request.multimodal || static_cast<int64_t>(first) >= request.multimodal->prompt_length) return tokens;
  scratch.assign(tokens.begin(), tokens.end());
  const std::vector<int32_t>& identity = request.multimodal->cache_identity;
  for (size_t i = 0; i < scratch.size() && first + i < identity.size(); ++i) scratch[i] = identity[first + i];
  return scratch;
}

}  // namespace

int64_t KvCacheManager::acquire_cached_prefix(EngineRequest& request) {
  if (!prefix_caching_ || !request.block_table.empty()) return 0;
  const int block_size = pool_.block_size();
  // At most the blocks before the last token: that token must be computed.
  const int64_t max_blocks = (request.num_tokens() - 1) / block_size;
  uint64_t hash = kRootBlockHash;
  int64_t matched_blocks = 0;
  std::vector<int32_t> scratch;
  for (; matched_blocks < max_blocks; ++matched_blocks) {
    const auto block_tokens = block_identity(request, matched_blocks, block_size, scratch);
    hash = chain_block_hash(hash, block_tokens);
    const std::optional<BlockId> block = pool_.acquire_cached(hash, block_tokens);
    if (!block) break;
    request.block_table.push_back(*block);
    request.last_registered_hash = hash;
  }
  request.num_registered_blocks = matched_blocks;
  const int64_t matched_tokens = matched_blocks * block_size;
  stats_.queries += 1;
  stats_.queried_tokens += request.num_tokens();
  stats_.hit_tokens += matched_tokens;
  stats_.hits += matched_blocks > 0 ? 1 : 0;
  return matched_tokens;
}

bool KvCacheManager::allocate_slots(EngineRequest& request, int64_t num_tokens) {
  const int needed = blocks_needed(num_tokens) - static_cast<int>(request.block_table.size());
  if (needed <= 0) return true;
  if (needed > pool_.num_free_blocks()) return false;
  for (int i = 0; i < needed; ++i) request.block_table.push_back(*pool_.allocate());
  return true;
}

void KvCacheManager::release_slots_beyond(EngineRequest& request, int64_t num_tokens) {
  const auto keep = static_cast<size_t>(std::max(blocks_needed(num_tokens), static_cast<int>(request.num_registered_blocks)));
  while (request.block_table.size() > keep) {
    pool_.release(request.block_table.back());
    request.block_table.pop_back();
  }
}

void KvCacheManager::register_computed_blocks(EngineRequest& request) {
  if (!prefix_caching_) return;
  const int block_size = pool_.block_size();
  const int64_t full_blocks = request.num_computed_tokens / block_size;
  std::vector<int32_t> scratch;
  for (int64_t index = request.num_registered_blocks; index < full_blocks; ++index) {
    const auto block_tokens = block_identity(request, index, block_size, scratch);
    request.last_registered_hash = chain_block_hash(request.last_registered_hash, block_tokens);
    pool_.register_cached(request.block_table[static_cast<size_t>(index)], request.last_registered_hash, block_tokens);
  }
  request.num_registered_blocks = std::max(request.num_registered_blocks, full_blocks);
}

void KvCacheManager::free(EngineRequest& request) {
  for (auto block = request.block_table.rbegin(); block != request.block_table.rend(); ++block) pool_.release(*block);
  request.block_table.clear();
  request.num_registered_blocks = 0;
  request.last_registered_hash = kRootBlockHash;
}

void PagedKvCache::reserve(int64_t num_positions) {
  const int64_t capacity = static_cast<int64_t>(table_.size()) * pool_.block_size();
  if (num_positions > capacity)
    fail("internal: request needs ", num_positions, " KV positions but its blocks hold ", capacity);
}

void* PagedKvCache::key(int layer, int64_t position) {
  const int64_t block_size = pool_.block_size();
  return pool_.key(table_[static_cast<size_t>(position / block_size)], layer, static_cast<int>(position % block_size));
}

void* PagedKvCache::value(int layer, int64_t position) {
  const int64_t block_size = pool_.block_size();
  return pool_.value(table_[static_cast<size_t>(position / block_size)], layer, static_cast<int>(position % block_size));
}

}  // namespace ernie
