#include "util/progress.h"

#include <gtest/gtest.h>

#include <fstream>
#include <sstream>

#include "support/test_support.h"
#include "util/log.h"
#include "util/thread_pool.h"

namespace ernie {
namespace {

// Under ctest stderr is not a terminal: the final line goes to the log, with the bytes
// counted from every thread.
TEST(ByteProgressTest, CountsFromEveryThreadAndLogsTheTotal) {
  testing::TempDir dir;
  const std::string path = dir.path() + "/log.txt";
  add_log_file(path);
  {
    ByteProgress progress("reading test bytes", 4'000'000'000);
    ThreadPool pool(2);
    pool.parallel_for(1000, 1, [&](size_t begin, size_t end) {
      for (size_t i = begin; i < end; ++i) progress.add(4'000'000);
    });
  }  // the destructor finishes it
  std::ifstream file(path);
  std::stringstream text;
  text << file.rdbuf();
  EXPECT_NE(text.str().find("reading test bytes: 4.00 GB in "), std::string::npos) << text.str();
}

}  // namespace
}  // namespace ernie
