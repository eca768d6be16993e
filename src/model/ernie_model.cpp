#include "model/ernie_model.h"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <numeric>
#include <span>
#include <thread>

#include "kernels/matmul.h"
#include "kernels/matmul_bf16.h"
#include "kernels/ops.h"
#include "kernels/quantize.h"
#include "model/prequantized.h"
#include "model/quantized_cache.h"
#include "util/error.h"
#include "util/log.h"
#include "util/page_in.h"
#include "util/memory_info.h"
#include "util/progress.h"
#include "util/stopwatch.h"

namespace ernie {
namespace {

// Grows `buffer` to at least `count` elements; it never shrinks, so once the largest
// batch has been seen no call allocates.
template <typename T>
T* sized(std::vector<T>& buffer, int64_t count) {
  if (buffer.size() < static_cast<size_t>(count)) buffer.resize(static_cast<size_t>(count));
  return buffer.data();
}

// Each thread's attention working memory.
AttentionScratch& thread_attention_scratch() {
  thread_local AttentionScratch scratch;
  return scratch;
}

// Query tokens per attention work item: enough items for every thread, each long
// enough that a K/V block loaded serves many query rows.
constexpr int32_t kAttentionQueryTile = 64;

// Below this many rows, element-wise work is shorter than handing it out to the pool.
constexpr int64_t kParallelRows = 16;

// body(t0, t1) over [0, n): split over `pool` for prefill-sized n, else on this thread.
void for_rows(ThreadPool& pool, int64_t n, FunctionRef<void(int64_t, int64_t)> body) {
  if (n < kParallelRows) {
    body(0, n);
    return;
  }
  pool.parallel_for(static_cast<size_t>(n), 0, [&](size_t begin, size_t end) {
    body(static_cast<int64_t>(begin), static_cast<int64_t>(end));
  });
}

// Rows [t0, t1) of `input` made by write(a, b) in pieces of a few rows, each rounded for
// bf16 products (MatmulInput::round_while_writing) right after it is written, while it
// is still in L1: a thread's whole share of a prefill is megabytes, and rounding it after
// the fact reads it back from L3.
void write_rows_rounded(MatmulInput& input, int64_t t0, int64_t t1, FunctionRef<void(int64_t, int64_t)> write) {
  constexpr int64_t kPieceFloats = 4096;
  const int64_t piece = std::max<int64_t>(1, kPieceFloats / std::max<int64_t>(1, input.cols()));
  for (int64_t a = t0; a < t1; a += piece) {
    const int64_t b = std::min(t1, a + piece);
    write(a, b);
    input.round_written(a, b);
  }
}

// down [n, H] = MLP(input), with gate and up [n, inner] as working memory (the fused bf16
// path, matmul_swiglu, writes neither) and down_input for the down projection's input.
void mlp_into(ThreadPool& pool, const MlpWeights& mlp, MatmulInput& input, float* gate, float* up,
              MatmulInput& down_input, float* down) {
  const int64_t n = input.n(), inner = mlp.gate.rows;
  if (matmul_swiglu(pool, input, mlp.gate, mlp.up, mlp.down, down_input)) {
    matmul(pool, down_input, mlp.down, down);
    return;
  }
  const WeightMatrix* gate_up[] = {&mlp.gate, &mlp.up};
  float* gate_up_out[] = {gate, up};
  matmul_shared_input(pool, input, gate_up, gate_up_out);
  // silu(gate) · up is down's input, rounded for bf16 products as it is written.
  down_input.reset(gate, n, inner);
  down_input.round_while_writing(mlp.down);
  for_rows(pool, n, [&](int64_t t0, int64_t t1) {
    write_rows_rounded(down_input, t0, t1,
                       [&](int64_t a, int64_t b) { silu_mul(gate + a * inner, up + a * inner, (b - a) * inner); });
  });
  matmul(pool, down_input, mlp.down, down);
}

// Whether all of an MLP's weights are integer (the integer kernels' batches take them).
bool integer_mlp(const MlpWeights& mlp) { return is_integer(mlp.gate) && is_integer(mlp.up) && is_integer(mlp.down); }

// A pool of the calling thread alone, for work that one pool thread runs whole.
ThreadPool& this_thread_pool() {
  thread_local ThreadPool solo(1);
  return solo;
}

}  // namespace

ForwardBatch single_sequence_batch(KvCache& cache, std::span<const int32_t> tokens, int64_t start_position,
                                   bool all_rows) {
  ForwardBatch batch;
  batch.tokens.assign(tokens.begin(), tokens.end());
  const auto count = static_cast<int32_t>(tokens.size());
  batch.sequences.push_back({&cache, start_position, 0, count});
  for (int32_t row = all_rows ? 0 : count - 1; row < count; ++row) batch.logit_rows.push_back(row);
  return batch;
}

std::unique_ptr<ErnieModel> ErnieModel::load(const std::string& model_dir, ThreadPool& pool,
                                             const LayerProgress& on_layer_loaded,
                                             const QuantizationPlan& quantization, const std::string& mtp_dir,
                                             bool report_progress, const ShardPlan& shard, Communicator* communicator) {
  Stopwatch stopwatch;
  ModelConfig config = load_model_config(model_dir);
  std::unique_ptr<Checkpoint> checkpoint = Checkpoint::open(model_dir);
  const bool prequantized = is_prequantized(*checkpoint);
  // Before the weights are built: a pre-quantized checkpoint's packed Linears are copied
  // out of the mapping as they are attached and their pages handed back, which a read
  // afterwards would bring back. A tensor-parallel rank reads only its slices, on first
  // use: reading the whole checkpoint in would give every rank all of it.
  if (report_progress && !shard.sharded() && (prequantized || !quantization.quantizes_weights())) {
    // Mapped weights come in from disk on first use; reading them now (when they fit)
    // keeps the first request from paying for it and shows how far loading is.
    const uint64_t bytes = checkpoint->total_tensor_bytes();
    if (bytes + bytes / 8 < read_memory_budget().available) {
      ByteProgress progress("reading weights", bytes);
      checkpoint->page_in(pool, progress);
    } else {
      log_info("the weights (", bytes / 1e9, " GB) exceed the free memory: their pages are read on first use");
    }
  }
  ErnieWeights weights = load_ernie_weights(*checkpoint, config, on_layer_loaded, &shard);
  std::unique_ptr<Checkpoint> mtp_checkpoint;
  if (!mtp_dir.empty() && shard.sharded()) fail("a separate MTP checkpoint cannot be used with tensor parallelism");
  if (!mtp_dir.empty()) {
    mtp_checkpoint = Checkpoint::open(mtp_dir);
    weights.mtp = load_mtp_weights(*mtp_checkpoint, config);
    log_info("MTP head loaded from ", mtp_dir);
  }
  LoadReport report;
  report.tensor_bytes = checkpoint->total_tensor_bytes();
  report.num_files = checkpoint->num_files();
  report.layout = weights.layout;
  bool cached = false;
  if (prequantized) {
    // `ernie quantize` packed the weights already: only Linears it could not hold (an MTP
    // head from another checkpoint) are quantized now, and there is nothing to cache.
    Stopwatch quantize_time;
    report.prequantized = true;
    report.kept_dense = quantize_weights(weights, quantization, pool, report_progress);
    report.quantize_seconds = quantize_time.seconds();
  } else if (quantization.quantizes_weights()) {
    Stopwatch quantize_time;
    // FD_ENABLE_MODEL_LOAD_CACHE: packed weights from an earlier start, else packed now
    // and kept for the next one.
    const std::string cache_dir = quantized_cache_dir();
    std::vector<std::string> sources = {model_dir};
    if (!mtp_dir.empty()) sources.push_back(mtp_dir);
    // Each rank packs its own slices: they are cached apart.
    if (shard.sharded())
      sources.push_back("shard " + std::to_string(shard.rank) + "/" + std::to_string(shard.size) +
                        (shard.expert_parallel ? " ep" : ""));
    const std::string key = cache_dir.empty() ? "" : quantized_cache_key(sources, quantization);
    const std::string cache_path = cache_dir.empty() ? "" : quantized_cache_path(cache_dir, key);
    if (!cache_path.empty()) cached = load_quantized_cache(cache_path, key, weights, pool, report_progress);
    if (cached) {
      report.from_cache = true;
      log_info("quantized weights read from the cache ", cache_path);
    } else {
      report.kept_dense = quantize_weights(weights, quantization, pool, report_progress);
      if (!cache_path.empty() && save_quantized_cache(cache_path, key, weights))
        log_info("quantized weights saved to the cache ", cache_path, " for the next start");
    }
    report.quantize_seconds = quantize_time.seconds();
  }
  // bf16 products read the bf16 weights in their own layout: repacked once, here.
  if (bf16_products_active()) {
    Stopwatch pack_time;
    if (const int packed = pack_bf16_weights(weights, pool); packed > 0)
      log_info(packed, " bf16 weight matrices repacked for bf16 products (AVX512-BF16) in ", pack_time.seconds(), " s");
  }
  report.weight_bytes = resident_weight_bytes(weights);
  auto model = std::make_unique<ErnieModel>(std::move(config), std::move(checkpoint), std::move(weights), pool,
                                            quantization.kv_cache, shard, communicator);
  model->mtp_checkpoint_ = std::move(mtp_checkpoint);
  report.seconds = stopwatch.seconds();
  model->load_report_ = report;
  return model;
}

ErnieModel::ErnieModel(ModelConfig config, std::unique_ptr<Checkpoint> checkpoint, ErnieWeights weights,
                       ThreadPool& pool, KvStorage kv_storage, const ShardPlan& shard, Communicator* communicator)
    : config_(std::move(config)),
      shard_(shard),
      shape_(shard_shape(config_, shard)),
      communicator_(communicator),
      checkpoint_(std::move(checkpoint)),
      weights_(std::move(weights)),
      pool_(pool),
      kv_storage_(kv_storage),
      rope_inv_freq_(rope_inverse_frequencies(config_.head_dim, config_.rope_theta)) {
  if (config_.vl.has_value() != weights_.vision.has_value())
    fail("an ERNIE-4.5-VL config needs vision tower weights, and only it has them");
  if (shard_.sharded() && (communicator_ == nullptr || communicator_->size() != shard_.size ||
                           communicator_->rank() != shard_.rank))
    fail("internal: a model sharded as rank ", shard_.rank, " of ", shard_.size, " needs a communicator of that rank and size");
}

void ErnieModel::all_reduce(float* data, int64_t count) {
  if (shard_.sharded()) communicator_->all_reduce_sum(data, static_cast<size_t>(count));
}

std::vector<float> ErnieModel::encode_vision(const ImagePatches& patches, ThreadPool& pool) {
  if (!weights_.vision) return LanguageModel::encode_vision(patches, pool);
  return VisionEncoder(config_, *weights_.vision, pool).encode(patches);
}

size_t ErnieModel::kv_row_bytes() const {
  // Each rank's cache holds only its own KV heads.
  return ernie::kv_row_bytes(kv_storage_, shape_.kv_heads, config_.head_dim);
}

std::unique_ptr<KvCache> ErnieModel::new_kv_cache() const {
  // One more layer for the MTP head's keys and values, when there is one.
  return std::make_unique<SequenceKvCache>(config_.num_hidden_layers + (has_mtp() ? 1 : 0), kv_row_bytes());
}

void ErnieModel::validate(const ForwardBatch& batch) const {
  int64_t covered = 0;
  for (const SequenceChunk& chunk : batch.sequences) {
    if (chunk.cache == nullptr) fail("forward: a sequence chunk has no KV cache");
    if (chunk.first_token != covered || chunk.num_tokens <= 0)
      fail("forward: sequence chunks must cover the batch tokens in order without gaps");
    if (chunk.start_position < 0 || chunk.start_position + chunk.num_tokens > config_.max_position_embeddings)
      fail("forward: positions ", chunk.start_position, "..", chunk.start_position + chunk.num_tokens - 1,
           " exceed max_position_embeddings ", config_.max_position_embeddings);
    covered += chunk.num_tokens;
  }
  if (covered != static_cast<int64_t>(batch.tokens.size()))
    fail("forward: sequence chunks cover ", covered, " tokens but the batch has ", batch.tokens.size());
  for (int32_t token : batch.tokens)
    if (token < 0 || token >= config_.vocab_size)
      fail("token id ", token, " is outside the vocabulary 0..", config_.vocab_size - 1);
  for (int32_t row : batch.logit_rows)
    if (row < 0 || row >= static_cast<int32_t>(batch.tokens.size()))
      fail("forward: logit row ", row, " is outside the batch of ", batch.tokens.size(), " tokens");
  if (!batch.rope_positions.empty() && batch.rope_positions.size() != 3 * batch.tokens.size())
    fail("forward: ", batch.tokens.size(), " tokens need ", 3 * batch.tokens.size(), " 3-D positions, got ",
         batch.rope_positions.size());
  if (!batch.input_embeddings.empty() && batch.input_embeddings.size() != batch.tokens.size())
    fail("forward: ", batch.tokens.size(), " tokens need as many input embedding entries, got ",
         batch.input_embeddings.size());
  if ((!batch.rope_positions.empty() || !batch.input_embeddings.empty()) && !config_.vl)
    fail("forward: 3-D positions and input embeddings need an ERNIE-4.5-VL model");
}

void ErnieModel::for_rows(int64_t n, FunctionRef<void(int64_t, int64_t)> body) { ernie::for_rows(pool_, n, body); }

void ErnieModel::gather_rows(const float* src, int64_t count, FunctionRef<int64_t(int64_t)> source_row, float* dst) {
  const int64_t h = config_.hidden_size;
  for_rows(count, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) std::copy_n(src + source_row(i) * h, h, dst + i * h);
  });
}

