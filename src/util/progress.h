// Progress of a long byte-counted job (reading or quantizing weights) on stderr: on a
// terminal one line redrawn in place ("quantizing weights: 3.1 / 21.4 GB, 1.2 GB/s, ETA
// 15 s"), otherwise a log line every 5 s and a final one, so service logs show it too.
// add() may be called from any thread.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <mutex>
#include <string>

namespace ernie {

class ByteProgress {
 public:
  ByteProgress(std::string what, uint64_t total_bytes);
  ~ByteProgress();  // finishes the line if finish() was not called
  ByteProgress(const ByteProgress&) = delete;
  ByteProgress& operator=(const ByteProgress&) = delete;

  void add(uint64_t bytes);
  // The final line: bytes, time and rate.
  void finish();

 private:
  void report(uint64_t done, bool final);

  std::string what_;
  uint64_t total_;
  bool interactive_;
  std::chrono::steady_clock::time_point start_;
  std::atomic<uint64_t> done_{0};
  std::mutex print_mutex_;
  std::chrono::steady_clock::time_point last_print_;
  bool finished_ = false;
};

}  // namespace ernie
