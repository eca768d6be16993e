#include "util/base64.h"

#include <array>

#include "util/error.h"

namespace ernie {
namespace {

constexpr std::array<int8_t, 256> make_table() {
  std::array<int8_t, 256> table{};
  for (int8_t& entry : table) entry = -1;
  const char* alphabet = "ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
  for (int i = 0; i < 64; ++i) table[static_cast<unsigned char>(alphabet[i])] = static_cast<int8_t>(i);
  return table;
}
constexpr std::array<int8_t, 256> kTable = make_table();

}  // namespace

std::vector<uint8_t> decode_base64(std::string_view text, size_t max_bytes) {
  while (!text.empty() && text.back() == '=') text.remove_suffix(1);
  if (text.size() % 4 == 1) fail("base64 data of ", text.size(), " characters is truncated");
  const size_t bytes = text.size() / 4 * 3 + (text.size() % 4 == 0 ? 0 : text.size() % 4 - 1);
  if (bytes > max_bytes) fail("base64 data decodes to ", bytes, " bytes; the limit is ", max_bytes);
  std::vector<uint8_t> out;
  out.reserve(bytes);
  uint32_t accumulator = 0;
  int bits = 0;
  for (size_t i = 0; i < text.size(); ++i) {
    const int8_t value = kTable[static_cast<unsigned char>(text[i])];
    if (value < 0) fail("base64 data has a character outside the alphabet at offset ", i);
    accumulator = (accumulator << 6) | static_cast<uint32_t>(value);
    bits += 6;
    if (bits >= 8) {
      bits -= 8;
      out.push_back(static_cast<uint8_t>(accumulator >> bits));
    }
  }
  return out;
}

}  // namespace ernie