void ErnieModel::scatter_add_rows(const float* src, int64_t count, FunctionRef<int64_t(int64_t)> target_row,
                                  FunctionRef<float(int64_t)> weight, float* dst) {
  const int64_t h = config_.hidden_size;
  for_rows(count, [&](int64_t i0, int64_t i1) {
    for (int64_t i = i0; i < i1; ++i) add_scaled(dst + target_row(i) * h, src + i * h, weight(i), h);
  });
}

void ErnieModel::plan_batch(const ForwardBatch& batch) {
  const int64_t n = static_cast<int64_t>(batch.tokens.size());
  sized(slots_, n);
  attention_items_.clear();
  for (size_t s = 0; s < batch.sequences.size(); ++s) {
    const SequenceChunk& chunk = batch.sequences[s];
    for (int32_t i = 0; i < chunk.num_tokens; ++i)
      slots_[static_cast<size_t>(chunk.first_token + i)] = {&chunk, chunk.start_position + i};
    for (int32_t first = 0; first < chunk.num_tokens; first += kAttentionQueryTile)
      for (int32_t head = 0; head < shape_.kv_heads; ++head)
        attention_items_.push_back({static_cast<int32_t>(s), head, chunk.first_token + first,
                                    std::min(kAttentionQueryTile, chunk.num_tokens - first)});
  }
  if (key_rows_.size() < batch.sequences.size()) {
    key_rows_.resize(batch.sequences.size());
    value_rows_.resize(batch.sequences.size());
  }
}

