// The messages a prefill instance reads from the network (prefill/decode
// disaggregation): any bytes, cut into frames, through the task, status and outcome
// decoders. They must throw ernie::Error or succeed, never crash or read out of bounds.
#include <cstddef>
#include <cstdint>

#include "disagg/pd_protocol.h"
#include "util/error.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  // Frames are separated by 0xff bytes, so the fuzzer controls their number and sizes.
  zmq::multipart_t message;
  size_t begin = 0;
  for (size_t i = 0; i <= size; ++i) {
    if (i == size || data[i] == 0xff) {
      message.addmem(data + begin, i - begin);
      begin = i + 1;
    }
  }
  for (int kind = 0; kind < 3; ++kind) {
    zmq::multipart_t copy = message.clone();
    try {
      if (kind == 0) ernie::disagg::decode_task(copy);
      if (kind == 1) ernie::disagg::decode_status(copy);
      if (kind == 2) ernie::disagg::decode_outcome(copy);
    } catch (const ernie::Error&) {
    }
  }
  return 0;
}
