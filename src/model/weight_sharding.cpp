#include "model/weight_sharding.h"

#include <cstring>

#include "model/quantization.h"
#include "util/error.h"

namespace ernie {
namespace {

void require_dense(const WeightMatrix& matrix, const char* what) {
  if (matrix.format == WeightFormat::kWint2)
    fail("tensor parallelism does not slice FastDeploy's WINT2 experts yet; run the WINT2 checkpoint with "
         "--tensor-parallel-size 1 (at 2 bits a weight it is made to fit one machine)");
  if (matrix.input_absmax > 0.0f)
    fail("tensor parallelism divides FastDeploy's W4A8 experts only along the release's own rank parts (its rank0/ .. "
         "directories, whose scales belong to one part each); this release has one part: run it with "
         "--tensor-parallel-size 1");
  if (!matrix.dense())
    fail("tensor parallelism slices dense weights, and ", what,
         " is packed already (a pre-quantized checkpoint): give the original checkpoint with --quantization instead");
}

// The part [rank * total / size, ...) of an evenly divisible size.
int64_t part(int64_t total, const ShardPlan& plan) { return total / plan.size; }

MlpWeights shard_mlp(const MlpWeights& mlp, const ShardPlan& plan) {
  const int64_t inner = part(mlp.gate.rows, plan), first = inner * plan.rank;
  return {shard_rows(mlp.gate, first, inner), shard_rows(mlp.up, first, inner), shard_columns(mlp.down, first, inner)};
}

}  // namespace

ShardShape shard_shape(const ModelConfig& config, const ShardPlan& plan) {
  const int n = plan.size;
  if (n < 1 || plan.rank < 0 || plan.rank >= n) fail("internal: rank ", plan.rank, " of ", n);
  const auto divides = [&](int64_t value, const char* what) {
    if (value % n != 0)
      fail(what, " (", value, ") does not divide over --tensor-parallel-size ", n, "; choose a size that divides it");
  };
  ShardShape shape;
  const int heads = config.num_attention_heads, kv = config.num_key_value_heads;
  divides(heads, "num_attention_heads");
  shape.heads = heads / n;
  shape.first_head = shape.heads * plan.rank;
  if (kv >= n) {
    divides(kv, "num_key_value_heads");
    shape.kv_heads = kv / n;
    shape.first_kv_head = shape.kv_heads * plan.rank;
  } else {
    // Fewer KV heads than ranks: each is replicated on n / kv ranks, whose query heads
    // all belong to its group.
    if (n % kv != 0)
      fail("num_key_value_heads (", kv, ") is below --tensor-parallel-size ", n,
           " and does not divide it, so the KV heads cannot be replicated evenly");
    shape.kv_heads = 1;
    shape.first_kv_head = plan.rank / (n / kv);
  }
  if (config.vl && n > 1) fail("tensor parallelism is not available for ERNIE-4.5-VL models yet");
  const bool has_dense_layer = !config.moe || config.moe->layer_start_index > 0 || config.moe->layer_interval > 1 ||
                               config.moe->layer_end_index < config.num_hidden_layers - 1;
  if (has_dense_layer) divides(config.intermediate_size, "intermediate_size");
  if (config.moe) {
    if (plan.expert_parallel) divides(config.moe->num_experts, "moe_num_experts");
    else divides(config.moe->intermediate_size, "moe_intermediate_size");
    if (config.moe->num_shared_experts > 0)
      divides(static_cast<int64_t>(config.moe->intermediate_size) * config.moe->num_shared_experts,
              "the shared experts' width");
  }
  // Vocabulary rows: as even as possible, the first ranks one more.
  const int64_t v = config.vocab_size;
  for (int r = 0; r < n; ++r) shape.vocab_counts.push_back(static_cast<int>(v / n + (r < v % n ? 1 : 0)));
  for (int r = 0; r < plan.rank; ++r) shape.first_vocab += shape.vocab_counts[static_cast<size_t>(r)];
  shape.vocab = shape.vocab_counts[static_cast<size_t>(plan.rank)];
  return shape;
}

WeightMatrix shard_rows(const WeightMatrix& matrix, int64_t first, int64_t count) {
  require_dense(matrix, "a Linear");
  if (first < 0 || count < 0 || first + count > matrix.rows) fail("internal: rows ", first, "+", count, " of ", matrix.rows);
  WeightMatrix slice = matrix.row_slice(first, count);
  if (!matrix.storage) return slice;  // mapped checkpoint bytes: a view costs nothing
  const size_t bytes = static_cast<size_t>(count) * matrix.row_bytes();
  std::shared_ptr<uint8_t[]> owned(new uint8_t[bytes]);
  std::memcpy(owned.get(), matrix.row(first), bytes);
  slice.data = owned.get();
  slice.storage = std::shared_ptr<const void>(owned, owned.get());
  return slice;
}

WeightMatrix shard_columns(const WeightMatrix& matrix, int64_t first, int64_t count) {
  require_dense(matrix, "a Linear");
  if (first < 0 || count < 0 || first + count > matrix.cols) fail("internal: columns ", first, "+", count, " of ", matrix.cols);
  const size_t element = dtype_size(matrix.dtype), row_bytes = static_cast<size_t>(count) * element;
  std::shared_ptr<uint8_t[]> owned(new uint8_t[static_cast<size_t>(matrix.rows) * row_bytes]);
  for (int64_t r = 0; r < matrix.rows; ++r)
    std::memcpy(owned.get() + static_cast<size_t>(r) * row_bytes, matrix.row(r) + static_cast<size_t>(first) * element,
                row_bytes);
  WeightMatrix slice = matrix;
  slice.cols = count;
  slice.data = owned.get();
  slice.storage = std::shared_ptr<const void>(owned, owned.get());
  release_mapped_pages(matrix);  // the whole was read to copy the slice
  return slice;
}

void shard_layer(DecoderLayerWeights& layer, const ModelConfig& config, const ShardPlan& plan) {
  const ShardShape shape = shard_shape(config, plan);
  const int64_t hd = config.head_dim;
  AttentionWeights& attention = layer.attention;
  attention.q = shard_rows(attention.q, shape.first_head * hd, shape.heads * hd);
  attention.k = shard_rows(attention.k, shape.first_kv_head * hd, shape.kv_heads * hd);
  attention.v = shard_rows(attention.v, shape.first_kv_head * hd, shape.kv_heads * hd);
  attention.o = shard_columns(attention.o, shape.first_head * hd, shape.heads * hd);
  for (std::vector<float>* absmax : {&layer.key_absmax, &layer.value_absmax})
    if (!absmax->empty())
      *absmax = std::vector<float>(absmax->begin() + shape.first_kv_head * hd,
                                   absmax->begin() + (shape.first_kv_head + shape.kv_heads) * hd);
  if (layer.mlp) layer.mlp = shard_mlp(*layer.mlp, plan);
  if (layer.moe) {
    MoeWeights& moe = *layer.moe;
    const int64_t e = static_cast<int64_t>(moe.experts.size()), mine = e / plan.size;
    if (moe.expert_parts > 1) {
      // A pre-sharded release's parts are whole: each rank keeps as many as divide evenly.
      if (plan.expert_parallel)
        fail("expert parallelism is not available over FastDeploy's pre-sharded W4A8 experts; use tensor parallelism");
      if (moe.expert_parts % plan.size != 0)
        fail("the release is sharded into ", moe.expert_parts, " rank parts, which --tensor-parallel-size ", plan.size,
             " does not divide");
      const int per_rank = moe.expert_parts / plan.size;
      for (int64_t i = 0; i < e; ++i)
        if ((i % moe.expert_parts) / per_rank != plan.rank) moe.experts[static_cast<size_t>(i)] = MlpWeights{};
    } else {
      for (int64_t expert = 0; expert < e; ++expert) {
        MlpWeights& weights = moe.experts[static_cast<size_t>(expert)];
        if (!plan.expert_parallel) weights = shard_mlp(weights, plan);
        else if (expert / mine != plan.rank) weights = MlpWeights{};  // another rank's expert
      }
    }
    if (moe.shared) moe.shared = shard_mlp(*moe.shared, plan);
  }
}

WeightMatrix shard_lm_head(const WeightMatrix& head, const ModelConfig& config, const ShardPlan& plan) {
  const ShardShape shape = shard_shape(config, plan);
  return shard_rows(head, shape.first_vocab, shape.vocab);
}

}  // namespace ernie