void ErnieModel::prepare_threads() {
  if (std::this_thread::get_id() == threads_prepared_for_) return;
  // Every pool thread's kernel buffers are sized now, for the widest weight and this
  // head_dim, so no later step grows one on whichever thread happens to run a chunk.
  const int64_t widest = std::max<int64_t>(
      {config_.hidden_size, config_.q_width(), config_.intermediate_size,
       config_.moe ? config_.moe->intermediate_size : 0, 2 * config_.hidden_size});
  pool_.run_on_every_thread([&] {
    this_thread_pool();  // built now, not inside a step
    reserve_matmul_scratch(widest);
    reserve_attention_scratch(thread_attention_scratch(), config_.head_dim);
  });
  threads_prepared_for_ = std::this_thread::get_id();
}

void ErnieModel::begin_batch(const ForwardBatch& batch) {
  validate(batch);
  prepare_threads();
  for (const SequenceChunk& chunk : batch.sequences) chunk.cache->reserve(chunk.start_position + chunk.num_tokens);
  plan_batch(batch);
  // RoPE rotations of every row's position, shared by all layers.
  const int64_t n = static_cast<int64_t>(batch.tokens.size());
  const int hd = config_.head_dim;
  float* rotations = sized(rope_cos_sin_, n * hd);
  for_rows(n, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      if (!batch.rope_positions.empty()) {
        const int32_t* thw = batch.rope_positions.data() + 3 * t;
        const auto scaled = [&](int32_t p) { return static_cast<float>(p / config_.compression_ratio); };
        rope_rotation_3d(scaled(thw[0]), scaled(thw[1]), scaled(thw[2]), hd, config_.vl->freq_allocation,
                         rope_inv_freq_.data(), rotations + t * hd);
        continue;
      }
      const double position = static_cast<double>(slots_[static_cast<size_t>(t)].position) / config_.compression_ratio;
      rope_rotation(static_cast<float>(position), hd, rope_inv_freq_.data(), rotations + t * hd);
    }
  });
  sized(normed_, n * config_.hidden_size);
  sized(block_out_, n * config_.hidden_size);
}

void ErnieModel::embed(std::span<const int32_t> tokens, float* out) const {
  const int64_t h = config_.hidden_size;
  for (size_t t = 0; t < tokens.size(); ++t)
    convert_to_f32(weights_.embedding.dtype, weights_.embedding.row(tokens[t]), out + static_cast<int64_t>(t) * h,
                   static_cast<size_t>(h));
}

std::vector<float>& ErnieModel::forward(const ForwardBatch& batch) {
  begin_batch(batch);
  const int64_t n = static_cast<int64_t>(batch.tokens.size());
  // x = Emb[token], no scaling.
  float* x = sized(x_, n * config_.hidden_size);
  embed(batch.tokens, x);
  for (size_t t = 0; t < batch.input_embeddings.size(); ++t)
    if (batch.input_embeddings[t] != nullptr)
      std::copy_n(batch.input_embeddings[t], config_.hidden_size, x + static_cast<int64_t>(t) * config_.hidden_size);
  for (int layer_index = 0; layer_index < config_.num_hidden_layers; ++layer_index) {
    decoder_layer(weights_.layers[static_cast<size_t>(layer_index)], layer_index, batch, x);
    if (batch.after_layer) batch.after_layer(layer_index);
  }
  hidden_rows_ = n;
  return head_logits(x, batch.logit_rows, weights_.lm_head);
}

std::vector<float>& ErnieModel::forward_mtp(const ForwardBatch& batch, std::span<const float> hidden,
                                            bool normalize_hidden) {
  if (weights_.mtp.empty()) return LanguageModel::forward_mtp(batch, hidden, normalize_hidden);
  if (shard_.sharded()) fail("internal: MTP drafting runs in one process only");
  const MtpWeights& mtp = weights_.mtp.front();
  const int64_t n = static_cast<int64_t>(batch.tokens.size());
  const int64_t h = config_.hidden_size;
  if (static_cast<int64_t>(hidden.size()) != n * h)
    fail("forward_mtp: ", n, " tokens need ", n * h, " hidden values, got ", hidden.size());
  begin_batch(batch);
  const float eps = static_cast<float>(config_.rms_norm_eps);
  // u = [RMSNorm(Emb[x_{t+1}]) ; RMSNorm(h_t)] · Wprojᵀ, the embedding half first (spec §4.1).
  float* joined = sized(mtp_input_, n * 2 * h);
  float* scratch = sized(normed_, n * h);
  embed(batch.tokens, scratch);
  for (int64_t t = 0; t < n; ++t) rms_norm(scratch + t * h, 1, h, mtp.embedding_norm.data(), eps, joined + t * 2 * h);
  std::copy(hidden.begin(), hidden.end(), scratch);
  if (normalize_hidden) rms_norm(scratch, n, h, weights_.final_norm.data(), eps, scratch);
  for (int64_t t = 0; t < n; ++t) rms_norm(scratch + t * h, 1, h, mtp.hidden_norm.data(), eps, joined + t * 2 * h + h);
  float* x = sized(x_, n * h);
  matmul(pool_, joined, n, mtp.linear_projection, x);
  decoder_layer(mtp.block, config_.num_hidden_layers, batch, x);
  hidden_rows_ = n;
  return head_logits(x, batch.logit_rows, mtp_head_ ? *mtp_head_ : weights_.lm_head);
}

