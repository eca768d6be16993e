#include "util/log.h"

#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <ctime>
#include <mutex>

namespace ernie {
namespace {

std::atomic<LogLevel> g_level{LogLevel::kInfo};
std::mutex g_write_mutex;
bool g_to_stdout = false;        // guarded by g_write_mutex
std::FILE* g_file = nullptr;     // guarded by g_write_mutex
std::string g_prefix;            // guarded by g_write_mutex

const char* level_name(LogLevel level) {
  switch (level) {
    case LogLevel::kDebug: return "DEBUG";
    case LogLevel::kInfo: return "INFO";
    case LogLevel::kWarning: return "WARNING";
    case LogLevel::kError: return "ERROR";
  }
  return "?";
}

// One message is one line: control characters are written as escapes, so text that
// came from a client (a request id, a prompt) can never forge or split log lines.
std::string one_line(const std::string& message) {
  const bool clean = std::none_of(message.begin(), message.end(), [](char c) {
    const auto byte = static_cast<unsigned char>(c);
    return (byte < 0x20 && byte != '\t') || byte == 0x7f;
  });
  if (clean) return message;
  std::string out;
  out.reserve(message.size() + 16);
  for (char c : message) {
    const auto byte = static_cast<unsigned char>(c);
    if (c == '\n') {
      out += "\\n";
    } else if (c == '\r') {
      out += "\\r";
    } else if ((byte < 0x20 && c != '\t') || byte == 0x7f) {
      static const char kHex[] = "0123456789abcdef";
      out += "\\x";
      out += kHex[byte >> 4];
      out += kHex[byte & 15];
    } else {
      out += c;
    }
  }
  return out;
}

}  // namespace

void set_log_level(LogLevel level) { g_level.store(level); }

void set_log_prefix(const std::string& prefix) {
  std::lock_guard<std::mutex> lock(g_write_mutex);
  g_prefix = prefix;
}

void set_log_to_stdout(bool to_stdout) {
  std::lock_guard<std::mutex> lock(g_write_mutex);
  g_to_stdout = to_stdout;
}

void add_log_file(const std::string& path) {
  std::FILE* file = std::fopen(path.c_str(), "a");
  if (file == nullptr) fail("cannot open log file ", path);
  std::lock_guard<std::mutex> lock(g_write_mutex);
  if (g_file != nullptr) std::fclose(g_file);
  g_file = file;
}
LogLevel log_level() { return g_level.load(); }

void log_line(LogLevel level, const std::string& raw_message) {
  const std::string message = one_line(raw_message);
  const auto now = std::chrono::system_clock::now();
  const std::time_t seconds = std::chrono::system_clock::to_time_t(now);
  const int millis = static_cast<int>(
      std::chrono::duration_cast<std::chrono::milliseconds>(now.time_since_epoch()).count() % 1000);
  std::tm utc{};
  gmtime_r(&seconds, &utc);
  char stamp[32];
  std::strftime(stamp, sizeof stamp, "%Y-%m-%d %H:%M:%S", &utc);
  std::lock_guard<std::mutex> lock(g_write_mutex);
  std::FILE* console = g_to_stdout ? stdout : stderr;
  std::fprintf(console, "%s.%03d %s %s%s\n", stamp, millis, level_name(level), g_prefix.c_str(), message.c_str());
  std::fflush(console);
  if (g_file != nullptr) {
    std::fprintf(g_file, "%s.%03d %s %s%s\n", stamp, millis, level_name(level), g_prefix.c_str(), message.c_str());
    std::fflush(g_file);
  }
}

}  // namespace ernie
