#include "util/thread_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <vector>

namespace ernie {
namespace {

TEST(ThreadPoolTest, CoversEveryIndexExactlyOnce) {
  ThreadPool pool(3);
  EXPECT_EQ(pool.num_threads(), 3u);
  for (size_t n : {0u, 1u, 2u, 7u, 1000u}) {
    for (size_t grain : {0u, 1u, 5u}) {
      std::vector<std::atomic<int>> hits(n);
      pool.parallel_for(n, grain, [&](size_t begin, size_t end) {
        EXPECT_LT(begin, end);
        EXPECT_LE(end, n);
        if (grain > 0) {
          EXPECT_LE(end - begin, grain);
        }
        for (size_t i = begin; i < end; ++i) hits[i]++;
      });
      for (size_t i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 1) << "n=" << n << " grain=" << grain << " i=" << i;
    }
  }
}

TEST(ThreadPoolTest, ManyLoopsInARowAllComplete) {
  ThreadPool pool(2);
  std::atomic<long> total{0};
  for (int round = 0; round < 2000; ++round)
    pool.parallel_for(16, 1, [&](size_t begin, size_t end) { total += static_cast<long>(end - begin); });
  EXPECT_EQ(total.load(), 2000 * 16);
}

TEST(ThreadPoolTest, RethrowsTheBodysException) {
  ThreadPool pool(2);
  EXPECT_THROW(pool.parallel_for(100, 1,
                                 [](size_t begin, size_t) {
                                   if (begin == 42) throw std::runtime_error("boom");
                                 }),
               std::runtime_error);
  // The pool still works afterwards.
  std::atomic<int> count{0};
  pool.parallel_for(10, 1, [&](size_t begin, size_t end) { count += static_cast<int>(end - begin); });
  EXPECT_EQ(count.load(), 10);
}

// Workers that went to sleep after kSpinSeconds idle wake for the next loop, and a pool
// with more threads than cores (here 4 on 2) still finishes every loop: waiting threads
// yield their core instead of spinning through the time slice of the thread they wait for.
TEST(ThreadPoolTest, WakesSleepingWorkersAndSurvivesOversubscription) {
  ThreadPool pool(4);
  std::atomic<long> total{0};
  for (int round = 0; round < 3; ++round) {
    std::this_thread::sleep_for(std::chrono::duration<double>(ThreadPool::kSpinSeconds * 5));
    pool.parallel_for(64, 1, [&](size_t begin, size_t end) { total += static_cast<long>(end - begin); });
  }
  for (int round = 0; round < 500; ++round)
    pool.parallel_for(8, 1, [&](size_t begin, size_t end) { total += static_cast<long>(end - begin); });
  EXPECT_EQ(total.load(), 3 * 64 + 500 * 8);
}

// Workers may sleep through loops and wake holding an old one's ticket: a chunk must
// only ever run inside its own loop, once. Four threads on a small machine, loops of
// varying sizes back to back, so late workers are common.
TEST(ThreadPoolTest, AChunkRunsOnlyInsideItsOwnLoop) {
  ThreadPool pool(4);
  std::atomic<int> current_loop{-1};
  std::atomic<int> strays{0};
  std::vector<std::atomic<int>> hits(64);
  for (int loop = 0; loop < 100000; ++loop) {
    const size_t n = 1 + static_cast<size_t>(loop * 7) % 64;
    for (size_t i = 0; i < n; ++i) hits[i].store(0);
    current_loop.store(loop);
    pool.parallel_for(n, 1 + loop % 3, [&, loop](size_t begin, size_t end) {
      if (current_loop.load() != loop) strays++;
      for (size_t i = begin; i < end; ++i) hits[i]++;
    });
    current_loop.store(-1);
    for (size_t i = 0; i < n; ++i) ASSERT_EQ(hits[i].load(), 1) << "loop " << loop << " index " << i;
  }
  EXPECT_EQ(strays.load(), 0);
}

TEST(ThreadPoolTest, StreamsCoverEveryIndexExactlyOnce) {
  for (size_t threads : {1u, 2u, 3u}) {
    ThreadPool pool(threads);
    for (size_t n : {0u, 1u, 2u, 7u, 1000u, 4097u}) {
      for (size_t unit : {0u, 1u, 4u}) {
        std::vector<std::atomic<int>> hits(n);
        pool.parallel_streams(n, unit, [&](size_t begin, size_t end) {
          EXPECT_LT(begin, end);
          EXPECT_LE(end, n);
          for (size_t i = begin; i < end; ++i) hits[i]++;
        });
        for (size_t i = 0; i < n; ++i)
          ASSERT_EQ(hits[i].load(), 1) << "threads=" << threads << " n=" << n << " unit=" << unit << " i=" << i;
      }
    }
  }
}

// A thread slowed down on its share gets help: the other, done with its own, takes
// half of what is left from the back of it, again and again, while the owner's pieces
// go front to back.
// Indices of the first share cost 500 us each and the rest nothing, so without help the
// loop would last as long as one thread doing the whole first share.
TEST(ThreadPoolTest, AFinishedStreamTakesTheBackOfASlowOne) {
  ThreadPool pool(2);
  constexpr size_t kN = 400, kUnit = 2;
  struct Piece {
    std::thread::id thread;
    size_t begin, end;
  };
  std::mutex mutex;
  std::vector<Piece> pieces;
  pool.parallel_streams(kN, kUnit, [&](size_t begin, size_t end) {
    for (size_t i = begin; i < end; ++i)
      if (i < kN / 2) std::this_thread::sleep_for(std::chrono::microseconds(500));
    std::lock_guard<std::mutex> lock(mutex);
    pieces.push_back({std::this_thread::get_id(), begin, end});
  });
  std::vector<int> hits(kN);
  std::thread::id owner;  // the thread that ran index 0: the first share's
  for (const Piece& piece : pieces) {
    for (size_t i = piece.begin; i < piece.end; ++i) hits[i]++;
    if (piece.begin == 0) owner = piece.thread;
  }
  for (size_t i = 0; i < kN; ++i) ASSERT_EQ(hits[i], 1) << i;
  size_t helped = 0, helper_pieces = 0, owner_next = 0;
  for (const Piece& piece : pieces) {
    if (piece.begin >= kN / 2) continue;
    if (piece.thread == owner) {
      EXPECT_EQ(piece.begin, owner_next) << "the owner's pieces run front to back";
      owner_next = piece.end;
    } else {
      helped += piece.end - piece.begin;
      ++helper_pieces;
    }
  }
  // Halves of what is left: a handful of long runs (about log2 of the share), where
  // unit-long pieces would be dozens.
  EXPECT_LE(helper_pieces, 12u);
  // Both threads progress through the first share at about one index per 500 us, so
  // the helper takes about half of it; a quarter allows for a late start.
  EXPECT_GE(helped, kN / 8);
}

}  // namespace
}  // namespace ernie
