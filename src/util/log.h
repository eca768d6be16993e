// Logging to stderr with a timestamp and level. stdout stays reserved for a command's
// product (generated text, JSON results), so logs never mix into it.
#pragma once

#include <string>

#include "util/error.h"

namespace ernie {

enum class LogLevel { kDebug = 0, kInfo = 1, kWarning = 2, kError = 3 };

void set_log_level(LogLevel level);
// Where lines go: stderr by default (stdout carries a command's product); the server
// logs to stdout. A log file, if added, receives every line too.
void set_log_to_stdout(bool to_stdout);
// Appends every later line to `path` (directories must exist); throws ernie::Error.
void add_log_file(const std::string& path);
LogLevel log_level();
// Text put before every message (e.g. "[rank 1] " in a tensor-parallel job).
void set_log_prefix(const std::string& prefix);
void log_line(LogLevel level, const std::string& message);

template <typename... Parts>
void log_info(Parts&&... parts) {
  if (log_level() <= LogLevel::kInfo) log_line(LogLevel::kInfo, str_cat(std::forward<Parts>(parts)...));
}
template <typename... Parts>
void log_warning(Parts&&... parts) {
  if (log_level() <= LogLevel::kWarning) log_line(LogLevel::kWarning, str_cat(std::forward<Parts>(parts)...));
}
template <typename... Parts>
void log_debug(Parts&&... parts) {
  if (log_level() <= LogLevel::kDebug) log_line(LogLevel::kDebug, str_cat(std::forward<Parts>(parts)...));
}

}  // namespace ernie
