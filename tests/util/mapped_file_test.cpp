#include "util/mapped_file.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "support/test_support.h"
#include "util/error.h"

namespace ernie {
namespace {

TEST(MappedFileTest, MapsTheWholeFile) {
  testing::TempDir temp;
  testing::write_file(temp.file("f"), "hello mapping");
  const MappedFile file(temp.file("f"));
  EXPECT_EQ(std::string(reinterpret_cast<const char*>(file.bytes().data()), file.size()), "hello mapping");
}

TEST(MappedFileTest, EmptyFileHasNoBytes) {
  testing::TempDir temp;
  testing::write_file(temp.file("empty"), "");
  EXPECT_EQ(MappedFile(temp.file("empty")).size(), 0u);
}

TEST(MappedFileTest, ErrorsNameThePath) {
  testing::TempDir temp;
  try {
    MappedFile file(temp.file("missing"));
    FAIL();
  } catch (const Error& error) {
    EXPECT_THAT(error.what(), ::testing::HasSubstr("cannot open " + temp.file("missing")));
  }
  EXPECT_THROW(MappedFile(temp.path()), Error);  // a directory
}

}  // namespace
}  // namespace ernie
