#include "engine/kv_block_pool.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cassert>
#include <cerrno>
#include <cstring>

#include "util/error.h"
#include "util/hash.h"

namespace ernie {

uint64_t chain_block_hash(uint64_t parent_hash, std::span<const int32_t> tokens) {
  // A 64-bit mix (splitmix finaliser per word). Collisions are harmless: lookups also
  // compare the tokens.
  uint64_t hash = parent_hash ^ (0x9e3779b97f4a7c15ull * (tokens.size() + 1));
  for (int32_t token : tokens) {
    hash ^= static_cast<uint32_t>(token) + 0x9e3779b97f4a7c15ull + (hash << 6) + (hash >> 2);
    hash = mix64(hash);
  }
  return hash;
}

uint64_t KvBlockPool::bytes_per_block(int num_layers, size_t row_bytes, int block_size) {
  return 2ull * static_cast<uint64_t>(num_layers) * static_cast<uint64_t>(block_size) * row_bytes;
}

KvBlockPool::KvBlockPool(int num_layers, size_t row_bytes, int block_size, int num_blocks)
    : num_layers_(num_layers), row_bytes_(row_bytes), block_size_(block_size), num_blocks_(num_blocks) {
  if (num_blocks <= 0 || block_size <= 0) fail("KV block pool needs at least one block of at least one position");
  storage_bytes_ = bytes_per_block(num_layers, row_bytes, block_size) * static_cast<uint64_t>(num_blocks);
  void* mapping = mmap(nullptr, storage_bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE,
                       -1, 0);
  if (mapping == MAP_FAILED)
    fail("cannot reserve ", storage_bytes_ / (1 << 20), " MiB for the KV cache: ", std::strerror(errno));
  storage_ = static_cast<uint8_t*>(mapping);
  blocks_.resize(static_cast<size_t>(num_blocks));
  block_tokens_.resize(static_cast<size_t>(num_blocks) * static_cast<size_t>(block_size));
  // Block 0 on top: a fresh pool touches its pages in order.
  free_plain_.reserve(static_cast<size_t>(num_blocks));
  for (BlockId block = num_blocks - 1; block >= 0; --block) free_plain_.push_back(block);
}

KvBlockPool::~KvBlockPool() { munmap(storage_, storage_bytes_); }

KvBlockPoolStats KvBlockPool::stats() const {
  return {num_blocks_, num_free_blocks(), static_cast<int>(cached_by_hash_.size())};
}

uint64_t KvBlockPool::resident_bytes() const {
  const size_t page = static_cast<size_t>(sysconf(_SC_PAGESIZE));
  const size_t pages = (storage_bytes_ + page - 1) / page;
  // One byte per page; done in slices so a large pool needs no large vector.
  constexpr size_t kSlicePages = 1 << 16;
  std::vector<unsigned char> residency(std::min(pages, kSlicePages));
  uint64_t resident_pages = 0;
  for (size_t first = 0; first < pages; first += kSlicePages) {
    const size_t count = std::min(kSlicePages, pages - first);
    if (mincore(storage_ + first * page, std::min(count * page, storage_bytes_ - first * page), residency.data()) != 0)
      fail("cannot read the KV cache's residency: ", std::strerror(errno));
    for (size_t i = 0; i < count; ++i) resident_pages += residency[i] & 1u;
  }
  return resident_pages * page;
}

uint8_t* KvBlockPool::row(BlockId block, int layer, int offset, int kind) {
  assert(block >= 0 && block < num_blocks_ && offset >= 0 && offset < block_size_);
  const int64_t index =
      ((static_cast<int64_t>(block) * 2 + kind) * num_layers_ + layer) * block_size_ + offset;
  return storage_ + static_cast<size_t>(index) * row_bytes_;
}

namespace {

// Calls copy(row in the pool, row in the buffer, rows) for each run of positions of
// [first, first + count) that lies in one block, K rows first, then V rows.
template <typename Copy>
void for_each_layer_run(std::span<const BlockId> block_table, int block_size, int64_t first, int64_t count,
                        size_t row_bytes, Copy copy) {
  if (first < 0 || first + count > static_cast<int64_t>(block_table.size()) * block_size)
    fail("internal: positions ", first, "..", first + count - 1, " lie outside a block table of ", block_table.size(),
         " blocks");
  for (int kind = 0; kind < 2; ++kind) {
    size_t buffer_row = static_cast<size_t>(kind) * static_cast<size_t>(count);
    for (int64_t position = first; position < first + count;) {
      const int offset = static_cast<int>(position % block_size);
      const int64_t run = std::min<int64_t>(block_size - offset, first + count - position);
      copy(block_table[static_cast<size_t>(position / block_size)], kind, offset, buffer_row * row_bytes,
           static_cast<size_t>(run) * row_bytes);
      buffer_row += static_cast<size_t>(run);
      position += run;
    }
  }
}

}  // namespace

void KvBlockPool::read_layer_rows(std::span<const BlockId> block_table, int layer, int64_t first, int64_t count,
                                  uint8_t* out) {
  for_each_layer_run(block_table, block_size_, first, count, row_bytes_,
                     [&](BlockId block, int kind, int offset, size_t at, size_t bytes) {
                       std::memcpy(out + at, row(block, layer, offset, kind), bytes);
                     });
}

void KvBlockPool::write_layer_rows(std::span<const BlockId> block_table, int layer, int64_t first, int64_t count,
                                   const uint8_t* in) {
  for_each_layer_run(block_table, block_size_, first, count, row_bytes_,
                     [&](BlockId block, int kind, int offset, size_t at, size_t bytes) {
                       std::memcpy(row(block, layer, offset, kind), in + at, bytes);
                     });
}

void KvBlockPool::forget_identity(BlockId block) {
  BlockState& state = blocks_[static_cast<size_t>(block)];
  if (!state.cached) return;
  cached_by_hash_.erase(state.hash);
  state.cached = false;
}

std::optional<BlockId> KvBlockPool::allocate() {
  BlockId block;
  if (!free_plain_.empty()) {
    block = free_plain_.back();
    free_plain_.pop_back();
  } else if (!free_queue_.empty()) {
    block = free_queue_.front();
    free_queue_.pop_front();
    // Evicted from the prefix cache: to the second tier when there is one.
    if (swap_) swap_->store(blocks_[static_cast<size_t>(block)].hash, block_tokens(block), block_bytes(block));
    forget_identity(block);
  } else {
    return std::nullopt;
  }
  blocks_[static_cast<size_t>(block)].ref_count = 1;
  return block;
}

void KvBlockPool::release(BlockId block) {
  BlockState& state = blocks_[static_cast<size_t>(block)];
  if (state.ref_count <= 0) fail("KV block ", block, " released more often than acquired");
  if (--state.ref_count > 0) return;
  if (state.cached) state.free_position = free_queue_.insert(free_queue_.end(), block);
  else free_plain_.push_back(block);
}

void KvBlockPool::enable_swap(uint64_t bytes) {
  swap_ = std::make_unique<KvSwapTier>(bytes, bytes_per_block(num_layers_, row_bytes_, block_size_), block_size_);
}

std::optional<BlockId> KvBlockPool::acquire_cached(uint64_t hash, std::span<const int32_t> tokens) {
  const auto found = cached_by_hash_.find(hash);
  if (found == cached_by_hash_.end()) {
    // A miss here may be a hit in the second tier: back into a block of this pool, with
    // its identity again.
    if (!swap_ || !swap_->contains(hash, tokens)) return std::nullopt;
    const std::optional<BlockId> block = allocate();
    if (!block) return std::nullopt;
    if (!swap_->take(hash, tokens, block_bytes(*block))) {  // evicted by the allocation itself
      release(*block);
      return std::nullopt;
    }
    register_cached(*block, hash, tokens);
    return block;
  }
  const BlockId block = found->second;
  if (!std::equal(tokens.begin(), tokens.end(), block_tokens(block).begin())) return std::nullopt;
  BlockState& state = blocks_[static_cast<size_t>(block)];
  if (state.ref_count++ == 0) free_queue_.erase(state.free_position);
  return block;
}

void KvBlockPool::register_cached(BlockId block, uint64_t hash, std::span<const int32_t> tokens) {
  BlockState& state = blocks_[static_cast<size_t>(block)];
  if (state.cached || cached_by_hash_.count(hash) != 0) return;
  if (static_cast<int>(tokens.size()) != block_size_) fail("only full KV blocks can be cached");
  std::copy(tokens.begin(), tokens.end(),
            block_tokens_.begin() + static_cast<int64_t>(block) * block_size_);
  state.cached = true;
  state.hash = hash;
  cached_by_hash_[hash] = block;
}

}  // namespace ernie
