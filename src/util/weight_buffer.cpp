#include "util/weight_buffer.h"

#include <sys/mman.h>

#include <cstdlib>
#include <cstring>

namespace ernie {

std::shared_ptr<uint8_t> allocate_weight_buffer(size_t bytes) {
  constexpr size_t kHugePage = size_t{2} << 20;
  const size_t alignment = bytes >= kHugePage ? kHugePage : 64;
  const size_t size = (bytes + alignment - 1) / alignment * alignment;
  auto* raw = static_cast<uint8_t*>(std::aligned_alloc(alignment, size == 0 ? alignment : size));
  if (raw == nullptr) return nullptr;
#if defined(MADV_HUGEPAGE)
  // Advice only: where huge pages are off or none is free, the block keeps 4 KiB pages.
  if (alignment == kHugePage) madvise(raw, size, MADV_HUGEPAGE);
#endif
  std::memset(raw, 0, size);  // before any use, so the faults take huge pages
  return std::shared_ptr<uint8_t>(raw, [](uint8_t* p) { std::free(p); });
}

}  // namespace ernie