void ErnieModel::prepare_mtp() {
  // A draft only needs the argmax of the MTP logits, so their vocabulary projection runs
  // on an int8 copy of the head when the head itself is wider (half the bytes to read at
  // bf16): a rare argmax that rounding moves costs one rejected draft, never a wrong token.
  // can_quantize holds only for a float head (dense, or bf16 packed for bf16 products).
  if (mtp_head_ || weights_.mtp.empty() || !can_quantize(weights_.lm_head, WeightFormat::kInt8)) return;
  mtp_head_ = std::make_unique<WeightMatrix>(quantize_weight(weights_.lm_head, WeightFormat::kInt8));
}

std::span<const float> ErnieModel::last_hidden_states() const {
  return {x_.data(), static_cast<size_t>(hidden_rows_ * config_.hidden_size)};
}

void ErnieModel::decoder_layer(const DecoderLayerWeights& layer, int kv_layer, const ForwardBatch& batch, float* x) {
  const int64_t n = static_cast<int64_t>(batch.tokens.size());
  const int64_t h = config_.hidden_size;
  const float eps = static_cast<float>(config_.rms_norm_eps);
  float* normed = normed_.data();
  float* block_out = block_out_.data();
  // The normed rows are q, k and v's input (input_), rounded for bf16 products as they
  // are written where those are bf16.
  input_.reset(normed, n, h);
  input_.round_while_writing(layer.attention.q);
  for_rows(n, [&](int64_t t0, int64_t t1) {
    write_rows_rounded(input_, t0, t1, [&](int64_t a, int64_t b) {
      rms_norm(x + a * h, b - a, h, layer.input_norm.data(), eps, normed + a * h);
    });
  });
  attention_block(layer, kv_layer, batch, block_out);
  all_reduce(block_out, n * h);

  // The residual, then the MLP's input from it, a few rows at a time so each row is
  // normed while still in L1; rounded for a dense MLP's bf16 products likewise (the MoE
  // blocks read the normed rows themselves).
  input_.reset(normed, n, h);
  if (!layer.moe) input_.round_while_writing(layer.mlp->gate);
  for_rows(n, [&](int64_t t0, int64_t t1) {
    write_rows_rounded(input_, t0, t1, [&](int64_t a, int64_t b) {
      add_scaled(x + a * h, block_out + a * h, 1.0f, (b - a) * h);
      rms_norm(x + a * h, b - a, h, layer.post_attention_norm.data(), eps, normed + a * h);
    });
  });
  // The block's output: a dense MLP's down projection as it is, the MoE blocks' sums.
  float* mlp_out = block_out;
  if (!layer.moe) {
    mlp_out = mlp_forward(*layer.mlp, input_);
    all_reduce(mlp_out, n * h);
  } else {
    std::fill_n(block_out, n * h, 0.0f);
    if (shard_.sharded() && shard_.expert_parallel) {
      expert_parallel_moe(*layer.moe, n, block_out);  // complete on every rank already
    } else {
      moe_block(layer, batch, block_out);
      all_reduce(block_out, n * h);
    }
  }
  for_rows(n, [&](int64_t t0, int64_t t1) { add_scaled(x + t0 * h, mlp_out + t0 * h, 1.0f, (t1 - t0) * h); });
}

std::vector<float>& ErnieModel::head_logits(const float* x, std::span<const int32_t> rows_wanted,
                                           const WeightMatrix& head) {
  // Only the requested rows go through the final norm and the (large) head.
  const int64_t h = config_.hidden_size;
  const int64_t rows = static_cast<int64_t>(rows_wanted.size());
  float* last = sized(last_, rows * h);
  for (int64_t r = 0; r < rows; ++r) std::copy_n(x + rows_wanted[static_cast<size_t>(r)] * h, h, last + r * h);
  rms_norm(last, rows, h, weights_.final_norm.data(), static_cast<float>(config_.rms_norm_eps), last);
  const int64_t v = config_.vocab_size;
  if (shard_.sharded()) {
    // Each rank projects onto its vocabulary rows; rank 0 gathers them (rank-major) and
    // lays each row of logits out whole. The other ranks return their part.
    const int64_t mine = head.rows;
    float* local = sized(local_logits_, rows * mine);
    matmul(pool_, last, rows, head, local);
    std::vector<int>& counts = gather_counts_;
    counts.clear();
    for (const int count : shape_.vocab_counts) counts.push_back(static_cast<int>(count * rows));
    std::vector<float>& parts = gathered_logits_;
    if (communicator_->rank() == 0) parts.resize(static_cast<size_t>(rows * v));
    communicator_->gather(local, counts, parts.data(), 0);
    if (communicator_->rank() != 0) {
      logits_.assign(local, local + rows * mine);
      return logits_;
    }
    logits_.resize(static_cast<size_t>(rows * v));
    int64_t offset = 0, first = 0;
    for (const int count : shape_.vocab_counts) {
      for (int64_t r = 0; r < rows; ++r)
        std::copy_n(parts.data() + offset + r * count, count, logits_.data() + r * v + first);
      offset += static_cast<int64_t>(count) * rows;
      first += count;
    }
  } else {
    // The result is exactly rows x V, so the caller can use its size.
    logits_.resize(static_cast<size_t>(rows * v));
    matmul(pool_, last, rows, head, logits_.data());
  }
  if (config_.ori_vocab_size) {
    // FastDeploy masks the padding rows of the vocabulary.
    for (int64_t r = 0; r < rows; ++r)
      std::fill(logits_.begin() + r * v + *config_.ori_vocab_size, logits_.begin() + (r + 1) * v,
                -std::numeric_limits<float>::infinity());
  }
  return logits_;
}

