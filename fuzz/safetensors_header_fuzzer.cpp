// libFuzzer target for the safetensors header parser: any byte string is either a
// valid header or an ernie::Error, never a crash, hang, leak or out-of-bounds read
// (AddressSanitizer and UBSan watch). Every accepted tensor must lie inside the input.
#include <cstdint>
#include <cstdlib>
#include <span>

#include "model/safetensors.h"
#include "util/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  try {
    const ernie::SafetensorsHeader header = ernie::parse_safetensors_header(std::span(data, size), "fuzz");
    for (const ernie::TensorInfo& tensor : header.tensors) {
      if (tensor.offset > size || tensor.size > size - tensor.offset) std::abort();
      if (tensor.size != static_cast<uint64_t>(tensor.num_elements()) * ernie::dtype_size(tensor.dtype)) std::abort();
    }
  } catch (const ernie::Error&) {
    // Refusing bad input is the expected outcome.
  }
  return 0;
}
