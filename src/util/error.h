// Errors: every failure the user can cause (bad file, bad flag, bad request) is an
// ernie::Error whose message says what was wrong and what was expected. Programming
// errors stay assertions. Callers at the top (main, the server) turn an Error into
// one clear line and a non-zero exit or an error response.
#pragma once

#include <sstream>
#include <stdexcept>
#include <string>
#include <utility>

namespace ernie {

class Error : public std::runtime_error {
 public:
  explicit Error(const std::string& message) : std::runtime_error(message) {}
};

// Concatenates any streamable values into one string: str_cat("shape ", 3, "x", 4).
template <typename... Parts>
std::string str_cat(Parts&&... parts) {
  std::ostringstream out;
  (out << ... << std::forward<Parts>(parts));
  return out.str();
}

// Throws ernie::Error with the concatenated message.
template <typename... Parts>
[[noreturn]] void fail(Parts&&... parts) {
  throw Error(str_cat(std::forward<Parts>(parts)...));
}

}  // namespace ernie
