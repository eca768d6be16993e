// The forward pass is the CPU engine's counterpart of a captured CUDA graph: once it has
// seen a batch shape (token count, sequences, context lengths), running that shape again
// allocates nothing and starts no thread. This binary replaces the global operator new
// to count allocations while a flag is set, so it runs in its own executable.
#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <new>
#include <thread>

#include "model/ernie_model.h"
#include "support/test_support.h"

namespace {
std::atomic<bool> counting{false};
std::atomic<int64_t> allocations{0};
}  // namespace

// GCC cannot see that these replace the global pair, hence its mismatch warning.
#pragma GCC diagnostic ignored "-Wmismatched-new-delete"
void* operator new(size_t size) {
  if (counting.load(std::memory_order_relaxed)) allocations.fetch_add(1, std::memory_order_relaxed);
  if (void* p = std::malloc(size == 0 ? 1 : size)) return p;
  throw std::bad_alloc();
}
void operator delete(void* p) noexcept { std::free(p); }
void operator delete(void* p, size_t) noexcept { std::free(p); }

namespace ernie {
namespace {

// Threads of this process, from /proc: the pool must not start any during a step.
int thread_count() {
  const std::string status = testing::read_file("/proc/self/status");
  const size_t at = status.find("Threads:");
  return std::atoi(status.c_str() + at + 8);
}

// Two sequences: a prompt prefill of 20 and 7 tokens, then 12 decode steps of both.
void run_workload(ErnieModel& model, KvCache& a, KvCache& b, ForwardBatch& batch) {
  batch.tokens.assign(27, 5);
  batch.sequences = {{&a, 0, 0, 20}, {&b, 0, 20, 7}};
  batch.logit_rows = {19, 26};
  model.forward(batch);
  for (int step = 0; step < 12; ++step) {
    batch.tokens.assign(2, 9 + step);
    batch.sequences = {{&a, 20 + step, 0, 1}, {&b, 7 + step, 1, 1}};
    batch.logit_rows = {0, 1};
    model.forward(batch);
  }
}

class NoAllocationTest : public ::testing::TestWithParam<std::string> {};

TEST_P(NoAllocationTest, ARepeatedBatchShapeAllocatesNothingAndStartsNoThread) {
  ThreadPool pool(2);
  const std::string quantization = GetParam();
  const ModelConfig config = load_model_config(testing::golden_model_dir("tiny-moe"));
  auto model = ErnieModel::load(testing::golden_model_dir("tiny-moe"), pool, nullptr,
                                parse_quantization(quantization, config));
  ForwardBatch batch;
  batch.tokens.reserve(64);
  batch.sequences.reserve(4);
  batch.logit_rows.reserve(4);
  {
    auto a = model->new_kv_cache(), b = model->new_kv_cache();
    run_workload(*model, *a, *b, batch);  // plans the buffers
  }
  // The caches of the measured run are made (and their blocks reserved) beforehand, as
  // the engine's block pool is.
  auto a = model->new_kv_cache(), b = model->new_kv_cache();
  a->reserve(64);
  b->reserve(64);
  const int threads_before = thread_count();
  allocations = 0;
  counting = true;
  run_workload(*model, *a, *b, batch);
  counting = false;
  EXPECT_EQ(allocations.load(), 0) << "allocations during a repeated workload (" << quantization << ")";
  EXPECT_EQ(thread_count(), threads_before);

  // The counter is live: an allocation while counting is seen (so 0 above means 0).
  counting = true;
  auto* probe = new std::vector<int>(10);
  counting = false;
  delete probe;
  EXPECT_GE(allocations.load(), 1);
}

INSTANTIATE_TEST_SUITE_P(Formats, NoAllocationTest, ::testing::Values("", "wint8", "wint4", "block_wise_fp8"),
                         [](const auto& test_info) {
                           return test_info.param.empty() ? std::string("bf16") : test_info.param;
                         });

}  // namespace
}  // namespace ernie
