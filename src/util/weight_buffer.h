// Heap blocks for the weights the engine builds at load (quantized and repacked
// matrices), laid out for streaming.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

namespace ernie {

// A zeroed block of `bytes`, 64-byte aligned, in memory advised as transparent huge
// pages; null when memory ran out. Decode reads every weight once per token, and with
// 4 KiB pages that is a TLB miss every 4 KiB of the stream and a hardware prefetcher that
// stops at every page boundary (Debian's default THP mode, "madvise", backs memory with
// huge pages only when asked). Blocks up to 8 MiB share 32 MiB regions, one after
// another, so a small matrix lies in huge pages too; larger ones start on a 2 MiB
// boundary and only their whole 2 MiB pages are advised (a tail in a huge page of its
// own would hold up to 2 MiB resident for a few bytes).
std::shared_ptr<uint8_t> allocate_weight_buffer(size_t bytes);

}  // namespace ernie
