// The bytes behind an image_url / video_url: inline data: URLs (base64), or http(s) URLs
// fetched with libcurl under a time limit and a size cap. Nothing else is read (file://
// would let any client read the server's files).
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace ernie {

struct FetchLimits {
  size_t max_bytes = 32u << 20;   // of the encoded image or video
  double timeout_seconds = 15;    // the whole transfer, connection included
  int max_redirects = 3;
};

// Throws ernie::Error saying what was wrong (the scheme, the size, the HTTP status, the
// transfer error) - the server answers 400 with it.
std::vector<uint8_t> fetch_media(const std::string& url, const FetchLimits& limits);

}  // namespace ernie
