// Reading safetensors files: an 8-byte little-endian header length, a JSON header
// {name: {dtype, shape, data_offsets}, "__metadata__": {...}}, then the tensor bytes.
// The header is untrusted input: parse_safetensors_header validates every field and
// offset against the file size and is fuzzed (fuzz/safetensors_header_fuzzer.cpp).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <span>
#include <string>
#include <vector>

#include "tensor/dtype.h"
#include "util/mapped_file.h"

namespace ernie {

struct TensorInfo {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  uint64_t offset = 0;  // absolute byte offset in the file
  uint64_t size = 0;    // bytes = product(shape) * dtype_size

  int64_t num_elements() const;
};

std::string shape_to_string(const std::vector<int64_t>& shape);

struct SafetensorsHeader {
  std::vector<TensorInfo> tensors;                // in file order of their data
  std::map<std::string, std::string> metadata;    // "__metadata__", e.g. {"format": "pt"}
};

// Headers larger than this are refused (the safetensors format itself caps them at 100 MB).
inline constexpr uint64_t kMaxSafetensorsHeaderBytes = 100ull << 20;

// Parses and validates the header of a whole safetensors file held in `file_bytes`:
// header length, JSON, known dtypes, shapes, byte sizes = shape x dtype size, offsets
// inside the data area and not overlapping, no duplicate names. Throws ernie::Error
// prefixed by `source` for any defect; never reads outside `file_bytes`.
SafetensorsHeader parse_safetensors_header(std::span<const uint8_t> file_bytes, const std::string& source);

// One mapped safetensors file with its validated header.
class SafetensorsFile {
 public:
  explicit SafetensorsFile(const std::string& path);

  const std::string& path() const { return file_.path(); }
  const SafetensorsHeader& header() const { return header_; }
  const uint8_t* data(const TensorInfo& tensor) const { return file_.bytes().data() + tensor.offset; }

 private:
  MappedFile file_;
  SafetensorsHeader header_;
};

}  // namespace ernie
