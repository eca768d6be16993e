#include "util/text_file.h"

#include <fstream>
#include <sstream>

#include "util/error.h"

namespace ernie {

std::string read_text_file(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  if (!in) fail("cannot read ", path, ": expected a readable file");
  std::ostringstream content;
  content << in.rdbuf();
  return content.str();
}

}  // namespace ernie
