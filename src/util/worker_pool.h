// A few threads that run posted tasks in order, with a bounded queue. The HTTP server
// hands them everything a request needs beyond IO (JSON parsing, chat templates,
// tokenizing), so a slow or hostile request never holds up the IO thread.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>
#include <vector>

namespace ernie {

class WorkerPool {
 public:
  // `threads` >= 1 workers; at most `max_queued` tasks wait (running ones not counted).
  WorkerPool(size_t threads, size_t max_queued);
  // Drops the tasks still queued (destroying them unrun) and joins the workers after
  // the tasks they are running.
  ~WorkerPool();
  WorkerPool(const WorkerPool&) = delete;
  WorkerPool& operator=(const WorkerPool&) = delete;

  // Queues `task`; false (and `task` untouched) when the queue is full or the pool is
  // shutting down. A task's exceptions are caught and logged.
  bool try_post(std::function<void()>& task);
  size_t queued() const;

 private:
  void work();

  const size_t max_queued_;
  mutable std::mutex mutex_;
  std::condition_variable ready_;
  std::deque<std::function<void()>> queue_;
  bool stopping_ = false;
  std::vector<std::thread> threads_;
};

}  // namespace ernie
