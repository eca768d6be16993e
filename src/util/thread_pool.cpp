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

uint64_t pack_bounds(uint64_t front, uint64_t back) { return back << 32 | front; }

// Claims 1/`divisor` of what is left of a share (at least `unit`, at least 1, at most all)
// from its front (or its back).
bool take_from_share(std::atomic<uint64_t>& bounds, size_t unit, uint64_t divisor, bool from_back, size_t& begin,
                     size_t& end) {
  uint64_t current = bounds.load(std::memory_order_acquire);
  for (;;) {
    const uint64_t front = current & 0xffffffffu, back = current >> 32;
    if (front >= back) return false;
    const uint64_t want = std::max<uint64_t>({(back - front) / divisor, unit, 1});
    const uint64_t take = std::min<uint64_t>(want, back - front);
    const uint64_t next = from_back ? pack_bounds(front, back - take) : pack_bounds(front + take, back);
    if (bounds.compare_exchange_weak(current, next, std::memory_order_acq_rel, std::memory_order_acquire)) {
      begin = static_cast<size_t>(from_back ? back - take : front);
      end = begin + static_cast<size_t>(take);
      return true;
    }
  }
}

}  // namespace

ThreadPool::ThreadPool(size_t num_threads) {
  if (num_threads == 0) num_threads = std::max(1u, std::thread::hardware_concurrency());
  shares_ = std::make_unique<Share[]>(num_threads);
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

// Claims the next chunk of loop `generation`, if that loop still has one.
bool ThreadPool::claim_chunk(uint32_t generation, uint32_t& chunk) {
  uint64_t ticket = ticket_.load(std::memory_order_acquire);
  for (;;) {
    const uint32_t next = static_cast<uint32_t>(ticket);
    if (generation_of(ticket) != generation || next == kClosed) return false;
    // A count from the next loop is stored only after this ticket was closed, so the
    // exchange below then fails; with this loop's count it decides.
    if (next >= num_chunks_.load(std::memory_order_acquire)) return false;
    if (ticket_.compare_exchange_weak(ticket, ticket + 1, std::memory_order_acquire, std::memory_order_acquire)) {
      chunk = next;
      return true;
    }
  }
}

void ThreadPool::run_chunks(uint32_t generation) {
  uint32_t chunk = 0;
  while (claim_chunk(generation, chunk)) {
    if (!failed_.load(std::memory_order_relaxed)) {
      const size_t begin = static_cast<size_t>(chunk) * grain_;
      try {
        (*body_)(begin, std::min(total_, begin + grain_));
      } catch (...) {
        std::lock_guard<std::mutex> lock(mutex_);
        if (!first_error_) first_error_ = std::current_exception();
        failed_.store(true, std::memory_order_relaxed);
      }
    }
    done_chunks_.fetch_add(1, std::memory_order_release);
  }
}

// Returns false when the pool is stopping.
bool ThreadPool::wait_for_generation(uint32_t seen) {
  const auto spin_until = std::chrono::steady_clock::now() + std::chrono::duration<double>(kSpinSeconds);
  for (int polls = 0; generation_of(ticket_.load(std::memory_order_acquire)) == seen; ++polls) {
    if (stopping_.load(std::memory_order_relaxed)) return false;
    wait_a_little(polls);
    if (polls % 256 == 255 && std::chrono::steady_clock::now() > spin_until) {
      std::unique_lock<std::mutex> lock(mutex_);
      ++sleeping_;
      work_ready_.wait(lock, [&] { return stopping_.load() || generation_of(ticket_.load()) != seen; });
      --sleeping_;
    }
  }
  return !stopping_.load();
}

void ThreadPool::worker_loop() {
  uint32_t seen = 0;
  while (wait_for_generation(seen)) {
    // A worker that slept through loops joins the newest; the ones it missed were
    // finished without it.
    seen = generation_of(ticket_.load(std::memory_order_acquire));
    run_chunks(seen);
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
  // Chunk numbers live in 32 bits of the ticket.
  grain = std::max(grain, (n + kClosed - 2) / (kClosed - 1));
  if (workers_.empty() || n <= grain) {
    body(0, n);
    return;
  }
  const auto chunks = static_cast<uint32_t>((n + grain - 1) / grain);
  body_ = &body;
  total_ = n;
  grain_ = grain;
  first_error_ = nullptr;
  failed_.store(false, std::memory_order_relaxed);
  done_chunks_.store(0, std::memory_order_relaxed);
  num_chunks_.store(chunks, std::memory_order_release);
  const uint32_t generation = ++generation_;
  bool wake = false;
  {
    // Publishing under the mutex pairs with a worker's check before it sleeps, so no
    // wake-up is lost.
    std::lock_guard<std::mutex> lock(mutex_);
    ticket_.store(static_cast<uint64_t>(generation) << 32, std::memory_order_release);
    wake = sleeping_ > 0;
  }
  if (wake) work_ready_.notify_all();
  run_chunks(generation);
  // Only chunks a worker claimed and has not finished are waited for.
  for (int polls = 0; done_chunks_.load(std::memory_order_acquire) != chunks; ++polls) wait_a_little(polls);
  ticket_.store(static_cast<uint64_t>(generation) << 32 | kClosed, std::memory_order_relaxed);
  body_ = nullptr;
  std::exception_ptr error;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    error = first_error_;
  }
  if (error) std::rethrow_exception(error);
}

void ThreadPool::parallel_streams(size_t n, size_t unit, FunctionRef<void(size_t, size_t)> body) {
  const size_t threads = num_threads();
  unit = std::max<size_t>(unit, 1);
  if (workers_.empty() || n <= unit) {
    if (n > 0) body(0, n);
    return;
  }
  if (n > 0xffffffffu) {  // the bounds live in 32 bits each
    parallel_for(n, 0, body);
    return;
  }
  // Published to the workers by parallel_for's release of the new loop.
  for (size_t i = 0; i < threads; ++i)
    shares_[i].bounds.store(pack_bounds(i * n / threads, (i + 1) * n / threads), std::memory_order_relaxed);
  parallel_for(threads, 1, [&](size_t own, size_t) {
    size_t begin = 0, end = 0;
    // An eighth of what is left at a time: long runs first, and little left in a piece
    // that another thread could no longer help with.
    while (take_from_share(shares_[own].bounds, unit, 8, false, begin, end)) body(begin, end);
    // Then half of what another has left, from its back, again and again: one long run
    // rather than many unit-long ones, each of which would start a cold stream (0.3B at
    // wint4, the decode weight stream alone: unit-long pieces averaged 5-8 per loop,
    // halves 1.5-2, and 2-3% more GB/s over 60 alternating rounds).
    for (size_t k = 1; k < threads; ++k)
      while (take_from_share(shares_[(own + k) % threads].bounds, unit, 2, true, begin, end)) body(begin, end);
  });
}

}  // namespace ernie
