#include "model/ernie_model.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <numeric>

#include "kernels/attention.h"
#include "kernels/matmul.h"
#include "kernels/ops.h"
#include "util/error.h"
#include "util/stopwatch.h"

namespace ernie {
namespace {

using Buffer = std::vector<float>;

Buffer linear(ThreadPool& pool, const float* x, int64_t n, const WeightMatrix& w) {
  Buffer y(static_cast<size_t>(n * w.rows));
  matmul(pool, x, n, w, y.data());
  return y;
}

// Experts chosen for one token and their mixing weights (spec §3 steps 2-4).
struct Routing {
  std::vector<int> experts;
  std::vector<float> weights;
};

Routing route_token(const float* router_logits, const MoeWeights& moe, const MoeConfig& config) {
  const int e = config.num_experts;
  std::vector<float> probs(router_logits, router_logits + e);
  softmax(probs.data(), e);
  // Selection uses p + bias; the weights use the unbiased p.
  std::vector<float> scores(probs);
  if (config.use_correction_bias)
    for (int i = 0; i < e; ++i) scores[static_cast<size_t>(i)] += moe.correction_bias[static_cast<size_t>(i)];
  std::vector<int> order(static_cast<size_t>(e));
  std::iota(order.begin(), order.end(), 0);
  std::partial_sort(order.begin(), order.begin() + config.top_k, order.end(), [&](int a, int b) {
    return scores[static_cast<size_t>(a)] > scores[static_cast<size_t>(b)] ||
           (scores[static_cast<size_t>(a)] == scores[static_cast<size_t>(b)] && a < b);
  });
  Routing routing;
  routing.experts.assign(order.begin(), order.begin() + config.top_k);
  float total = 0.0f;
  for (int expert : routing.experts) total += probs[static_cast<size_t>(expert)];
  const float denominator = std::max(total, static_cast<float>(config.norm_min));
  for (int expert : routing.experts) routing.weights.push_back(probs[static_cast<size_t>(expert)] / denominator);
  return routing;
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
                                             const LayerProgress& on_layer_loaded) {
  Stopwatch stopwatch;
  ModelConfig config = load_model_config(model_dir);
  std::unique_ptr<Checkpoint> checkpoint = Checkpoint::open(model_dir);
  ErnieWeights weights = load_ernie_weights(*checkpoint, config, on_layer_loaded);
  LoadReport report;
  report.tensor_bytes = checkpoint->total_tensor_bytes();
  report.num_files = checkpoint->num_files();
  report.layout = weights.layout;
  auto model = std::make_unique<ErnieModel>(std::move(config), std::move(checkpoint), std::move(weights), pool);
  report.seconds = stopwatch.seconds();
  model->load_report_ = report;
  return model;
}

ErnieModel::ErnieModel(ModelConfig config, std::unique_ptr<Checkpoint> checkpoint, ErnieWeights weights,
                       ThreadPool& pool)
    : config_(std::move(config)),
      checkpoint_(std::move(checkpoint)),
      weights_(std::move(weights)),
      pool_(pool),
      rope_inv_freq_(rope_inverse_frequencies(config_.head_dim, config_.rope_theta)) {}

std::unique_ptr<KvCache> ErnieModel::new_kv_cache() const {
  return std::make_unique<SequenceKvCache>(config_.num_hidden_layers, config_.kv_width());
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
}

std::vector<float> ErnieModel::forward(const ForwardBatch& batch) {
  validate(batch);
  const int64_t n = static_cast<int64_t>(batch.tokens.size());
  const int64_t h = config_.hidden_size;
  const float eps = static_cast<float>(config_.rms_norm_eps);
  for (const SequenceChunk& chunk : batch.sequences) chunk.cache->reserve(chunk.start_position + chunk.num_tokens);

  // x = Emb[token], no scaling.
  Buffer x(static_cast<size_t>(n * h));
  for (int64_t t = 0; t < n; ++t)
    convert_to_f32(weights_.embedding.dtype, weights_.embedding.row(batch.tokens[static_cast<size_t>(t)]),
                   x.data() + t * h, static_cast<size_t>(h));

  Buffer normed(x.size());
  Buffer block_out(x.size());
  for (int layer_index = 0; layer_index < config_.num_hidden_layers; ++layer_index) {
    const DecoderLayerWeights& layer = weights_.layers[static_cast<size_t>(layer_index)];
    rms_norm(x.data(), n, h, layer.input_norm.data(), eps, normed.data());
    attention_block(layer, layer_index, batch, normed, block_out);
    add_scaled(x.data(), block_out.data(), 1.0f, n * h);

    rms_norm(x.data(), n, h, layer.post_attention_norm.data(), eps, normed.data());
    if (layer.moe) {
      moe_block(*layer.moe, normed, n, block_out);
    } else {
      std::fill(block_out.begin(), block_out.end(), 0.0f);
      mlp_block(*layer.mlp, normed.data(), n, block_out.data());
    }
    add_scaled(x.data(), block_out.data(), 1.0f, n * h);
  }

  // Only the requested rows go through the final norm and the (large) head.
  const int64_t rows = static_cast<int64_t>(batch.logit_rows.size());
  Buffer last(static_cast<size_t>(rows * h));
  for (int64_t r = 0; r < rows; ++r)
    std::copy_n(x.data() + batch.logit_rows[static_cast<size_t>(r)] * h, h, last.data() + r * h);
  rms_norm(last.data(), rows, h, weights_.final_norm.data(), eps, last.data());
  Buffer logits = linear(pool_, last.data(), rows, weights_.lm_head);
  if (config_.ori_vocab_size) {
    // FastDeploy masks the padding rows of the vocabulary.
    const int64_t v = config_.vocab_size;
    for (int64_t r = 0; r < rows; ++r)
      std::fill(logits.begin() + r * v + *config_.ori_vocab_size, logits.begin() + (r + 1) * v,
                -std::numeric_limits<float>::infinity());
  }
  return logits;
}

void ErnieModel::attention_block(const DecoderLayerWeights& layer, int layer_index, const ForwardBatch& batch,
                                 const std::vector<float>& normed, std::vector<float>& out) {
  const int64_t n = static_cast<int64_t>(batch.tokens.size());
  const int heads = config_.num_attention_heads, kv_heads = config_.num_key_value_heads, hd = config_.head_dim;
  const int64_t q_width = config_.q_width(), kv_width = config_.kv_width();
  Buffer q = linear(pool_, normed.data(), n, layer.attention.q);
  Buffer k = linear(pool_, normed.data(), n, layer.attention.k);
  Buffer v = linear(pool_, normed.data(), n, layer.attention.v);

  // RoPE on q and k, then append k and v to each sequence's cache.
  struct TokenSlot {
    const SequenceChunk* chunk;
    int64_t position;
  };
  std::vector<TokenSlot> slots(static_cast<size_t>(n));
  for (const SequenceChunk& chunk : batch.sequences)
    for (int32_t i = 0; i < chunk.num_tokens; ++i)
      slots[static_cast<size_t>(chunk.first_token + i)] = {&chunk, chunk.start_position + i};
  for (int64_t t = 0; t < n; ++t) {
    const TokenSlot& slot = slots[static_cast<size_t>(t)];
    const float position = static_cast<float>(static_cast<double>(slot.position) / config_.compression_ratio);
    apply_rope(q.data() + t * q_width, heads, hd, position, rope_inv_freq_.data());
    apply_rope(k.data() + t * kv_width, kv_heads, hd, position, rope_inv_freq_.data());
    std::copy_n(k.data() + t * kv_width, kv_width, slot.chunk->cache->key(layer_index, slot.position));
    std::copy_n(v.data() + t * kv_width, kv_width, slot.chunk->cache->value(layer_index, slot.position));
  }

  // Row pointers of every sequence's cache, so the kernel never calls through KvCache.
  std::vector<std::vector<const float*>> key_rows(batch.sequences.size()), value_rows(batch.sequences.size());
  for (size_t s = 0; s < batch.sequences.size(); ++s) {
    const SequenceChunk& chunk = batch.sequences[s];
    const int64_t length = chunk.start_position + chunk.num_tokens;
    for (int64_t p = 0; p < length; ++p) {
      key_rows[s].push_back(chunk.cache->key(layer_index, p));
      value_rows[s].push_back(chunk.cache->value(layer_index, p));
    }
  }

  Buffer attended(static_cast<size_t>(n * q_width));
  const int group = heads / kv_heads;
  const float scale = static_cast<float>(1.0 / std::sqrt(static_cast<double>(hd)));
  pool_.parallel_for(static_cast<size_t>(n * heads), 0, [&](size_t begin, size_t end) {
    Buffer scores;
    for (size_t item = begin; item < end; ++item) {
      const int64_t t = static_cast<int64_t>(item) / heads;
      const int head = static_cast<int>(item % static_cast<size_t>(heads));
      const TokenSlot& slot = slots[static_cast<size_t>(t)];
      const size_t s = static_cast<size_t>(slot.chunk - batch.sequences.data());
      const int64_t n_keys = slot.position + 1;  // causal: itself and everything before
      scores.resize(static_cast<size_t>(n_keys));
      attend_one_head(q.data() + t * q_width + head * hd, key_rows[s].data(), value_rows[s].data(), n_keys,
                      static_cast<int64_t>(head / group) * hd, hd, scale, scores.data(),
                      attended.data() + t * q_width + head * hd);
    }
  });
  matmul(pool_, attended.data(), n, layer.attention.o, out.data());
}

void ErnieModel::mlp_block(const MlpWeights& mlp, const float* input, int64_t n, float* out) {
  Buffer gate = linear(pool_, input, n, mlp.gate);
  const Buffer up = linear(pool_, input, n, mlp.up);
  silu_mul(gate.data(), up.data(), static_cast<int64_t>(gate.size()));
  const Buffer down = linear(pool_, gate.data(), n, mlp.down);
  add_scaled(out, down.data(), 1.0f, static_cast<int64_t>(down.size()));
}

void ErnieModel::moe_block(const MoeWeights& moe, const std::vector<float>& normed, int64_t n,
                           std::vector<float>& out) {
  const MoeConfig& moe_config = *config_.moe;
  const int64_t h = config_.hidden_size;
  const int e = moe_config.num_experts;
  // The router runs in fp32 on fp32 weights (spec §3 step 1).
  const Buffer router_logits = linear(pool_, normed.data(), n, f32_matrix_view(moe.router.data(), e, h));

  // Group tokens by expert so each expert's weights stream once for all its tokens.
  std::vector<std::vector<std::pair<int64_t, float>>> assigned(static_cast<size_t>(e));
  for (int64_t t = 0; t < n; ++t) {
    const Routing routing = route_token(router_logits.data() + t * e, moe, moe_config);
    for (size_t k = 0; k < routing.experts.size(); ++k)
      assigned[static_cast<size_t>(routing.experts[k])].push_back({t, routing.weights[k]});
  }

  std::fill(out.begin(), out.end(), 0.0f);
  Buffer gathered, expert_out;
  for (int expert = 0; expert < e; ++expert) {
    const auto& tokens = assigned[static_cast<size_t>(expert)];
    if (tokens.empty()) continue;
    const int64_t count = static_cast<int64_t>(tokens.size());
    gathered.resize(static_cast<size_t>(count * h));
    for (int64_t i = 0; i < count; ++i)
      std::copy_n(normed.data() + tokens[static_cast<size_t>(i)].first * h, h, gathered.data() + i * h);
    expert_out.assign(static_cast<size_t>(count * h), 0.0f);
    mlp_block(moe.experts[static_cast<size_t>(expert)], gathered.data(), count, expert_out.data());
    for (int64_t i = 0; i < count; ++i) {
      const auto& [token, weight] = tokens[static_cast<size_t>(i)];
      add_scaled(out.data() + token * h, expert_out.data() + i * h, weight, h);
    }
  }
  if (moe.shared) mlp_block(*moe.shared, normed.data(), n, out.data());
}

}  // namespace ernie
