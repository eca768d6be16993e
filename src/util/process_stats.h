// Resource figures of this process, for load reports and benchmarks.
#pragma once

#include <cstdint>

namespace ernie {

// Peak resident set size of this process so far, in bytes (getrusage ru_maxrss).
uint64_t peak_rss_bytes();
// Physical memory of the machine, in bytes.
uint64_t physical_memory_bytes();

}  // namespace ernie
