// A persistent pool of worker threads for data-parallel loops. Threads start once, at
// construction; the step loop never starts a thread. The calling thread takes part in
// every loop, so a pool of N threads has N-1 workers.
//
// A forward pass runs a few hundred loops of tens of microseconds each, so handing out
// work must cost far less than a futex wake-up: idle workers spin on the loop counter for
// a short while (kSpinSeconds) before they sleep, a chunk is claimed with one atomic
// compare-and-swap, and the body is passed as a FunctionRef, which never allocates.
// Waiting threads yield their core after a few thousand polls, so an oversubscribed
// machine still progresses.
//
// A loop is over once its chunks are done, whoever did them: the caller never waits for
// a worker that took no chunk. On a machine with more runnable threads than cores (two
// test processes, a busy neighbour) a worker may not run for a whole time slice, and
// waiting for it to check in made every loop that long; now the caller takes its chunks.
#pragma once

#include <atomic>
#include <condition_variable>
#include <cstddef>
#include <cstdint>
#include <exception>
#include <memory>
#include <mutex>
#include <thread>
#include <vector>

#include "util/function_ref.h"

namespace ernie {

class ThreadPool {
 public:
  // `num_threads` = 0 means one per hardware thread.
  explicit ThreadPool(size_t num_threads = 0);
  ~ThreadPool();
  ThreadPool(const ThreadPool&) = delete;
  ThreadPool& operator=(const ThreadPool&) = delete;

  size_t num_threads() const { return workers_.size() + 1; }

  // Calls body(begin, end) over disjoint ranges that cover [0, n), each at most `grain`
  // long (grain 0: split evenly over the threads), and returns when all are done.
  // The first exception thrown by a body is rethrown here after the loop finishes.
  // Not reentrant: a body must not call parallel_for on the same pool.
  void parallel_for(size_t n, size_t grain, FunctionRef<void(size_t, size_t)> body);

  // The same contract as parallel_for, for loops bound by memory bandwidth (decode's
  // weight streams): thread i takes share i of [0, n) front to back, in pieces that
  // shrink as the share runs out (at least `unit` long), so each thread reads one long
  // sequential run; a thread whose share is done then takes half of what another has left
  // (at least `unit`) from its back, again and again until nothing is left. The
  // loop ends when the work does, not when the slowest thread's fixed half would (on a
  // shared machine one core often runs slower than the other for a while).
  void parallel_streams(size_t n, size_t unit, FunctionRef<void(size_t, size_t)> body);

  // Runs body() exactly once on every thread of the pool (the caller included), e.g. to
  // size per-thread buffers before the step loop so it never grows them.
  void run_on_every_thread(FunctionRef<void()> body);

  // How long an idle worker polls for the next loop before it sleeps.
  static constexpr double kSpinSeconds = 0.002;

 private:
  // A ticket holds the loop's generation in its high 32 bits and the next unclaimed
  // chunk in its low 32; kClosed there once the loop's chunks are all done.
  static constexpr uint32_t kClosed = 0xffffffffu;
  static uint32_t generation_of(uint64_t ticket) { return static_cast<uint32_t>(ticket >> 32); }

  void worker_loop();
  bool claim_chunk(uint32_t generation, uint32_t& chunk);
  void run_chunks(uint32_t generation);
  bool wait_for_generation(uint32_t seen);

  std::vector<std::thread> workers_;
  // The current loop. Written by parallel_for before it publishes a new generation; a
  // thread reads them only after it has claimed a chunk, which keeps the loop open until
  // that chunk is done, so they cannot change under it.
  const FunctionRef<void(size_t, size_t)>* body_ = nullptr;
  size_t total_ = 0;
  size_t grain_ = 1;
  uint32_t generation_ = 0;  // the caller's count of loops
  std::atomic<uint64_t> ticket_{0};
  // Stored with release after the previous loop's ticket is closed: a thread that reads a
  // new count is sure to fail to claim from an old ticket (claim_chunk).
  std::atomic<uint32_t> num_chunks_{0};
  std::atomic<uint32_t> done_chunks_{0};
  std::atomic<bool> failed_{false};  // a body threw: the remaining chunks are skipped
  std::atomic<bool> stopping_{false};

  // parallel_streams' shares, one per thread: the unclaimed range of share i is
  // [low 32 bits, high 32 bits) of shares_[i].bounds.
  struct alignas(64) Share {
    std::atomic<uint64_t> bounds{0};
  };
  std::unique_ptr<Share[]> shares_;

  std::mutex mutex_;  // guards sleeping_, first_error_ and the sleep/wake handshake
  std::condition_variable work_ready_;
  size_t sleeping_ = 0;
  std::exception_ptr first_error_;
};

}  // namespace ernie
