// Reading a whole (small) file: configs, JSON sidecars, templates, text to score.
#pragma once

#include <string>

namespace ernie {

// The file's bytes as they are; throws ernie::Error naming the path when it cannot be read.
std::string read_text_file(const std::string& path);

}  // namespace ernie
