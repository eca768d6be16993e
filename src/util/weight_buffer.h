// Heap blocks for the weights the engine builds at load (quantized and repacked
// matrices), laid out for streaming.
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>

namespace ernie {

// A zeroed block of `bytes`, 64-byte aligned; null when memory ran out. Blocks of 2 MiB
// or more start on a 2 MiB boundary and ask Linux for transparent huge pages over their
// whole 2 MiB pages (not the tail, which would waste up to 2 MiB resident): decode
// reads every weight once per token, and with 4 KiB pages that is a TLB miss every
// 4 KiB of the stream (Debian's default THP mode, "madvise", backs a heap block with
// huge pages only when asked).
std::shared_ptr<uint8_t> allocate_weight_buffer(size_t bytes);

}  // namespace ernie
