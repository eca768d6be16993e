#include "model/safetensors.h"

#include <gmock/gmock.h>
#include <gtest/gtest.h>

#include "model/safetensors_writer.h"
#include "support/test_support.h"
#include "util/error.h"

namespace ernie {
namespace {

using ::testing::HasSubstr;

// A safetensors byte image: 8-byte little-endian length, header text, data.
std::vector<uint8_t> image(const std::string& header, size_t data_bytes) {
  std::vector<uint8_t> bytes(8 + header.size() + data_bytes, 0);
  for (int i = 0; i < 8; ++i) bytes[static_cast<size_t>(i)] = static_cast<uint8_t>(header.size() >> (8 * i));
  std::copy(header.begin(), header.end(), bytes.begin() + 8);
  return bytes;
}

std::string header_error_of(const std::vector<uint8_t>& bytes) {
  return testing::error_message([&] { parse_safetensors_header(bytes, "x.safetensors"); });
}

TEST(SafetensorsHeaderTest, ParsesTensorsAndMetadata) {
  const auto bytes = image(
      R"({"__metadata__":{"format":"pt"},"b":{"dtype":"F32","shape":[2],"data_offsets":[4,12]},)"
      R"("a":{"dtype":"BF16","shape":[2],"data_offsets":[0,4]},"z":{"dtype":"F16","shape":[0,3],"data_offsets":[12,12]}})",
      12);
  const SafetensorsHeader header = parse_safetensors_header(bytes, "x");
  ASSERT_EQ(header.tensors.size(), 3u);
  EXPECT_EQ(header.metadata.at("format"), "pt");
  EXPECT_EQ(header.tensors[0].name, "a");  // ordered by offset
  EXPECT_EQ(header.tensors[0].dtype, DType::kBF16);
  const size_t header_end = bytes.size() - 12;
  EXPECT_EQ(header.tensors[0].offset, header_end);
  EXPECT_EQ(header.tensors[1].name, "b");
  EXPECT_EQ(header.tensors[1].offset, header_end + 4);
  EXPECT_EQ(header.tensors[1].size, 8u);
  EXPECT_EQ(header.tensors[2].num_elements(), 0);
}

TEST(SafetensorsHeaderTest, RefusesEveryKindOfDefect) {
  const std::string ok_tensor = R"("t":{"dtype":"F32","shape":[2],"data_offsets":[0,8]})";
  EXPECT_THAT(header_error_of({1, 2, 3}), HasSubstr("too short"));
  auto too_long = image("{}", 0);
  too_long[0] = 200;  // claims 200 header bytes, has 2
  EXPECT_THAT(header_error_of(too_long), HasSubstr("exceeds the file's remaining 2 bytes"));
  auto huge = image("{}", 0);
  huge[7] = 1;
  EXPECT_THAT(header_error_of(huge), HasSubstr("exceeds the 104857600-byte limit"));
  EXPECT_THAT(header_error_of(image("{\"t\":", 0)), HasSubstr("not valid JSON"));
  EXPECT_THAT(header_error_of(image("[1]", 0)), HasSubstr("must be a JSON object"));
  EXPECT_THAT(header_error_of(image(R"({"t":{"dtype":"I64","shape":[1],"data_offsets":[0,8]}})", 8)),
              HasSubstr("unsupported tensor dtype \"I64\""));
  EXPECT_THAT(header_error_of(image(R"({"t":{"dtype":"F32","shape":[3],"data_offsets":[0,8]}})", 8)),
              HasSubstr("shape [3] F32 needs 3 x 4 bytes but data_offsets span 8"));
  EXPECT_THAT(header_error_of(image("{" + ok_tensor + "}", 4)), HasSubstr("beyond the data area of 4 bytes"));
  EXPECT_THAT(header_error_of(image(R"({"t":{"dtype":"F32","shape":[0],"data_offsets":[8,0]}})", 8)),
              HasSubstr("reversed"));
  EXPECT_THAT(header_error_of(image("{" + ok_tensor + R"(,"u":{"dtype":"F32","shape":[1],"data_offsets":[4,8]}})", 8)),
              HasSubstr("overlap"));
  EXPECT_THAT(header_error_of(image("{" + ok_tensor + "," + ok_tensor + "}", 8)), HasSubstr("\"t\" appears twice"));
  EXPECT_THAT(header_error_of(image(R"({"t":{"dtype":"F32","shape":[-2],"data_offsets":[0,8]}})", 8)),
              HasSubstr("non-negative integer"));
  EXPECT_THAT(header_error_of(image(R"({"t":{"dtype":"F32","shape":[2],"data_offsets":[0,8],"x":1}})", 8)),
              HasSubstr("unknown field \"x\""));
  EXPECT_THAT(header_error_of(image(R"({"t":{"dtype":"F32","shape":[4294967296,4294967296,16],"data_offsets":[0,8]}})", 8)),
              HasSubstr("overflows"));
  EXPECT_THAT(header_error_of(image(R"({"__metadata__":{"format":3}})", 0)), HasSubstr("must be a string"));
  EXPECT_THAT(header_error_of(image(std::string(100, '[') + std::string(100, ']'), 0)), HasSubstr("nests deeper"));
  EXPECT_THAT(header_error_of(image(R"({"t":{"dtype":"F32","shape":[2]}})", 8)), HasSubstr("data_offsets"));
}

TEST(SafetensorsFileTest, WriterOutputReadsBackBitExact) {
  testing::TempDir temp;
  std::vector<TensorToWrite> tensors = {{"w", DType::kBF16, {2, 3}, {1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12}},
                                        {"b", DType::kF32, {1}, {0, 0, 128, 63}}};
  write_safetensors(temp.file("m.safetensors"), tensors, {{"format", "pt"}});
  const SafetensorsFile file(temp.file("m.safetensors"));
  ASSERT_EQ(file.header().tensors.size(), 2u);
  const TensorInfo& w = file.header().tensors[0];
  EXPECT_EQ(w.name, "w");
  EXPECT_EQ(w.shape, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(w.offset % 8, 0u) << "data should start 8-byte aligned";
  EXPECT_EQ(std::vector<uint8_t>(file.data(w), file.data(w) + w.size), tensors[0].bytes);
  float one;
  std::memcpy(&one, file.data(file.header().tensors[1]), 4);
  EXPECT_EQ(one, 1.0f);
}

TEST(SafetensorsFileTest, TruncatedFileIsRefusedNamingIt) {
  testing::TempDir temp;
  write_safetensors(temp.file("m.safetensors"), {{"w", DType::kF32, {4}, std::vector<uint8_t>(16, 0)}}, {});
  const std::string bytes = testing::read_file(temp.file("m.safetensors"));
  testing::write_file(temp.file("cut.safetensors"), bytes.substr(0, bytes.size() - 5));
  try {
    SafetensorsFile file(temp.file("cut.safetensors"));
    FAIL() << "expected an error";
  } catch (const Error& error) {
    EXPECT_THAT(error.what(), HasSubstr("cut.safetensors"));
    EXPECT_THAT(error.what(), HasSubstr("file truncated?"));
  }
  EXPECT_THROW(SafetensorsFile(temp.file("absent.safetensors")), Error);
}

}  // namespace
}  // namespace ernie
