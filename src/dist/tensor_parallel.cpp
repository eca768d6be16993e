#include "dist/tensor_parallel.h"

#include <cstring>
#include <vector>

#include "engine/kv_cache_manager.h"
#include "util/error.h"
#include "util/log.h"

namespace ernie {
namespace {

// A step plan on the wire: a fixed header (broadcast first, so every rank knows how many
// bytes follow), then the arrays.
struct PlanHeader {
  int32_t kind = 0;  // kForward or kStop
  int32_t tokens = 0;
  int32_t sequences = 0;
  int32_t logit_rows = 0;
  int64_t payload_bytes = 0;
};
constexpr int32_t kForward = 1;
constexpr int32_t kStop = 2;

struct WireSequence {
  int64_t start_position;
  int32_t first_token;
  int32_t num_tokens;
  int32_t blocks;
  int32_t padding;
};

template <typename T>
void append(std::vector<uint8_t>& out, const T* values, size_t count) {
  const auto* bytes = reinterpret_cast<const uint8_t*>(values);
  out.insert(out.end(), bytes, bytes + count * sizeof(T));
}

template <typename T>
const uint8_t* take(const uint8_t* in, T* values, size_t count) {
  std::memcpy(values, in, count * sizeof(T));
  return in + count * sizeof(T);
}

}  // namespace

TensorParallelModel::TensorParallelModel(ErnieModel& model, Communicator& communicator)
    : model_(model), communicator_(communicator) {
  if (communicator_.rank() != 0) fail("internal: the engine's model runs on rank 0");
}

TensorParallelModel::~TensorParallelModel() {
  try {
    stop_workers();
  } catch (const std::exception& error) {
    log_warning("tensor parallelism: stopping the other ranks failed: ", error.what());
  }
}

void TensorParallelModel::share_kv_blocks(int num_blocks) {
  communicator_.broadcast(&num_blocks, sizeof num_blocks, 0);
}

void TensorParallelModel::stop_workers() {
  if (stopped_) return;
  stopped_ = true;
  PlanHeader header;
  header.kind = kStop;
  communicator_.broadcast(&header, sizeof header, 0);
}

std::vector<float>& TensorParallelModel::forward(const ForwardBatch& batch) {
  if (!batch.rope_positions.empty() || !batch.input_embeddings.empty())
    fail("internal: tensor parallelism runs text batches only");
  plan_.clear();
  append(plan_, batch.tokens.data(), batch.tokens.size());
  for (const SequenceChunk& chunk : batch.sequences) {
    const auto* paged = dynamic_cast<const PagedKvCache*>(chunk.cache);
    if (paged == nullptr) fail("internal: tensor parallelism needs the engine's paged KV caches");
    const std::vector<BlockId>& table = paged->block_table();
    const WireSequence wire{chunk.start_position, chunk.first_token, chunk.num_tokens, static_cast<int32_t>(table.size()), 0};
    append(plan_, &wire, 1);
    append(plan_, table.data(), table.size());
  }
  append(plan_, batch.logit_rows.data(), batch.logit_rows.size());
  PlanHeader header{kForward, static_cast<int32_t>(batch.tokens.size()), static_cast<int32_t>(batch.sequences.size()),
                    static_cast<int32_t>(batch.logit_rows.size()), static_cast<int64_t>(plan_.size())};
  communicator_.broadcast(&header, sizeof header, 0);
  communicator_.broadcast(plan_.data(), plan_.size(), 0);
  return model_.forward(batch);
}

void run_tensor_parallel_worker(ErnieModel& model, Communicator& communicator, int kv_layers, int block_size) {
  int num_blocks = 0;
  communicator.broadcast(&num_blocks, sizeof num_blocks, 0);
  KvBlockPool pool(kv_layers, model.kv_row_bytes(), block_size, num_blocks);
  std::vector<uint8_t> payload;
  ForwardBatch batch;
  std::vector<std::vector<BlockId>> tables;
  std::vector<PagedKvCache> caches;
  for (;;) {
    PlanHeader header;
    communicator.broadcast(&header, sizeof header, 0);
    if (header.kind == kStop) return;
    if (header.kind != kForward) fail("tensor parallelism: rank ", communicator.rank(), " got an unknown step plan");
    payload.resize(static_cast<size_t>(header.payload_bytes));
    communicator.broadcast(payload.data(), payload.size(), 0);
    const uint8_t* in = payload.data();
    batch.tokens.resize(static_cast<size_t>(header.tokens));
    in = take(in, batch.tokens.data(), batch.tokens.size());
    tables.resize(static_cast<size_t>(header.sequences));
    caches.clear();
    caches.reserve(tables.size());
    batch.sequences.clear();
    for (size_t s = 0; s < tables.size(); ++s) {
      WireSequence wire{};
      in = take(in, &wire, 1);
      tables[s].resize(static_cast<size_t>(wire.blocks));
      in = take(in, tables[s].data(), tables[s].size());
      caches.emplace_back(pool, tables[s]);
      batch.sequences.push_back({&caches.back(), wire.start_position, wire.first_token, wire.num_tokens});
    }
    batch.logit_rows.resize(static_cast<size_t>(header.logit_rows));
    take(in, batch.logit_rows.data(), batch.logit_rows.size());
    model.forward(batch);
  }
}

std::string rank_fingerprint(const ErnieModel& model, const std::string& quantization) {
  const ModelConfig& config = model.config();
  return str_cat("ernie.cpp built ", __DATE__, " ", __TIME__, "; ", config.architecture, " layers ",
                 config.num_hidden_layers, " hidden ", config.hidden_size, " vocab ", config.vocab_size, " heads ",
                 config.num_attention_heads, "/", config.num_key_value_heads, " experts ",
                 config.moe ? config.moe->num_experts : 0, "; quantization ", quantization.empty() ? "none" : quantization,
                 "; ", model.shard().size, " ranks", model.shard().expert_parallel ? " expert-parallel" : "",
                 "; kv row ", model.kv_row_bytes(), " bytes");
}

void check_ranks_agree(Communicator& communicator, const std::string& fingerprint, const std::string& host) {
  // Fixed-size records: fingerprint and host, cut to fit.
  constexpr size_t kRecord = 512, kHost = 128;
  std::vector<char> mine(kRecord + kHost, '\0');
  std::memcpy(mine.data(), fingerprint.data(), std::min(fingerprint.size(), kRecord - 1));
  std::memcpy(mine.data() + kRecord, host.data(), std::min(host.size(), kHost - 1));
  std::vector<char> all(mine.size() * static_cast<size_t>(communicator.size()));
  communicator.all_gather_bytes(mine.data(), mine.size(), all.data());
  const std::string first(all.data());
  for (int r = 1; r < communicator.size(); ++r) {
    const char* record = all.data() + static_cast<size_t>(r) * mine.size();
    if (first != record)
      fail("tensor parallelism: rank ", r, " on ", record + kRecord, " runs \"", record, "\" but rank 0 on ",
           all.data() + kRecord, " runs \"", first, "\"; every rank needs the same binary, model and quantization");
  }
}

}  // namespace ernie
