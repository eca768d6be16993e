#include "util/weight_buffer.h"

#include <sys/mman.h>

#include <cstdlib>
#include <cstring>
#include <mutex>

namespace ernie {
namespace {

constexpr size_t kHugePage = size_t{2} << 20;
// Blocks up to kLargestSharedBlock are carved one after another out of shared regions of
// kSharedRegionBytes. Most of a quantized model's blocks are smaller than a huge page
// (0.3B at wint4: every layer matrix, 64 KiB to 1.7 MiB); on blocks of their own they
// kept 4 KiB pages, and the decode kernels streamed them 4-12% slower than the same
// weights in huge pages (0.3B's wint4 weight stream, three runs of 30-40 alternating
// rounds; `ernie bench --tg 128` gained 1-4%, 24 alternating pairs).
constexpr size_t kSharedRegionBytes = size_t{32} << 20;
constexpr size_t kLargestSharedBlock = kSharedRegionBytes / 4;

void advise_huge_pages(void* start, size_t bytes) {
#if defined(MADV_HUGEPAGE)
  // Advice only: where huge pages are off or none is free, the memory keeps 4 KiB pages.
  if (bytes >= kHugePage) madvise(start, bytes / kHugePage * kHugePage, MADV_HUGEPAGE);
#else
  (void)start;
  (void)bytes;
#endif
}

// `bytes` (a multiple of kHugePage) of fresh zero pages starting on a huge page boundary,
// advised as huge pages before anything touches them. Null when memory ran out.
std::shared_ptr<uint8_t> map_shared_region(size_t bytes) {
  const size_t mapped = bytes + kHugePage;  // room to slide the start onto a boundary
  void* raw = mmap(nullptr, mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  if (raw == MAP_FAILED) return nullptr;
  const auto first = reinterpret_cast<uintptr_t>(raw);
  const uintptr_t start = (first + kHugePage - 1) / kHugePage * kHugePage;
  if (start > first) munmap(raw, start - first);
  if (first + mapped > start + bytes) munmap(reinterpret_cast<void*>(start + bytes), first + mapped - (start + bytes));
  auto* region = reinterpret_cast<uint8_t*>(start);
  advise_huge_pages(region, bytes);
  return std::shared_ptr<uint8_t>(region, [bytes](uint8_t* p) { munmap(p, bytes); });
}

// The region small blocks are carved from now. It holds the region weakly: each block
// keeps its region alive, and once every block of it is gone the region is unmapped and
// the next block starts a fresh one.
struct SharedRegion {
  std::mutex mutex;
  std::weak_ptr<uint8_t> region;
  size_t used = 0;
};

std::shared_ptr<uint8_t> carve_shared(size_t size) {
  static SharedRegion current;
  std::lock_guard<std::mutex> lock(current.mutex);
  std::shared_ptr<uint8_t> region = current.region.lock();
  if (region == nullptr || current.used + size > kSharedRegionBytes) {
    region = map_shared_region(kSharedRegionBytes);
    if (region == nullptr) return nullptr;
    current.region = region;
    current.used = 0;
  }
  // Never handed out before, so still zero as the kernel mapped it.
  uint8_t* block = region.get() + current.used;
  current.used += size;
  return std::shared_ptr<uint8_t>(region, block);  // shares the region's ownership
}

}  // namespace

std::shared_ptr<uint8_t> allocate_weight_buffer(size_t bytes) {
  const size_t size = bytes == 0 ? 64 : (bytes + 63) / 64 * 64;
  if (size <= kLargestSharedBlock) return carve_shared(size);
  void* raw = nullptr;
  if (posix_memalign(&raw, kHugePage, size) != 0) return nullptr;
  // Only whole huge pages are asked for: a block's tail in a huge page of its own would
  // hold up to 2 MiB resident for a few bytes.
  advise_huge_pages(raw, size);
  std::memset(raw, 0, size);  // before any use, so the faults take huge pages
  return std::shared_ptr<uint8_t>(static_cast<uint8_t*>(raw), [](uint8_t* p) { std::free(p); });
}

}  // namespace ernie
