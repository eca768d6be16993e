#include "util/thread_pool.h"

#include <algorithm>

namespace ernie {

ThreadPool::ThreadPool(size_t num_threads) {
  if (num_threads == 0) num_threads = std::max(1u, std::thread::hardware_concurrency());
  workers_.reserve(num_threads - 1);
  for (size_t i = 1; i < num_threads; ++i) workers_.emplace_back([this] { worker_loop(); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_ = true;
  }
  work_ready_.notify_all();
  for (auto& worker : workers_) worker.join();
}

void ThreadPool::run_chunks() {
  for (;;) {
    size_t begin;
    {
      std::lock_guard<std::mutex> lock(mutex_);
      if (next_chunk_ >= total_) return;
      begin = next_chunk_;
      next_chunk_ = std::min(total_, next_chunk_ + grain_);
    }
    const size_t end = std::min(total_, begin + grain_);
    try {
      (*body_)(begin, end);
    } catch (...) {
      std::lock_guard<std::mutex> lock(mutex_);
      if (!first_error_) first_error_ = std::current_exception();
      next_chunk_ = total_;  // stop handing out work
    }
  }
}

void ThreadPool::worker_loop() {
  size_t seen_generation = 0;
  for (;;) {
    {
      std::unique_lock<std::mutex> lock(mutex_);
      work_ready_.wait(lock, [&] { return stopping_ || generation_ != seen_generation; });
      if (stopping_) return;
      seen_generation = generation_;
      ++busy_workers_;
    }
    run_chunks();
    {
      std::lock_guard<std::mutex> lock(mutex_);
      --busy_workers_;
    }
    work_done_.notify_one();
  }
}

void ThreadPool::parallel_for(size_t n, size_t grain,
                              const std::function<void(size_t, size_t)>& body) {
  if (n == 0) return;
  if (grain == 0) grain = (n + num_threads() - 1) / num_threads();
  if (workers_.empty() || n <= grain) {
    body(0, n);
    return;
  }
  {
    std::lock_guard<std::mutex> lock(mutex_);
    body_ = &body;
    total_ = n;
    grain_ = grain;
    next_chunk_ = 0;
    first_error_ = nullptr;
    ++generation_;
  }
  work_ready_.notify_all();
  run_chunks();
  std::exception_ptr error;
  {
    std::unique_lock<std::mutex> lock(mutex_);
    // Workers that woke late find no chunks left and leave at once; wait for all that
    // entered this generation so `body` outlives every use.
    work_done_.wait(lock, [&] { return busy_workers_ == 0; });
    body_ = nullptr;
    error = first_error_;
  }
  if (error) std::rethrow_exception(error);
}

}  // namespace ernie
