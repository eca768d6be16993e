#include "dist/mpi_communicator.h"

#include <mpi.h>

#include <chrono>
#include <cstdlib>
#include <vector>

#include "util/error.h"

namespace ernie {
namespace {

// MPI's counts are ints: larger transfers go in pieces.
constexpr size_t kMaxChunk = size_t{1} << 30;

void check(int code, const char* what) {
  if (code == MPI_SUCCESS) return;
  char message[MPI_MAX_ERROR_STRING];
  int length = 0;
  MPI_Error_string(code, message, &length);
  fail("MPI ", what, " failed: ", std::string(message, static_cast<size_t>(length)));
}

int environment_int(const char* const names[], int fallback) {
  for (const char* const* name = names; *name != nullptr; ++name)
    if (const char* value = std::getenv(*name); value != nullptr && *value != '\0') return std::atoi(value);
  return fallback;
}

constexpr const char* kSizeVariables[] = {"OMPI_COMM_WORLD_SIZE", "PMI_SIZE", "PMIX_SIZE", nullptr};
constexpr const char* kRankVariables[] = {"OMPI_COMM_WORLD_RANK", "PMI_RANK", "PMIX_RANK", nullptr};

// Offsets of consecutive blocks of `counts`.
std::vector<int> displacements_of(std::span<const int> counts) {
  std::vector<int> displacements(counts.size(), 0);
  for (size_t r = 1; r < counts.size(); ++r) displacements[r] = displacements[r - 1] + counts[r - 1];
  return displacements;
}

class Timer {
 public:
  explicit Timer(double& total) : total_(total), start_(std::chrono::steady_clock::now()) {}
  ~Timer() { total_ += std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count(); }

 private:
  double& total_;
  std::chrono::steady_clock::time_point start_;
};

}  // namespace

bool launched_by_mpi() { return mpi_world_size_from_environment() > 1; }
int mpi_world_size_from_environment() { return environment_int(kSizeVariables, 1); }
int mpi_rank_from_environment() { return environment_int(kRankVariables, 0); }

MpiCommunicator::MpiCommunicator() {
  int initialized = 0;
  MPI_Initialized(&initialized);
  if (!initialized) {
    int provided = 0;
    check(MPI_Init_thread(nullptr, nullptr, MPI_THREAD_SERIALIZED, &provided), "initialisation");
    if (provided < MPI_THREAD_SERIALIZED) fail("this MPI library cannot be called from more than one thread");
  }
  // Errors come back as codes (turned into ernie::Error) instead of aborting silently.
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_RETURN);
  MPI_Comm_rank(MPI_COMM_WORLD, &rank_);
  MPI_Comm_size(MPI_COMM_WORLD, &size_);
  char name[MPI_MAX_PROCESSOR_NAME];
  int length = 0;
  MPI_Get_processor_name(name, &length);
  host_.assign(name, static_cast<size_t>(length));
}

MpiCommunicator::~MpiCommunicator() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (!finalized) MPI_Finalize();
}

void MpiCommunicator::all_reduce_sum(float* data, size_t count) {
  const Timer timer(seconds_);
  bytes_ += count * sizeof(float);
  for (size_t done = 0; done < count; done += kMaxChunk) {
    const int piece = static_cast<int>(std::min(kMaxChunk, count - done));
    check(MPI_Allreduce(MPI_IN_PLACE, data + done, piece, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD), "all-reduce");
  }
}

void MpiCommunicator::gather(const float* data, std::span<const int> counts, float* out, int root) {
  const Timer timer(seconds_);
  const std::vector<int> displacements = displacements_of(counts);
  bytes_ += static_cast<uint64_t>(counts[static_cast<size_t>(rank_)]) * sizeof(float);
  check(MPI_Gatherv(data, counts[static_cast<size_t>(rank_)], MPI_FLOAT, out, counts.data(), displacements.data(),
                    MPI_FLOAT, root, MPI_COMM_WORLD),
        "gather");
}

void MpiCommunicator::broadcast(void* data, size_t bytes, int root) {
  auto* bytes_out = static_cast<char*>(data);
  for (size_t done = 0; done < bytes; done += kMaxChunk) {
    const int piece = static_cast<int>(std::min(kMaxChunk, bytes - done));
    check(MPI_Bcast(bytes_out + done, piece, MPI_BYTE, root, MPI_COMM_WORLD), "broadcast");
  }
}

void MpiCommunicator::all_gather(const float* data, std::span<const int> counts, float* out) {
  const Timer timer(seconds_);
  bytes_ += static_cast<uint64_t>(counts[static_cast<size_t>(rank_)]) * sizeof(float);
  const std::vector<int> displacements = displacements_of(counts);
  check(MPI_Allgatherv(data, counts[static_cast<size_t>(rank_)], MPI_FLOAT, out, counts.data(), displacements.data(),
                       MPI_FLOAT, MPI_COMM_WORLD),
        "all-gather");
}

void MpiCommunicator::all_to_all(const void* send, std::span<const int> send_bytes, void* receive,
                                 std::span<const int> receive_bytes) {
  const Timer timer(seconds_);
  for (const int count : send_bytes) bytes_ += static_cast<uint64_t>(count);
  const std::vector<int> send_at = displacements_of(send_bytes), receive_at = displacements_of(receive_bytes);
  check(MPI_Alltoallv(send, send_bytes.data(), send_at.data(), MPI_BYTE, receive, receive_bytes.data(),
                      receive_at.data(), MPI_BYTE, MPI_COMM_WORLD),
        "all-to-all");
}

void MpiCommunicator::all_gather_bytes(const void* data, size_t bytes, void* out) {
  if (bytes > kMaxChunk) fail("internal: all_gather_bytes of ", bytes, " bytes");
  check(MPI_Allgather(data, static_cast<int>(bytes), MPI_BYTE, out, static_cast<int>(bytes), MPI_BYTE, MPI_COMM_WORLD),
        "all-gather");
}

}  // namespace ernie