void ErnieModel::attention_block(const DecoderLayerWeights& layer, int layer_index, const ForwardBatch& batch,
                                 float* out) {
  const int64_t n = static_cast<int64_t>(batch.tokens.size());
  // This rank's heads (all of them in one process).
  const int heads = shape_.heads, kv_heads = shape_.kv_heads, hd = config_.head_dim;
  const int64_t q_width = static_cast<int64_t>(heads) * hd, kv_width = static_cast<int64_t>(kv_heads) * hd;
  float* q = sized(q_, n * q_width);
  float* k = sized(k_, n * kv_width);
  float* v = sized(v_, n * kv_width);
  const WeightMatrix* qkv[] = {&layer.attention.q, &layer.attention.k, &layer.attention.v};
  float* qkv_out[] = {q, k, v};
  matmul_shared_input(pool_, input_, qkv, qkv_out);

  // C8: the checkpoint's static per-channel scales. Rows hold the codes; the keys'
  // dequantization scales multiply the queries (q · (s ∘ k) = (s ∘ q) · k) and the
  // values' the attention output (Σ p (s ∘ v) = s ∘ Σ p v), so the kernel is unchanged.
  const bool static_kv = kv_storage_ == KvStorage::kInt8 && !layer.key_absmax.empty();
  float* kv_scales = static_kv ? sized(kv_scales_, 4 * kv_width) : nullptr;
  if (static_kv)
    for (int64_t c = 0; c < kv_width; ++c) {
      kv_scales[c] = 127.0f / layer.key_absmax[static_cast<size_t>(c)];
      kv_scales[kv_width + c] = 127.0f / layer.value_absmax[static_cast<size_t>(c)];
      kv_scales[2 * kv_width + c] = layer.key_absmax[static_cast<size_t>(c)] / 127.0f;
      kv_scales[3 * kv_width + c] = layer.value_absmax[static_cast<size_t>(c)] / 127.0f;
    }
  // Query head h reads KV head h / group: its channel d has scale [kv head · hd + d].
  const auto scale_heads = [&](float* row, const float* channel_scales) {
    const int group = heads / kv_heads;
    for (int head = 0; head < heads; ++head)
      for (int d = 0; d < hd; ++d) row[head * hd + d] *= channel_scales[(head / group) * hd + d];
  };

  // RoPE on q and k, then append k and v to each sequence's cache.
  for_rows(n, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const TokenSlot& slot = slots_[static_cast<size_t>(t)];
      const float* rotation = rope_cos_sin_.data() + t * hd;
      apply_rope_rotation(q + t * q_width, heads, hd, rotation);
      apply_rope_rotation(k + t * kv_width, kv_heads, hd, rotation);
      void* key_row = slot.chunk->cache->key(layer_index, slot.position);
      void* value_row = slot.chunk->cache->value(layer_index, slot.position);
      if (static_kv) {
        store_kv_row_static(k + t * kv_width, kv_heads, hd, kv_scales, key_row);
        store_kv_row_static(v + t * kv_width, kv_heads, hd, kv_scales + kv_width, value_row);
        scale_heads(q + t * q_width, kv_scales + 2 * kv_width);
      } else {
        store_kv_row(k + t * kv_width, kv_heads, hd, kv_storage_, key_row);
        store_kv_row(v + t * kv_width, kv_heads, hd, kv_storage_, value_row);
      }
    }
  });

  // Row pointers of every sequence's cache, so the kernel never calls through KvCache.
  for (size_t s = 0; s < batch.sequences.size(); ++s) {
    const SequenceChunk& chunk = batch.sequences[s];
    const int64_t length = chunk.start_position + chunk.num_tokens;
    std::vector<const void*>& keys = key_rows_[s];
    std::vector<const void*>& values = value_rows_[s];
    keys.resize(static_cast<size_t>(length));
    values.resize(static_cast<size_t>(length));
    for (int64_t p = 0; p < length; ++p) {
      keys[static_cast<size_t>(p)] = chunk.cache->key(layer_index, p);
      values[static_cast<size_t>(p)] = chunk.cache->value(layer_index, p);
    }
  }

  const AttentionShape shape{heads, kv_heads, hd, static_cast<float>(1.0 / std::sqrt(static_cast<double>(hd))),
                             kv_storage_};
  // The output is o's input. Where o multiplies in bf16 products and attention does too,
  // the kernel writes it rounded to bf16 directly (no fp32 copy to write and read back;
  // an even width leaves no padding input to zero); else each item rounds its heads'
  // columns as it writes them (after the C8 value scales where there are any).
  Bf16Activations* rounded = !static_kv && attention_uses_bf16_products(shape) && q_width % 2 == 0
                                 ? attended_input_.bf16_form_alone(layer.attention.o, n, q_width)
                                 : nullptr;
  float* attended = rounded != nullptr ? nullptr : sized(attended_, n * q_width);
  if (rounded == nullptr) {
    attended_input_.reset(attended, n, q_width);
    attended_input_.round_while_writing(layer.attention.o);
  }
  const int64_t item_width = static_cast<int64_t>(heads / kv_heads) * hd;
  pool_.parallel_for(attention_items_.size(), 1, [&](size_t begin, size_t end) {
    AttentionScratch& scratch = thread_attention_scratch();
    for (size_t i = begin; i < end; ++i) {
      const AttentionItem& item = attention_items_[i];
      const TokenSlot& first = slots_[static_cast<size_t>(item.first_token)];
      const void* const* keys = key_rows_[static_cast<size_t>(item.sequence)].data();
      const void* const* values = value_rows_[static_cast<size_t>(item.sequence)].data();
      const float* item_q = q + item.first_token * q_width;
      if (rounded != nullptr) {
        causal_attention_group(shape, keys, values, item.kv_head, item_q, q_width, first.position, item.num_tokens,
                               rounded->bf16_row(item.first_token), rounded->stride(), scratch);
        continue;
      }
      causal_attention_group(shape, keys, values, item.kv_head, item_q, q_width, first.position, item.num_tokens,
                             attended + item.first_token * q_width, q_width, scratch);
      if (!static_kv)
        attended_input_.round_written(item.first_token, item.first_token + item.num_tokens, item.kv_head * item_width,
                                      (item.kv_head + 1) * item_width);
    }
  });
  if (static_kv)
    for_rows(n, [&](int64_t t0, int64_t t1) {
      write_rows_rounded(attended_input_, t0, t1, [&](int64_t a, int64_t b) {
        for (int64_t t = a; t < b; ++t) scale_heads(attended + t * q_width, kv_scales + 3 * kv_width);
      });
    });
  matmul(pool_, attended_input_, layer.attention.o, out);
}

float* ErnieModel::mlp_forward(const MlpWeights& mlp, MatmulInput& input) {
  const int64_t n = input.n(), inner = mlp.gate.rows;
  float* down = sized(down_, n * mlp.down.rows);
  mlp_into(pool_, mlp, input, sized(gate_, n * inner), sized(up_, n * inner), down_input_, down);
  return down;
}

void ErnieModel::mlp_block(const MlpWeights& mlp, MatmulInput& input, float* out) {
  const int64_t h = mlp.down.rows;
  const float* down = mlp_forward(mlp, input);
  for_rows(input.n(), [&](int64_t t0, int64_t t1) { add_scaled(out + t0 * h, down + t0 * h, 1.0f, (t1 - t0) * h); });
}

