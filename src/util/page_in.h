// Reading mapped file regions into memory ahead of use (checkpoint weights, the
// quantized-weights cache), so the first requests do not fault them in page by page.
#pragma once

#include <cstdint>
#include <span>

namespace ernie {

class ByteProgress;
class ThreadPool;

// Reads the pages of mapped `regions` into memory now, in parallel on `pool` (16 MB
// pieces), counting bytes on `progress` when given.
void page_in(ThreadPool& pool, std::span<const std::span<const uint8_t>> regions, ByteProgress* progress);

}  // namespace ernie
