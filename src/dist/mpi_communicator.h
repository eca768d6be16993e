// Communicator over MPI (Open MPI from Debian): one process per rank, on one machine or
// many. MPI is initialised with MPI_THREAD_SERIALIZED: only the thread that runs the
// forward pass (the engine thread on rank 0, the main thread elsewhere) calls it.
#pragma once

#include <memory>
#include <string>

#include "dist/communicator.h"

namespace ernie {

// Whether this process was started by mpirun (or another MPI launcher) as one of
// several ranks.
bool launched_by_mpi();
// This process's rank and the world size from the launcher's environment, before MPI
// is initialised (1 rank when not launched by MPI).
int mpi_world_size_from_environment();
int mpi_rank_from_environment();

class MpiCommunicator final : public Communicator {
 public:
  // Initialises MPI (once per process) over MPI_COMM_WORLD; finalises it when destroyed.
  MpiCommunicator();
  ~MpiCommunicator() override;
  MpiCommunicator(const MpiCommunicator&) = delete;
  MpiCommunicator& operator=(const MpiCommunicator&) = delete;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  void all_reduce_sum(float* data, size_t count) override;
  void gather(const float* data, std::span<const int> counts, float* out, int root) override;
  void broadcast(void* data, size_t bytes, int root) override;
  void all_gather_bytes(const void* data, size_t bytes, void* out) override;
  void all_gather(const float* data, std::span<const int> counts, float* out) override;
  void all_to_all(const void* send, std::span<const int> send_bytes, void* receive,
                  std::span<const int> receive_bytes) override;
  uint64_t bytes_communicated() const override { return bytes_; }
  double seconds_communicating() const override { return seconds_; }
  // This rank's host name, for messages.
  const std::string& host() const { return host_; }

 private:
  int rank_ = 0;
  int size_ = 1;
  std::string host_;
  uint64_t bytes_ = 0;
  double seconds_ = 0;
};

}  // namespace ernie
