#include "util/log.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <fstream>
#include <sstream>

#include "support/test_support.h"

namespace ernie {
namespace {

// Text from clients (request ids, prompts) reaches log lines; it must not be able to
// start a line of its own.
TEST(LogTest, ControlCharactersCannotForgeLines) {
  testing::TempDir dir;
  const std::string path = dir.path() + "/log.txt";
  add_log_file(path);
  log_info("request id=a\nINFO forged\r\x1b[31m end");
  std::ifstream file(path);
  std::stringstream text;
  text << file.rdbuf();
  const std::string content = text.str();
  EXPECT_EQ(std::count(content.begin(), content.end(), '\n'), 1) << content;
  EXPECT_NE(content.find("id=a\\nINFO forged\\r\\x1b[31m end"), std::string::npos) << content;
}

}  // namespace
}  // namespace ernie