void ErnieModel::moe_block(const DecoderLayerWeights& layer, const ForwardBatch& batch, float* out) {
  const int64_t n = static_cast<int64_t>(batch.tokens.size()), h = config_.hidden_size;
  bool shared_done = false;
  if (!layer.vision_moe) {
    shared_done = routed_experts(*layer.moe, normed_.data(), n, out, layer.moe->shared ? &*layer.moe->shared : nullptr);
  } else {
    // Modality-isolated experts (notes §7.2): each token goes to its modality's router
    // and experts only; the rows of one modality are gathered, run and scattered back.
    for (const bool vision : {false, true}) {
      int32_t* rows = sized(modality_rows_, n);
      int64_t count = 0;
      for (int64_t t = 0; t < n; ++t)
        if (config_.vl->is_vision_token(batch.tokens[static_cast<size_t>(t)]) == vision)
          rows[count++] = static_cast<int32_t>(t);
      if (count == 0) continue;
      const MoeWeights& experts = vision ? *layer.vision_moe : *layer.moe;
      if (count == n) {
        routed_experts(experts, normed_.data(), n, out);
        continue;
      }
      float* in = sized(modality_in_, count * h);
      float* partial = sized(modality_out_, count * h);
      const auto row = [&](int64_t i) -> int64_t { return rows[i]; };
      gather_rows(normed_.data(), count, row, in);
      for_rows(count, [&](int64_t i0, int64_t i1) { std::fill_n(partial + i0 * h, (i1 - i0) * h, 0.0f); });
      routed_experts(experts, in, count, partial);
      scatter_add_rows(partial, count, row, [](int64_t) { return 1.0f; }, out);
    }
  }
  if (layer.moe->shared && !shared_done) {
    input_.reset(normed_.data(), n, h);
    mlp_block(*layer.moe->shared, input_, out);
  }
}

void ErnieModel::route(const MoeWeights& moe, const float* input, int64_t n) {
  const MoeConfig& moe_config = *config_.moe;
  const int64_t h = config_.hidden_size;
  const int e = moe_config.num_experts, top_k = moe_config.top_k;
  // The router runs in fp32 on fp32 weights (spec §3 step 1).
  float* router_logits = sized(router_logits_, n * e);
  matmul(pool_, input, n, f32_matrix_view(moe.router.data(), e, h), router_logits);

  // Route every token (spec §3 steps 2-4): select by p + bias, weigh by the unbiased p
  // renormalised over the chosen experts.
  float* probs = sized(probs_, e);
  float* scores = sized(scores_, e);
  int32_t* order = sized(order_, e);
  int32_t* chosen = sized(chosen_expert_, n * top_k);
  float* chosen_weight = sized(chosen_weight_, n * top_k);
  int32_t* count = sized(expert_count_, e);
  std::fill_n(count, e, 0);
  for (int64_t t = 0; t < n; ++t) {
    std::copy_n(router_logits + t * e, e, probs);
    softmax(probs, e);
    for (int i = 0; i < e; ++i)
      scores[i] = probs[i] + (moe_config.use_correction_bias ? moe.correction_bias[static_cast<size_t>(i)] : 0.0f);
    std::iota(order, order + e, 0);
    std::partial_sort(order, order + top_k, order + e,
                      [&](int a, int b) { return scores[a] > scores[b] || (scores[a] == scores[b] && a < b); });
    float total = 0.0f;
    for (int j = 0; j < top_k; ++j) total += probs[order[j]];
    const float denominator = std::max(total, static_cast<float>(moe_config.norm_min));
    for (int j = 0; j < top_k; ++j) {
      chosen[t * top_k + j] = order[j];
      chosen_weight[t * top_k + j] = probs[order[j]] / denominator;
      ++count[order[j]];
    }
  }
}

bool ErnieModel::routed_experts(const MoeWeights& moe, const float* input, int64_t n, float* out,
                                const MlpWeights* shared) {
  const MoeConfig& moe_config = *config_.moe;
  const int64_t h = config_.hidden_size;
  const int e = moe_config.num_experts, top_k = moe_config.top_k;
  route(moe, input, n);
  const int32_t* chosen = chosen_expert_.data();
  const float* chosen_weight = chosen_weight_.data();
  int32_t* count = expert_count_.data();
  // Group the (token, weight) pairs by expert so each expert's weights stream once for
  // all its tokens.
  int32_t* offset = sized(expert_offset_, e + 1);
  offset[0] = 0;
  for (int i = 0; i < e; ++i) offset[i + 1] = offset[i] + count[i];
  Routing* routed = sized(routed_, n * top_k);
  std::fill_n(count, e, 0);
  for (int64_t t = 0; t < n; ++t)
    for (int j = 0; j < top_k; ++j) {
      const int32_t expert = chosen[t * top_k + j];
      routed[offset[expert] + count[expert]++] = {static_cast<int32_t>(t), chosen_weight[t * top_k + j]};
    }

  const int64_t num_active = decode_sized_active_experts(moe);
  // Decode-sized shared experts in integers join the routed ones' streams.
  const MlpWeights* joined = shared != nullptr && n < kDecodeRows && integer_mlp(*shared) ? shared : nullptr;
  if (experts_streamed(moe, input, n, num_active, out, joined)) return joined != nullptr;
  if (experts_on_threads(moe, input, n, num_active, out)) return false;
  // Each expert runs on its gathered tokens and scatters back scaled by its weight.
  for (int expert = 0; expert < e; ++expert) {
    const int64_t tokens = count[expert];
    const auto parts = std::span(moe.experts).subspan(static_cast<size_t>(expert * moe.expert_parts),
                                                      static_cast<size_t>(moe.expert_parts));
    // Expert (or part) parallelism: another rank runs this expert (its share comes in the all-reduce).
    const auto held = [](const MlpWeights& part) { return !part.gate.empty(); };
    if (tokens == 0 || std::none_of(parts.begin(), parts.end(), held)) continue;
    const Routing* mine = routed + offset[expert];
    float* gathered = sized(expert_in_, tokens * h);
    // Within one expert every token appears once, so the scatter's rows are distinct.
    const auto token = [&](int64_t i) -> int64_t { return mine[i].token; };
    gather_rows(input, tokens, token, gathered);
    expert_input_.reset(gathered, tokens, h);
    const float* expert_out = nullptr;
    if (std::count_if(parts.begin(), parts.end(), held) == 1) {
      // The whole expert here: its down projection's rows are the output.
      expert_out = mlp_forward(*std::find_if(parts.begin(), parts.end(), held), expert_input_);
    } else {
      float* sum = sized(expert_out_, tokens * h);
      std::fill_n(sum, tokens * h, 0.0f);
      for (const MlpWeights& part : parts)
        if (held(part)) mlp_block(part, expert_input_, sum);  // each adds its share
      expert_out = sum;
    }
    scatter_add_rows(expert_out, tokens, token, [&](int64_t i) { return mine[i].weight; }, out);
  }
  return false;
}

