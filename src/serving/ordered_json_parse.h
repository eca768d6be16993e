// JSON text to an ordered_json (members in the order written) in linear time.
// ordered_json's own parser searches an object's keys on every insert, so one object
// with a million keys in a request body would take hours; this one keeps a hash of each
// open object's keys. The order matters where the client's order means something: a
// JSON schema's properties are generated in the order declared, and tools are rendered
// into the prompt as written.
#pragma once

#include <string_view>

#include <nlohmann/json.hpp>

namespace ernie {

// A repeated key keeps its first place and its last value (as the JSON library's own
// parse keeps the last). Throws nlohmann::json::parse_error on malformed text; the
// caller bounds the nesting depth beforehand.
nlohmann::ordered_json parse_ordered_json(std::string_view text);

}  // namespace ernie
