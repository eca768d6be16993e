// Base64 (RFC 4648, standard alphabet) decoding, for images sent inline as data: URLs.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string_view>
#include <vector>

namespace ernie {

// Decodes `text`; padding is optional, whitespace is not allowed. Throws ernie::Error
// naming the first offending character, or when the result would exceed `max_bytes`
// (checked before anything is decoded).
std::vector<uint8_t> decode_base64(std::string_view text, size_t max_bytes);

}  // namespace ernie
