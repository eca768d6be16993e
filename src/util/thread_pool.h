// A persistent pool of worker threads for data-parallel loops. Threads start once, at
// construction; the step loop never starts a thread. The calling thread takes part in
// every loop, so a pool of N threads has N-1 workers.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

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
  void parallel_for(size_t n, size_t grain, const std::function<void(size_t, size_t)>& body);

 private:
  void worker_loop();
  void run_chunks();

  std::vector<std::thread> workers_;
  std::mutex mutex_;
  std::condition_variable work_ready_;
  std::condition_variable work_done_;
  // The current loop, valid while busy_workers_ > 0 or the caller is inside parallel_for.
  const std::function<void(size_t, size_t)>* body_ = nullptr;
  size_t total_ = 0;
  size_t grain_ = 1;
  size_t next_chunk_ = 0;  // guarded by mutex_
  size_t generation_ = 0;
  size_t busy_workers_ = 0;
  std::exception_ptr first_error_;
  bool stopping_ = false;
};

}  // namespace ernie