int64_t ErnieModel::decode_sized_active_experts(const MoeWeights& moe) {
  const int e = config_.moe->num_experts;
  const int32_t* count = expert_count_.data();
  // Whole experts only: the parts of a tensor-parallel expert are summed across ranks.
  if (moe.expert_parts != 1 || pool_.num_threads() < 2) return 0;
  int32_t* active = sized(active_experts_, e);
  int64_t num_active = 0;
  for (int expert = 0; expert < e; ++expert) {
    // Decode-sized only: with more tokens an expert is bound by arithmetic, which its
    // own parallel matmuls spread better.
    if (count[expert] >= kDecodeRows) return 0;
    if (count[expert] > 0 && !moe.experts[static_cast<size_t>(expert)].gate.empty()) active[num_active++] = expert;
  }
  // Each expert's working memory is its own, not a thread's: whichever thread runs an
  // expert, a batch shape seen before finds its buffers sized.
  if (expert_scratch_.size() < static_cast<size_t>(e)) expert_scratch_.resize(static_cast<size_t>(e));
  return num_active;
}

void ErnieModel::gather_expert_input(int32_t expert, const float* input) {
  const int64_t h = config_.hidden_size, tokens = expert_count_[static_cast<size_t>(expert)];
  const Routing* mine = routed_.data() + expert_offset_[static_cast<size_t>(expert)];
  ExpertScratch& scratch = expert_scratch_[static_cast<size_t>(expert)];
  float* gathered = sized(scratch.gathered, tokens * h);
  for (int64_t i = 0; i < tokens; ++i) std::copy_n(input + mine[i].token * h, h, gathered + i * h);
  scratch.input.reset(gathered, tokens, h);
}

void ErnieModel::add_expert_outputs(const float* outputs, int64_t num_active, float* out) {
  const int64_t h = config_.hidden_size;
  const int32_t* active = active_experts_.data();
  // Added in expert order, as the expert-by-expert loop adds them.
  for (int64_t a = 0; a < num_active; ++a) {
    const int32_t expert = active[a];
    const Routing* mine = routed_.data() + expert_offset_[static_cast<size_t>(expert)];
    scatter_add_rows(outputs + expert_offset_[static_cast<size_t>(expert)] * h, expert_count_[static_cast<size_t>(expert)],
                     [&](int64_t i) -> int64_t { return mine[i].token; }, [&](int64_t i) { return mine[i].weight; }, out);
  }
}

bool ErnieModel::experts_streamed(const MoeWeights& moe, const float* input, int64_t n, int64_t num_active, float* out,
                                  const MlpWeights* shared) {
  if (num_active == 0 || 2 * (num_active + 1) > static_cast<int64_t>(kMaxBatchWeights)) return false;
  const int32_t* active = active_experts_.data();
  for (int64_t a = 0; a < num_active; ++a)
    if (!integer_mlp(moe.experts[static_cast<size_t>(active[a])])) return false;
  const int64_t h = config_.hidden_size;
  float* outputs = sized(expert_out_, n * config_.moe->top_k * h);
  MatmulInput* inputs[kMaxBatchWeights];
  const WeightMatrix* weights[kMaxBatchWeights];
  float* results[kMaxBatchWeights];
  // Every expert's gate and up, one stream over both threads.
  for (int64_t a = 0; a < num_active; ++a) {
    const int32_t expert = active[a];
    const MlpWeights& mlp = moe.experts[static_cast<size_t>(expert)];
    ExpertScratch& scratch = expert_scratch_[static_cast<size_t>(expert)];
    gather_expert_input(expert, input);
    const int64_t tokens = scratch.input.n(), inner = mlp.gate.rows;
    inputs[2 * a] = inputs[2 * a + 1] = &scratch.input;
    weights[2 * a] = &mlp.gate;
    weights[2 * a + 1] = &mlp.up;
    results[2 * a] = sized(scratch.gate, tokens * inner);
    results[2 * a + 1] = sized(scratch.up, tokens * inner);
  }
  // The shared experts' too: all n rows, into the members mlp_forward uses.
  const int64_t shared_inner = shared != nullptr ? shared->gate.rows : 0;
  size_t pairs = static_cast<size_t>(2 * num_active);
  if (shared != nullptr) {
    input_.reset(input, n, h);
    inputs[pairs] = inputs[pairs + 1] = &input_;
    weights[pairs] = &shared->gate;
    weights[pairs + 1] = &shared->up;
    results[pairs] = sized(gate_, n * shared_inner);
    results[pairs + 1] = sized(up_, n * shared_inner);
    pairs += 2;
  }
  matmul_batch(pool_, std::span(inputs, pairs), std::span(weights, pairs), std::span(results, pairs));
  // Then every down projection on its own expert's SiLU(gate) · up.
  for (int64_t a = 0; a < num_active; ++a) {
    const int32_t expert = active[a];
    const MlpWeights& mlp = moe.experts[static_cast<size_t>(expert)];
    ExpertScratch& scratch = expert_scratch_[static_cast<size_t>(expert)];
    const int64_t tokens = scratch.input.n(), inner = mlp.gate.rows;
    silu_mul(scratch.gate.data(), scratch.up.data(), tokens * inner);
    scratch.down_input.reset(scratch.gate.data(), tokens, inner);
    inputs[a] = &scratch.down_input;
    weights[a] = &mlp.down;
    results[a] = outputs + expert_offset_[static_cast<size_t>(expert)] * h;
  }
  size_t downs = static_cast<size_t>(num_active);
  float* shared_out = shared != nullptr ? sized(down_, n * h) : nullptr;
  if (shared != nullptr) {
    silu_mul(gate_.data(), up_.data(), n * shared_inner);
    down_input_.reset(gate_.data(), n, shared_inner);
    inputs[downs] = &down_input_;
    weights[downs] = &shared->down;
    results[downs++] = shared_out;
  }
  matmul_batch(pool_, std::span(inputs, downs), std::span(weights, downs), std::span(results, downs));
  add_expert_outputs(outputs, num_active, out);
  // The shared experts' rows last, with weight 1, as moe_block adds them otherwise.
  if (shared != nullptr) add_scaled(out, shared_out, 1.0f, n * h);
  return true;
}

