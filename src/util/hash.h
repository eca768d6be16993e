// Small non-cryptographic hashes used for identities (prefix-cache blocks, image
// content, cache file names, synthetic-weight streams) and the seeded generator.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>

namespace ernie {

// splitmix64's finaliser: every input bit affects every output bit.
inline uint64_t mix64(uint64_t z) {
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

inline constexpr uint64_t kFnv1aOffset = 1469598103934665603ull;

// FNV-1a over `bytes` bytes, continuing from `hash`.
inline uint64_t fnv1a(const void* data, size_t bytes, uint64_t hash = kFnv1aOffset) {
  const auto* p = static_cast<const unsigned char*>(data);
  for (size_t i = 0; i < bytes; ++i) hash = (hash ^ p[i]) * 1099511628211ull;
  return hash;
}
inline uint64_t fnv1a(std::string_view text, uint64_t hash = kFnv1aOffset) { return fnv1a(text.data(), text.size(), hash); }

}  // namespace ernie
