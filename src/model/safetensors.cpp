#include "model/safetensors.h"

#include <algorithm>
#include <limits>
#include <set>

#include <nlohmann/json.hpp>

#include "util/error.h"

namespace ernie {
namespace {

using nlohmann::json;

// Real headers nest three levels deep (root, tensor entry, shape list). A cap keeps
// adversarial nesting from costing time or memory.
constexpr int kMaxJsonDepth = 8;

uint64_t read_u64_le(const uint8_t* bytes) {
  uint64_t value = 0;
  for (int i = 7; i >= 0; --i) value = (value << 8) | bytes[i];
  return value;
}

json parse_header_json(std::string_view text, const std::string& source) {
  std::set<std::string> top_level_names;
  // The callback rejects deep nesting and duplicate top-level names (which plain
  // parsing would silently collapse to the last one).
  auto check = [&](int depth, json::parse_event_t event, json& parsed) {
    if (depth > kMaxJsonDepth) fail(source, ": safetensors header nests deeper than ", kMaxJsonDepth, " levels");
    if (event == json::parse_event_t::key && depth == 1) {
      const std::string& name = parsed.get_ref<const std::string&>();
      if (!top_level_names.insert(name).second) fail(source, ": tensor \"", name, "\" appears twice in the header");
    }
    return true;
  };
  try {
    return json::parse(text.begin(), text.end(), check);
  } catch (const json::exception& error) {
    fail(source, ": safetensors header is not valid JSON (", error.what(), ")");
  }
}

uint64_t json_to_u64(const json& value, const std::string& source, const std::string& what) {
  if (!value.is_number_unsigned()) fail(source, ": ", what, " must be a non-negative integer, got ", value.dump());
  return value.get<uint64_t>();
}

TensorInfo parse_tensor_entry(const std::string& name, const json& entry, uint64_t data_start, uint64_t data_size,
                              const std::string& source) {
  const std::string where = "tensor \"" + name + "\"";
  if (!entry.is_object()) fail(source, ": ", where, " must be an object with dtype, shape and data_offsets");
  for (const auto& [key, value] : entry.items()) {
    if (key != "dtype" && key != "shape" && key != "data_offsets")
      fail(source, ": ", where, " has an unknown field \"", key, "\" (expected dtype, shape, data_offsets)");
  }
  if (!entry.contains("dtype") || !entry.at("dtype").is_string())
    fail(source, ": ", where, " has no string \"dtype\"");
  if (!entry.contains("shape") || !entry.at("shape").is_array())
    fail(source, ": ", where, " has no \"shape\" list");
  if (!entry.contains("data_offsets") || !entry.at("data_offsets").is_array() || entry.at("data_offsets").size() != 2)
    fail(source, ": ", where, " needs \"data_offsets\" as [begin, end]");

  TensorInfo tensor;
  tensor.name = name;
  try {
    tensor.dtype = parse_safetensors_dtype(entry.at("dtype").get<std::string>());
  } catch (const Error& error) {
    fail(source, ": ", where, ": ", error.what());
  }
  // Multiply with overflow checks: the element count must fit and match the byte range.
  uint64_t elements = 1;
  for (const json& dim_json : entry.at("shape")) {
    const uint64_t dim = json_to_u64(dim_json, source, where + " shape entry");
    if (dim > static_cast<uint64_t>(std::numeric_limits<int64_t>::max()) ||
        (dim != 0 && elements > std::numeric_limits<uint64_t>::max() / dim))
      fail(source, ": ", where, " shape ", entry.at("shape").dump(), " overflows");
    elements *= dim;
    tensor.shape.push_back(static_cast<int64_t>(dim));
  }
  const uint64_t begin = json_to_u64(entry.at("data_offsets").at(0), source, where + " data_offsets[0]");
  const uint64_t end = json_to_u64(entry.at("data_offsets").at(1), source, where + " data_offsets[1]");
  if (begin > end) fail(source, ": ", where, " data_offsets [", begin, ", ", end, "] are reversed");
  if (end > data_size)
    fail(source, ": ", where, " data_offsets end ", end, " lies beyond the data area of ", data_size,
         " bytes (file truncated?)");
  const uint64_t element_size = dtype_size(tensor.dtype);
  if (elements > std::numeric_limits<uint64_t>::max() / element_size || elements * element_size != end - begin)
    fail(source, ": ", where, " shape ", shape_to_string(tensor.shape), " ", safetensors_dtype_name(tensor.dtype),
         " needs ", elements, " x ", element_size, " bytes but data_offsets span ", end - begin);
  tensor.offset = data_start + begin;
  tensor.size = end - begin;
  return tensor;
}

}  // namespace

int64_t TensorInfo::num_elements() const {
  int64_t count = 1;
  for (int64_t dim : shape) count *= dim;
  return count;
}

std::string shape_to_string(const std::vector<int64_t>& shape) {
  std::string text = "[";
  for (size_t i = 0; i < shape.size(); ++i) text += (i ? ", " : "") + std::to_string(shape[i]);
  return text + "]";
}

SafetensorsHeader parse_safetensors_header(std::span<const uint8_t> file_bytes, const std::string& source) {
  if (file_bytes.size() < 8)
    fail(source, ": file is ", file_bytes.size(), " bytes, too short for a safetensors header (at least 8)");
  const uint64_t header_size = read_u64_le(file_bytes.data());
  if (header_size > kMaxSafetensorsHeaderBytes)
    fail(source, ": header length ", header_size, " exceeds the ", kMaxSafetensorsHeaderBytes, "-byte limit");
  if (header_size > file_bytes.size() - 8)
    fail(source, ": header length ", header_size, " exceeds the file's remaining ", file_bytes.size() - 8,
         " bytes (file truncated?)");
  const uint64_t data_start = 8 + header_size;
  const uint64_t data_size = file_bytes.size() - data_start;
  const std::string_view text(reinterpret_cast<const char*>(file_bytes.data() + 8), header_size);

  const json root = parse_header_json(text, source);
  if (!root.is_object()) fail(source, ": safetensors header must be a JSON object");

  SafetensorsHeader header;
  for (const auto& [name, entry] : root.items()) {
    if (name == "__metadata__") {
      if (!entry.is_object()) fail(source, ": __metadata__ must be an object of strings");
      for (const auto& [key, value] : entry.items()) {
        if (!value.is_string()) fail(source, ": __metadata__ value of \"", key, "\" must be a string");
        header.metadata[key] = value.get<std::string>();
      }
      continue;
    }
    header.tensors.push_back(parse_tensor_entry(name, entry, data_start, data_size, source));
  }
  std::sort(header.tensors.begin(), header.tensors.end(),
            [](const TensorInfo& a, const TensorInfo& b) { return a.offset < b.offset; });
  for (size_t i = 1; i < header.tensors.size(); ++i) {
    const TensorInfo& before = header.tensors[i - 1];
    const TensorInfo& after = header.tensors[i];
    if (after.offset < before.offset + before.size)
      fail(source, ": tensors \"", before.name, "\" and \"", after.name, "\" overlap in the file");
  }
  return header;
}

SafetensorsFile::SafetensorsFile(const std::string& path)
    : file_(path), header_(parse_safetensors_header(file_.bytes(), path)) {}

}  // namespace ernie
