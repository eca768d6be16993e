#include "util/json_flag.h"

#include "util/error.h"

namespace ernie {

nlohmann::json parse_json_object_flag(std::string_view flag, const std::string& text) {
  nlohmann::json parsed;
  try {
    parsed = nlohmann::json::parse(text);
  } catch (const nlohmann::json::exception& error) {
    fail("--", flag, " expects a JSON object, got \"", text, "\" (", error.what(), ")");
  }
  if (!parsed.is_object()) fail("--", flag, " expects a JSON object, got ", parsed.dump());
  return parsed;
}

}  // namespace ernie
