#include "util/weight_buffer.h"

#include <sys/mman.h>

#include <cstdlib>
#include <cstring>

namespace ernie {

std::shared_ptr<uint8_t> allocate_weight_buffer(size_t bytes) {
  constexpr size_t kHugePage = size_t{2} << 20;
  const size_t size = bytes == 0 ? 64 : (bytes + 63) / 64 * 64;
  const size_t alignment = size >= kHugePage ? kHugePage : 64;
  void* raw = nullptr;
  if (posix_memalign(&raw, alignment, size) != 0) return nullptr;
#if defined(MADV_HUGEPAGE)
  // Advice only: where huge pages are off or none is free, the block keeps 4 KiB pages.
  // Only whole huge pages are asked for: a block's tail in a huge page of its own would
  // hold up to 2 MiB resident for a few bytes, and a MoE model has thousands of blocks.
  if (alignment == kHugePage) madvise(raw, size / kHugePage * kHugePage, MADV_HUGEPAGE);
#endif
  std::memset(raw, 0, size);  // before any use, so the faults take huge pages
  return std::shared_ptr<uint8_t>(static_cast<uint8_t*>(raw), [](uint8_t* p) { std::free(p); });
}

}  // namespace ernie
