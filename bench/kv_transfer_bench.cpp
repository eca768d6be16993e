// KV transfer throughput of prefill/decode disaggregation (issue 19): one 4,096-token
// prompt's keys and values in the ERNIE-4.5-0.3B shape (18 layers, 2 KV heads of 128,
// bf16: 512-byte rows, 75 MB) moved from one block pool to another, layer by layer in
// 512-position runs as a chunked prefill sends them, through the same steps the prefill
// and decode instances take: read_layer_rows into a ZeroMQ message, a PUSH/PULL pair
// over the named transport, write_layer_rows into the destination's blocks. The
// receiving side runs on its own thread, as the decode instance's transfer thread does.
//   build/bench/kv_transfer_bench --benchmark_repetitions=3 --benchmark_report_aggregates_only=true
#include <benchmark/benchmark.h>

#include <numeric>
#include <thread>
#include <zmq.hpp>

#include "engine/kv_block_pool.h"

namespace ernie {
namespace {

constexpr int kLayers = 18;
constexpr size_t kRowBytes = 512;
constexpr int kBlockSize = 64;
constexpr int64_t kPositions = 4096;
constexpr int64_t kRun = 512;
constexpr int kBlocks = static_cast<int>(kPositions / kBlockSize);

std::vector<BlockId> shuffled_table(uint32_t seed) {
  std::vector<BlockId> table(kBlocks);
  std::iota(table.begin(), table.end(), 0);
  for (size_t i = table.size() - 1; i > 0; --i) {
    seed = seed * 1664525u + 1013904223u;
    std::swap(table[i], table[seed % (i + 1)]);
  }
  return table;
}

// Copies only: the memory-bound floor of a transfer.
void BM_GatherScatter(benchmark::State& state) {
  KvBlockPool source(kLayers, kRowBytes, kBlockSize, kBlocks), destination(kLayers, kRowBytes, kBlockSize, kBlocks);
  const std::vector<BlockId> from = shuffled_table(1), to = shuffled_table(2);
  std::vector<uint8_t> buffer(2 * kRun * kRowBytes, 1);
  for (int64_t p = 0; p < kPositions; p += kRun)
    for (int layer = 0; layer < kLayers; ++layer) source.write_layer_rows(from, layer, p, kRun, buffer.data());
  for (auto _ : state)
    for (int64_t p = 0; p < kPositions; p += kRun)
      for (int layer = 0; layer < kLayers; ++layer) {
        source.read_layer_rows(from, layer, p, kRun, buffer.data());
        destination.write_layer_rows(to, layer, p, kRun, buffer.data());
      }
  state.SetBytesProcessed(state.iterations() * kPositions * kLayers * 2 * static_cast<int64_t>(kRowBytes));
}

void transfer_over(benchmark::State& state, const char* endpoint) {
  KvBlockPool source(kLayers, kRowBytes, kBlockSize, kBlocks), destination(kLayers, kRowBytes, kBlockSize, kBlocks);
  const std::vector<BlockId> from = shuffled_table(1), to = shuffled_table(2);
  std::vector<uint8_t> fill(2 * kRun * kRowBytes, 1);
  for (int64_t p = 0; p < kPositions; p += kRun)
    for (int layer = 0; layer < kLayers; ++layer) source.write_layer_rows(from, layer, p, kRun, fill.data());
  zmq::context_t context(1);
  zmq::socket_t push(context, zmq::socket_type::push), pull(context, zmq::socket_type::pull);
  for (zmq::socket_t* socket : {&push, &pull}) {
    socket->set(zmq::sockopt::linger, 0);
    socket->set(zmq::sockopt::sndhwm, 0);
    socket->set(zmq::sockopt::rcvhwm, 0);
  }
  pull.bind(endpoint);
  push.connect(pull.get(zmq::sockopt::last_endpoint));
  const int messages_per_prompt = static_cast<int>(kPositions / kRun) * kLayers;
  for (auto _ : state) {
    std::thread receiver([&] {
      for (int m = 0; m < messages_per_prompt; ++m) {
        zmq::message_t message;
        (void)pull.recv(message);
        const int layer = m % kLayers;
        const int64_t first = (m / kLayers) * kRun;
        destination.write_layer_rows(to, layer, first, kRun, static_cast<const uint8_t*>(message.data()));
      }
    });
    for (int64_t p = 0; p < kPositions; p += kRun)
      for (int layer = 0; layer < kLayers; ++layer) {
        zmq::message_t message(2 * kRun * kRowBytes);
        source.read_layer_rows(from, layer, p, kRun, static_cast<uint8_t*>(message.data()));
        push.send(message, zmq::send_flags::none);
      }
    receiver.join();
  }
  state.SetBytesProcessed(state.iterations() * kPositions * kLayers * 2 * static_cast<int64_t>(kRowBytes));
}

void BM_TransferIpc(benchmark::State& state) { transfer_over(state, "ipc:///tmp/ernie-kv-transfer-bench.ipc"); }
void BM_TransferTcpLoopback(benchmark::State& state) { transfer_over(state, "tcp://127.0.0.1:*"); }

BENCHMARK(BM_GatherScatter)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_TransferIpc)->Unit(benchmark::kMillisecond)->UseRealTime();
BENCHMARK(BM_TransferTcpLoopback)->Unit(benchmark::kMillisecond)->UseRealTime();

}  // namespace
}  // namespace ernie

BENCHMARK_MAIN();
