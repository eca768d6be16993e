// The value of a command-line flag that takes a JSON object (FastDeploy's
// --limit-mm-per-prompt, --early-stop-config, --graph-optimization-config, ...).
#pragma once

#include <string>
#include <string_view>

#include <nlohmann/json.hpp>

namespace ernie {

// Parses `text` as the value of --`flag`; throws ernie::Error naming the flag unless it
// is a JSON object.
nlohmann::json parse_json_object_flag(std::string_view flag, const std::string& text);

}  // namespace ernie