bool ErnieModel::experts_on_threads(const MoeWeights& moe, const float* input, int64_t n, int64_t num_active,
                                    float* out) {
  if (num_active == 0 || num_active < static_cast<int64_t>(pool_.num_threads())) return false;
  const int64_t h = config_.hidden_size;
  const int32_t* active = active_experts_.data();
  // Each expert's output rows start at its offset into routed_, in the order it lists them.
  float* outputs = sized(expert_out_, n * config_.moe->top_k * h);
  pool_.parallel_for(static_cast<size_t>(num_active), 1, [&](size_t begin, size_t end) {
    for (size_t a = begin; a < end; ++a) {
      const int32_t expert = active[a];
      const MlpWeights& mlp = moe.experts[static_cast<size_t>(expert)];
      ExpertScratch& scratch = expert_scratch_[static_cast<size_t>(expert)];
      gather_expert_input(expert, input);
      const int64_t tokens = scratch.input.n(), inner = mlp.gate.rows;
      mlp_into(this_thread_pool(), mlp, scratch.input, sized(scratch.gate, tokens * inner),
               sized(scratch.up, tokens * inner), scratch.down_input, outputs + expert_offset_[static_cast<size_t>(expert)] * h);
    }
  });
  add_expert_outputs(outputs, num_active, out);
  return true;
}

void ErnieModel::expert_parallel_moe(const MoeWeights& moe, int64_t n, float* out) {
  const int64_t h = config_.hidden_size;
  const int ranks = shard_.size, rank = shard_.rank;
  const int top_k = config_.moe->top_k, per_rank = config_.moe->num_experts / ranks;
  // The shared experts are a tensor-parallel MLP: partial sums, all-reduced.
  if (moe.shared) {
    input_.reset(normed_.data(), n, h);
    mlp_block(*moe.shared, input_, out);
    all_reduce(out, n * h);
  }
  // This rank routes its share of the tokens, [first, first + mine).
  std::vector<int>& shares = ep_counts_;
  shares.assign(static_cast<size_t>(4 * ranks), 0);
  const auto share_of = [&](int r) { return n * r / ranks; };
  const int64_t first = share_of(rank), mine = share_of(rank + 1) - first;
  route(moe, normed_.data() + first * h, mine);
  // Dispatch: every (token, expert) pair's row goes to the expert's rank, grouped by rank;
  // a record is the expert id (int32) then the row.
  const int64_t pairs = mine * top_k;
  const size_t record = sizeof(int32_t) + static_cast<size_t>(h) * sizeof(float);
  std::vector<int32_t>& order = ep_order_;  // pairs by destination rank
  order.resize(static_cast<size_t>(pairs));
  std::iota(order.begin(), order.end(), 0);
  std::stable_sort(order.begin(), order.end(),
                   [&](int32_t a, int32_t b) { return chosen_expert_[a] / per_rank < chosen_expert_[b] / per_rank; });
  int* send_pairs = shares.data();
  int* receive_pairs = shares.data() + ranks;
  for (const int32_t pair : order) ++send_pairs[chosen_expert_[static_cast<size_t>(pair)] / per_rank];
  std::vector<int> one(static_cast<size_t>(ranks), static_cast<int>(sizeof(int)));
  communicator_->all_to_all(send_pairs, one, receive_pairs, one);
  std::vector<uint8_t>& sent = ep_send_;
  sent.resize(static_cast<size_t>(pairs) * record);
  for (size_t i = 0; i < order.size(); ++i) {
    const int32_t pair = order[i];
    uint8_t* at = sent.data() + i * record;
    std::memcpy(at, &chosen_expert_[static_cast<size_t>(pair)], sizeof(int32_t));
    std::memcpy(at + sizeof(int32_t), normed_.data() + (first + pair / top_k) * h, static_cast<size_t>(h) * sizeof(float));
  }
  int64_t received = 0;
  std::vector<int> send_bytes(static_cast<size_t>(ranks)), receive_bytes(static_cast<size_t>(ranks));
  for (int r = 0; r < ranks; ++r) {
    send_bytes[static_cast<size_t>(r)] = static_cast<int>(send_pairs[r] * record);
    receive_bytes[static_cast<size_t>(r)] = static_cast<int>(receive_pairs[r] * record);
    received += receive_pairs[r];
  }
  std::vector<uint8_t>& arrived = ep_receive_;
  arrived.resize(static_cast<size_t>(received) * record);
  communicator_->all_to_all(sent.data(), send_bytes, arrived.data(), receive_bytes);

  // This rank's experts on the rows sent to them, each expert's rows together.
  float* results = sized(ep_results_, received * h);
  for (int local = 0; local < per_rank; ++local) {
    const int32_t expert = rank * per_rank + local;
    std::vector<int32_t>& rows = modality_rows_;
    rows.clear();
    for (int64_t i = 0; i < received; ++i) {
      int32_t id = 0;
      std::memcpy(&id, arrived.data() + static_cast<size_t>(i) * record, sizeof id);
      if (id == expert) rows.push_back(static_cast<int32_t>(i));
    }
    if (rows.empty()) continue;
    const int64_t count = static_cast<int64_t>(rows.size());
    float* gathered = sized(expert_in_, count * h);
    for (int64_t i = 0; i < count; ++i)
      std::memcpy(gathered + i * h, arrived.data() + static_cast<size_t>(rows[static_cast<size_t>(i)]) * record + sizeof(int32_t),
                  static_cast<size_t>(h) * sizeof(float));
    expert_input_.reset(gathered, count, h);
    const float* expert_out = mlp_forward(moe.experts[static_cast<size_t>(expert)], expert_input_);
    for (int64_t i = 0; i < count; ++i) std::copy_n(expert_out + i * h, h, results + rows[static_cast<size_t>(i)] * h);
  }
  // Combine: the outputs go back in the order the rows came, and each is added to its
  // token with the routing weight.
  for (int r = 0; r < ranks; ++r) {
    send_bytes[static_cast<size_t>(r)] = static_cast<int>(receive_pairs[r] * h * static_cast<int64_t>(sizeof(float)));
    receive_bytes[static_cast<size_t>(r)] = static_cast<int>(send_pairs[r] * h * static_cast<int64_t>(sizeof(float)));
  }
  float* returned = sized(ep_returned_, pairs * h);
  communicator_->all_to_all(results, send_bytes, returned, receive_bytes);
  float* share_out = sized(ep_share_out_, std::max<int64_t>(mine, 1) * h);
  std::fill_n(share_out, mine * h, 0.0f);
  for (size_t i = 0; i < order.size(); ++i) {
    const int32_t pair = order[i];
    add_scaled(share_out + (pair / top_k) * h, returned + static_cast<int64_t>(i) * h,
               chosen_weight_[static_cast<size_t>(pair)], h);
  }
  // Every rank needs every token's output: the shares are gathered.
  std::vector<int> gather_counts(static_cast<size_t>(ranks));
  for (int r = 0; r < ranks; ++r) gather_counts[static_cast<size_t>(r)] = static_cast<int>((share_of(r + 1) - share_of(r)) * h);
  float* all = sized(ep_gathered_, n * h);
  communicator_->all_gather(share_out, gather_counts, all);
  for_rows(n, [&](int64_t t0, int64_t t1) { add_scaled(out + t0 * h, all + t0 * h, 1.0f, (t1 - t0) * h); });
}

}  // namespace ernie
