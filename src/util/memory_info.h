// How much memory this process may plan to use: what the kernel reports as available
// (MemAvailable), capped by the cgroup's limit when the process runs in one (containers,
// systemd slices), plus what the process already holds itself. Sizing the KV cache from
// physical RAM instead overshoots whenever anything else runs on the machine.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <string_view>

namespace ernie {

// The value of `key` (e.g. "MemAvailable") in /proc/meminfo-style text ("Key:  123 kB"),
// in bytes; nullopt when absent.
std::optional<uint64_t> meminfo_field_bytes(std::string_view text, std::string_view key);

// A cgroup's headroom: limit - usage + the reclaimable file cache it holds. `limit_text`
// is memory.max ("max" = no limit: nullopt), `usage_text` memory.current, `stat_text`
// memory.stat (its "file" line). Nullopt when there is no limit or the text is not numbers.
std::optional<uint64_t> cgroup_headroom_bytes(std::string_view limit_text, std::string_view usage_text,
                                              std::string_view stat_text);

struct MemoryBudget {
  uint64_t available = 0;    // bytes this process could still take
  uint64_t own_anonymous = 0;  // anonymous memory it holds already (quantized weights, ...)
  std::string source;        // "MemAvailable", "cgroup memory.max", or "physical memory"
  uint64_t usable() const { return available + own_anonymous; }
};

// Reads /proc/meminfo, the cgroup v2 (or v1) files of this process and /proc/self/status.
MemoryBudget read_memory_budget();

}  // namespace ernie
