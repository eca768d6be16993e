#include "util/worker_pool.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <future>
#include <thread>

namespace ernie {
namespace {

using namespace std::chrono_literals;

TEST(WorkerPoolTest, RunsEveryTaskAndKeepsOthersGoingWhileOneIsSlow) {
  WorkerPool pool(2, 100);
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  std::function<void()> slow = [released] { released.wait(); };
  ASSERT_TRUE(pool.try_post(slow));
  std::atomic<int> done{0};
  for (int i = 0; i < 20; ++i) {
    std::function<void()> quick = [&done] { done.fetch_add(1); };
    ASSERT_TRUE(pool.try_post(quick));
  }
  for (int i = 0; i < 500 && done.load() < 20; ++i) std::this_thread::sleep_for(2ms);
  EXPECT_EQ(done.load(), 20) << "the second worker takes the quick tasks while the first is busy";
  release.set_value();
}

TEST(WorkerPoolTest, RefusesTasksBeyondItsQueueAndDropsQueuedOnesAtShutdown) {
  std::promise<void> release;
  std::shared_future<void> released = release.get_future().share();
  auto dropped = std::make_shared<int>(0);
  std::thread releaser;
  {
    WorkerPool pool(1, 2);
    std::function<void()> blocker = [released] { released.wait(); };
    ASSERT_TRUE(pool.try_post(blocker));
    while (pool.queued() != 0) std::this_thread::sleep_for(1ms);  // the worker took it
    std::function<void()> first = [dropped] {}, second = [dropped] {}, third = [dropped] {};
    EXPECT_TRUE(pool.try_post(first));
    EXPECT_TRUE(pool.try_post(second));
    EXPECT_FALSE(pool.try_post(third)) << "the queue holds two";
    EXPECT_TRUE(third) << "a refused task is left with the caller";
    third = nullptr;
    EXPECT_EQ(dropped.use_count(), 3);
    releaser = std::thread([&release] {
      std::this_thread::sleep_for(20ms);
      release.set_value();
    });
    // Destroying the pool drops the two queued tasks and waits for the running one.
  }
  releaser.join();
  EXPECT_EQ(dropped.use_count(), 1);
}

TEST(WorkerPoolTest, ATaskThatThrowsDoesNotKillItsWorker) {
  WorkerPool pool(1, 10);
  std::function<void()> thrower = [] { throw std::runtime_error("boom"); };
  ASSERT_TRUE(pool.try_post(thrower));
  std::promise<void> ran;
  std::function<void()> next = [&ran] { ran.set_value(); };
  ASSERT_TRUE(pool.try_post(next));
  EXPECT_EQ(ran.get_future().wait_for(5s), std::future_status::ready);
}

}  // namespace
}  // namespace ernie
