#include "util/thread_pool.h"

#include <algorithm>
#include <chrono>

#if defined(__x86_64__)
#include <immintrin.h>
#endif

namespace ernie {
namespace {

inline void cpu_relax() {
#if defined(__x86_64__)
  _mm_pause();
#elif defined(__aarch64__)
  asm volatile("yield");
#endif
}

// Polls after which a waiting thread also yields its core: when the machine has more
// runnable threads than cores, the thread being waited for may need this one's.
constexpr int kPollsBeforeYield = 2000;

inline void wait_a_little(int polls) {
  if (polls < kPollsBeforeYield) cpu_relax();
  else std::this_thread::yield();
}

}  // namespace

ThreadPool::ThreadPool(size_t num_threads) {
  if (num_threads == 0) num_threads = std::max(1u, std::thread::hardware_concurrency());
  workers_.reserve(num_threads - 1);
  for (size_t i = 1; i < num_threads; ++i) workers_.emplace_back([this] { worker_loop(); });
}

ThreadPool::~ThreadPool() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stopping_.store(true);
  }
  work_ready_.notify_all();
  for (auto& worker : workers_) worker.join();
}

void ThreadPool::run_chunks() {
  for (;;) {
    const size_t begin = next_chunk_.fetch_add(grain_, std::memory_order_relaxed);
    if (begin >= total_) return;
    const size_t end = std::min(total_, begin + grain_);
    try {
      (*body_)(begin, end);
    } catch (...) {
      std::lock_guard<std::mutex> lock(mutex_);
      if (!first_error_) first_error_ = std::current_exception();
      next_chunk_.store(total_, std::memory_order_relaxed);  // stop handing out work
    }
  }
}

// Returns false when the pool is stopping.
bool ThreadPool::wait_for_generation(uint64_t seen) {
  const auto spin_until = std::chrono::steady_clock::now() + std::chrono::duration<double>(kSpinSeconds);
  for (int polls = 0; generation_.load(std::memory_order_acquire) == seen; ++polls) {
    if (stopping_.load(std::memory_order_relaxed)) return false;
    wait_a_little(polls);
    if (polls % 256 == 255 && std::chrono::steady_clock::now() > spin_until) {
      std::unique_lock<std::mutex> lock(mutex_);
      ++sleeping_;
      work_ready_.wait(lock, [&] { return stopping_.load() || generation_.load() != seen; });
      --sleeping_;
    }
  }
  return !stopping_.load();
}

void ThreadPool::worker_loop() {
  uint64_t seen = 0;
  while (wait_for_generation(seen)) {
    // Every worker finishes every generation before the next can start, so the one it
    // sees now is exactly seen + 1.
    seen = generation_.load(std::memory_order_acquire);
    run_chunks();
    unfinished_workers_.fetch_sub(1, std::memory_order_acq_rel);
  }
}

void ThreadPool::run_on_every_thread(FunctionRef<void()> body) {
  const size_t threads = num_threads();
  std::atomic<size_t> arrived{0};
  parallel_for(threads, 1, [&](size_t, size_t) {
    body();
    // Hold this thread until every thread has taken its chunk, so none takes two.
    arrived.fetch_add(1);
    for (int polls = 0; arrived.load() < threads; ++polls) wait_a_little(polls);
  });
}

void ThreadPool::parallel_for(size_t n, size_t grain, FunctionRef<void(size_t, size_t)> body) {
  if (n == 0) return;
  if (grain == 0) grain = (n + num_threads() - 1) / num_threads();
  if (workers_.empty() || n <= grain) {
    body(0, n);
    return;
  }
  body_ = &body;
  total_ = n;
  grain_ = grain;
  first_error_ = nullptr;
  next_chunk_.store(0, std::memory_order_relaxed);
  unfinished_workers_.store(workers_.size(), std::memory_order_relaxed);
  bool wake = false;
  {
    // Publishing under the mutex pairs with a worker's check before it sleeps, so no
    // wake-up is lost.
    std::lock_guard<std::mutex> lock(mutex_);
    generation_.fetch_add(1, std::memory_order_release);
    wake = sleeping_ > 0;
  }
  if (wake) work_ready_.notify_all();
  run_chunks();
  // Wait for every worker to leave this generation, so `body` outlives every use.
  for (int polls = 0; unfinished_workers_.load(std::memory_order_acquire) != 0; ++polls) wait_a_little(polls);
  body_ = nullptr;
  std::exception_ptr error;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    error = first_error_;
  }
  if (error) std::rethrow_exception(error);
}

}  // namespace ernie
