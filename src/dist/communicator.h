// The collective operations that tie the ranks holding one model's shards together
// (tensor and expert parallelism, docs/parallelism.md). The model sees only this
// interface; MpiCommunicator (dist/mpi_communicator.h) is the real one, and a model
// built without a communicator runs whole in one process.
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>

namespace ernie {

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;
  // Every rank's `data` becomes the element-wise sum over the ranks.
  virtual void all_reduce_sum(float* data, size_t count) = 0;
  // `root` receives every rank's `counts[r]` floats one after another (rank order) in
  // `out`; the other ranks' `out` is not touched.
  virtual void gather(const float* data, std::span<const int> counts, float* out, int root) = 0;
  // `root`'s bytes to every rank.
  virtual void broadcast(void* data, size_t bytes, int root) = 0;
  // Every rank's `bytes` bytes to every rank: out holds size() * bytes, rank order.
  virtual void all_gather_bytes(const void* data, size_t bytes, void* out) = 0;
  // Every rank's `counts[rank()]` floats to every rank: out holds them all, rank order.
  virtual void all_gather(const float* data, std::span<const int> counts, float* out) = 0;
  // Personalised exchange: `send_bytes[r]` bytes (consecutive in `send`, rank order) go to
  // rank r, and `receive_bytes[r]` come from it into `receive` (expert parallelism's
  // dispatch and combine).
  virtual void all_to_all(const void* send, std::span<const int> send_bytes, void* receive,
                          std::span<const int> receive_bytes) = 0;
  // Bytes moved by all_reduce_sum and gather so far, and the seconds they took (for the
  // communication share of a step).
  virtual uint64_t bytes_communicated() const = 0;
  virtual double seconds_communicating() const = 0;
};

}  // namespace ernie
