#include "util/page_in.h"

#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <vector>

#include "util/progress.h"
#include "util/thread_pool.h"

namespace ernie {

void page_in(ThreadPool& pool, std::span<const std::span<const uint8_t>> regions, ByteProgress* progress) {
  constexpr size_t kPiece = 16u << 20;
  std::vector<std::span<const uint8_t>> pieces;
  for (const std::span<const uint8_t> region : regions)
    for (size_t at = 0; at < region.size(); at += kPiece) pieces.push_back(region.subspan(at, std::min(kPiece, region.size() - at)));
  const auto page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  pool.parallel_for(pieces.size(), 1, [&](size_t begin, size_t end) {
    for (size_t i = begin; i < end; ++i) {
      const auto start = reinterpret_cast<uintptr_t>(pieces[i].data());
      const uintptr_t first = start / page * page;
      madvise(reinterpret_cast<void*>(first), start + pieces[i].size() - first, MADV_WILLNEED);
      // One read per page faults it in; the sum keeps the reads from being dropped.
      uint8_t sum = 0;
      for (size_t at = 0; at < pieces[i].size(); at += page)
        sum = static_cast<uint8_t>(sum + *static_cast<volatile const uint8_t*>(pieces[i].data() + at));
      asm volatile("" : : "r"(sum));
      if (progress != nullptr) progress->add(pieces[i].size());
    }
  });
}

}  // namespace ernie
