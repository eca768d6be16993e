#include "util/base64.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include <string>

#include "support/test_support.h"

namespace ernie {
namespace {

std::string as_text(const std::vector<uint8_t>& bytes) { return std::string(bytes.begin(), bytes.end()); }

TEST(Base64, DecodesRfc4648Vectors) {
  // RFC 4648 §10.
  EXPECT_EQ(as_text(decode_base64("", 100)), "");
  EXPECT_EQ(as_text(decode_base64("Zg==", 100)), "f");
  EXPECT_EQ(as_text(decode_base64("Zm8=", 100)), "fo");
  EXPECT_EQ(as_text(decode_base64("Zm9v", 100)), "foo");
  EXPECT_EQ(as_text(decode_base64("Zm9vYg==", 100)), "foob");
  EXPECT_EQ(as_text(decode_base64("Zm9vYmE=", 100)), "fooba");
  EXPECT_EQ(as_text(decode_base64("Zm9vYmFy", 100)), "foobar");
  EXPECT_EQ(as_text(decode_base64("Zm9vYg", 100)), "foob");  // padding optional
  EXPECT_EQ(decode_base64("//+A", 100), (std::vector<uint8_t>{0xff, 0xff, 0x80}));
}

TEST(Base64, RefusesBadInputAndTooMuch) {
  EXPECT_THAT(testing::error_message([] { decode_base64("Zm9v!A", 100); }), ::testing::HasSubstr("offset 4"));
  EXPECT_THAT(testing::error_message([] { decode_base64("Zm9vY", 100); }), ::testing::HasSubstr("truncated"));
  EXPECT_THAT(testing::error_message([] { decode_base64("Zm9vYmFy", 5); }), ::testing::HasSubstr("6 bytes; the limit is 5"));
}

}  // namespace
}  // namespace ernie
