#include "engine/kv_swap_tier.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <string>

#include "util/error.h"

namespace ernie {
namespace {

std::string swap_directory() {
  for (const char* name : {"ERNIE_SWAP_DIR", "TMPDIR"})
    if (const char* dir = std::getenv(name); dir != nullptr && *dir != '\0') return dir;
  return "/tmp";
}

}  // namespace

KvSwapTier::KvSwapTier(uint64_t capacity_bytes, size_t block_bytes, int block_size)
    : block_bytes_(block_bytes), block_size_(block_size) {
  capacity_ = static_cast<int>(std::min<uint64_t>(capacity_bytes / block_bytes, 1u << 30));
  if (capacity_ < 1)
    fail("--swap-space holds less than one KV block (", block_bytes, " bytes); give at least that much");
  storage_bytes_ = static_cast<uint64_t>(capacity_) * block_bytes;
  // An unlinked file: its space goes back to the disk when the process ends, however it ends.
  std::string path = swap_directory() + "/ernie-kv-swap-XXXXXX";
  const int fd = mkstemp(path.data());
  if (fd < 0) fail("--swap-space: cannot create a file in ", swap_directory(), ": ", std::strerror(errno));
  unlink(path.c_str());
  if (ftruncate(fd, static_cast<off_t>(storage_bytes_)) != 0) {
    const int error = errno;
    close(fd);
    fail("--swap-space: cannot size the swap file to ", storage_bytes_ >> 20, " MiB: ", std::strerror(error));
  }
  void* mapping = mmap(nullptr, storage_bytes_, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (mapping == MAP_FAILED) fail("--swap-space: cannot map the swap file: ", std::strerror(errno));
  storage_ = static_cast<uint8_t*>(mapping);
  slots_.resize(static_cast<size_t>(capacity_));
  tokens_.resize(static_cast<size_t>(capacity_) * static_cast<size_t>(block_size_));
  for (int slot = capacity_ - 1; slot >= 0; --slot) free_slots_.push_back(slot);
}

KvSwapTier::~KvSwapTier() { munmap(storage_, storage_bytes_); }

int KvSwapTier::find(uint64_t hash, std::span<const int32_t> tokens) const {
  const auto found = by_hash_.find(hash);
  if (found == by_hash_.end()) return -1;
  const int32_t* stored = tokens_.data() + static_cast<size_t>(found->second) * static_cast<size_t>(block_size_);
  return std::equal(tokens.begin(), tokens.end(), stored) ? found->second : -1;
}

void KvSwapTier::drop(int slot) {
  by_hash_.erase(slots_[static_cast<size_t>(slot)].hash);
  lru_.erase(slots_[static_cast<size_t>(slot)].position);
  free_slots_.push_back(slot);
}

void KvSwapTier::store(uint64_t hash, std::span<const int32_t> tokens, const uint8_t* bytes) {
  if (static_cast<int>(tokens.size()) != block_size_) fail("internal: only full KV blocks go to the swap tier");
  if (const auto held = by_hash_.find(hash); held != by_hash_.end()) drop(held->second);
  if (free_slots_.empty()) drop(lru_.front());
  const int slot = free_slots_.back();
  free_slots_.pop_back();
  std::memcpy(storage_ + static_cast<size_t>(slot) * block_bytes_, bytes, block_bytes_);
  std::copy(tokens.begin(), tokens.end(), tokens_.begin() + static_cast<int64_t>(slot) * block_size_);
  slots_[static_cast<size_t>(slot)] = {hash, lru_.insert(lru_.end(), slot)};
  by_hash_[hash] = slot;
  ++swapped_out_;
}

bool KvSwapTier::contains(uint64_t hash, std::span<const int32_t> tokens) const { return find(hash, tokens) >= 0; }

bool KvSwapTier::take(uint64_t hash, std::span<const int32_t> tokens, uint8_t* bytes) {
  const int slot = find(hash, tokens);
  if (slot < 0) return false;
  std::memcpy(bytes, storage_ + static_cast<size_t>(slot) * block_bytes_, block_bytes_);
  drop(slot);
  ++swapped_in_;
  return true;
}

KvSwapStats KvSwapTier::stats() const {
  return {capacity_, static_cast<int>(by_hash_.size()), swapped_out_, swapped_in_, block_size_};
}

}  // namespace ernie
