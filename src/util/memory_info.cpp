#include "util/memory_info.h"

#include <algorithm>
#include <charconv>
#include <fstream>
#include <sstream>

#include "util/process_stats.h"

namespace ernie {
namespace {

std::string read_small_file(const std::string& path) {
  std::ifstream file(path);
  if (!file) return {};
  std::ostringstream text;
  text << file.rdbuf();
  return text.str();
}

std::string_view trim(std::string_view text) {
  const size_t begin = text.find_first_not_of(" \t\r\n");
  if (begin == std::string_view::npos) return {};
  const size_t end = text.find_last_not_of(" \t\r\n");
  return text.substr(begin, end - begin + 1);
}

std::optional<uint64_t> parse_number(std::string_view text) {
  text = trim(text);
  uint64_t value = 0;
  const auto [end, error] = std::from_chars(text.data(), text.data() + text.size(), value);
  if (error != std::errc() || end != text.data() + text.size()) return std::nullopt;
  return value;
}

// The number after "key" at the start of a line ("key 123" or "key: 123 kB"), as written.
std::optional<uint64_t> keyed_number(std::string_view text, std::string_view key) {
  size_t line_start = 0;
  while (line_start < text.size()) {
    size_t line_end = text.find('\n', line_start);
    if (line_end == std::string_view::npos) line_end = text.size();
    std::string_view line = text.substr(line_start, line_end - line_start);
    line_start = line_end + 1;
    if (line.substr(0, key.size()) != key) continue;
    std::string_view rest = line.substr(key.size());
    if (!rest.empty() && rest.front() == ':') rest.remove_prefix(1);
    if (rest.empty() || (rest.front() != ' ' && rest.front() != '\t')) continue;  // a longer key
    rest = trim(rest);
    const size_t unit = rest.find(' ');
    return parse_number(rest.substr(0, unit));
  }
  return std::nullopt;
}

// What a cgroup still allows: its limit less what it holds that cannot be reclaimed.
uint64_t headroom(uint64_t limit, uint64_t usage, uint64_t reclaimable) {
  const uint64_t held = usage - std::min(usage, reclaimable);
  return limit > held ? limit - held : 0;
}

// This process's cgroup v2 directory ("0::/some/path" in /proc/self/cgroup).
std::string cgroup_v2_dir() {
  const std::string membership = read_small_file("/proc/self/cgroup");
  const size_t at = membership.find("0::");
  if (at == std::string::npos) return "/sys/fs/cgroup";
  std::string_view path = trim(std::string_view(membership).substr(at + 3));
  path = path.substr(0, path.find('\n'));
  return "/sys/fs/cgroup" + std::string(path == "/" ? "" : path);
}

std::optional<uint64_t> cgroup_headroom() {
  const std::string v2 = cgroup_v2_dir();
  for (const std::string& dir : {v2, std::string("/sys/fs/cgroup")}) {
    const std::string limit = read_small_file(dir + "/memory.max");
    if (limit.empty()) continue;
    return cgroup_headroom_bytes(limit, read_small_file(dir + "/memory.current"), read_small_file(dir + "/memory.stat"));
  }
  // cgroup v1: "unlimited" is a huge number, which the min() with MemAvailable absorbs.
  const std::string v1 = "/sys/fs/cgroup/memory";
  const std::string limit = read_small_file(v1 + "/memory.limit_in_bytes");
  if (limit.empty()) return std::nullopt;
  const std::string stat = read_small_file(v1 + "/memory.stat");
  const uint64_t cache = keyed_number(stat, "total_cache").value_or(keyed_number(stat, "cache").value_or(0));
  const auto limit_bytes = parse_number(limit), usage_bytes = parse_number(read_small_file(v1 + "/memory.usage_in_bytes"));
  if (!limit_bytes || !usage_bytes) return std::nullopt;
  return headroom(*limit_bytes, *usage_bytes, cache);
}

}  // namespace

std::optional<uint64_t> meminfo_field_bytes(std::string_view text, std::string_view key) {
  const auto kib = keyed_number(text, key);
  if (!kib) return std::nullopt;
  return *kib * 1024;
}

std::optional<uint64_t> cgroup_headroom_bytes(std::string_view limit_text, std::string_view usage_text,
                                              std::string_view stat_text) {
  const auto limit = parse_number(limit_text);  // "max" does not parse: no limit
  const auto usage = parse_number(usage_text);
  if (!limit || !usage) return std::nullopt;
  return headroom(*limit, *usage, keyed_number(stat_text, "file").value_or(0));
}

MemoryBudget read_memory_budget() {
  MemoryBudget budget;
  const std::string meminfo = read_small_file("/proc/meminfo");
  if (const auto available = meminfo_field_bytes(meminfo, "MemAvailable")) {
    budget.available = *available;
    budget.source = "MemAvailable";
  } else {
    budget.available = physical_memory_bytes();
    budget.source = "physical memory";
  }
  if (const auto headroom = cgroup_headroom(); headroom && *headroom < budget.available) {
    budget.available = *headroom;
    budget.source = "cgroup memory limit";
  }
  budget.own_anonymous = meminfo_field_bytes(read_small_file("/proc/self/status"), "RssAnon").value_or(0);
  return budget;
}

}  // namespace ernie
