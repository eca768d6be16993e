#include "util/progress.h"

#include <unistd.h>

#include <cstdio>

#include "util/log.h"

namespace ernie {

ByteProgress::ByteProgress(std::string what, uint64_t total_bytes)
    : what_(std::move(what)),
      total_(total_bytes),
      interactive_(isatty(STDERR_FILENO) != 0),
      start_(std::chrono::steady_clock::now()),
      last_print_(start_) {}

ByteProgress::~ByteProgress() { finish(); }

void ByteProgress::add(uint64_t bytes) {
  const uint64_t done = done_.fetch_add(bytes) + bytes;
  const auto now = std::chrono::steady_clock::now();
  // A terminal line is redrawn five times a second; a log gets a line every 5 s, so a
  // short job logs only its final line.
  const auto interval = interactive_ ? std::chrono::milliseconds(200) : std::chrono::milliseconds(5000);
  if (now - last_print_ < interval) return;
  std::unique_lock<std::mutex> lock(print_mutex_, std::try_to_lock);
  if (!lock.owns_lock() || finished_) return;
  last_print_ = now;
  report(done, false);
}

void ByteProgress::finish() {
  std::lock_guard<std::mutex> lock(print_mutex_);
  if (finished_) return;
  finished_ = true;
  report(done_.load(), true);
}

void ByteProgress::report(uint64_t done, bool final) {
  const double seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
  const double rate = seconds > 0 ? static_cast<double>(done) / seconds : 0;
  char line[160];
  if (final) {
    std::snprintf(line, sizeof line, "%s: %.2f GB in %.1f s (%.2f GB/s)", what_.c_str(), static_cast<double>(done) / 1e9,
                  seconds, rate / 1e9);
  } else {
    const double eta = rate > 0 ? static_cast<double>(total_ - std::min(done, total_)) / rate : 0;
    std::snprintf(line, sizeof line, "%s: %.2f / %.2f GB, %.2f GB/s, ETA %.0f s", what_.c_str(),
                  static_cast<double>(done) / 1e9, static_cast<double>(total_) / 1e9, rate / 1e9, eta);
  }
  if (interactive_) {
    std::fprintf(stderr, "\r\033[K%s%s", line, final ? "\n" : "");
    std::fflush(stderr);
  } else {
    log_info(line);
  }
}

}  // namespace ernie
