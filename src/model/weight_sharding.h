// Which part of an ERNIE model one process holds under tensor (and expert) parallelism,
// and the slicing of the weights to it, as FastDeploy shards them
// (fastdeploy-behaviour.md §10):
//   - attention by heads: q/k/v column-parallel (rows of [out, in]), o_proj row-parallel
//     (columns); KV heads replicated when there are fewer than ranks, each rank keeping
//     the one its query heads read;
//   - MLPs (dense layers, shared experts, and every routed expert under TP) by their
//     inner dimension: gate/up column-parallel, down row-parallel;
//   - expert parallelism instead places whole routed experts, num_experts / N per rank;
//   - the LM head by vocabulary rows (the logits are gathered on rank 0);
//   - norms, router and embedding replicated (the embedding is a lookup; FastDeploy
//     splits it by vocabulary to save memory, which matters little beside the layers).
// A row-parallel partial output is summed over the ranks (all-reduce) by the model.
#pragma once

#include <cstdint>
#include <vector>

#include "model/config.h"
#include "model/ernie_weights.h"

namespace ernie {

struct ShardPlan {
  int rank = 0;
  int size = 1;                  // --tensor-parallel-size
  bool expert_parallel = false;  // --enable-expert-parallel: whole experts per rank
  bool sharded() const { return size > 1; }
};

// What one rank computes.
struct ShardShape {
  int heads = 0;            // query heads
  int first_head = 0;
  int kv_heads = 0;         // key/value heads kept (1 when replicated)
  int first_kv_head = 0;
  int64_t first_vocab = 0;  // LM head rows
  int64_t vocab = 0;
  std::vector<int> vocab_counts;  // every rank's LM head rows, rank order
};

// Checks that the model divides over the plan (heads, KV heads, inner sizes, experts)
// and returns this rank's shape; fails naming what does not divide.
ShardShape shard_shape(const ModelConfig& config, const ShardPlan& plan);

// Rows [first, first + count) of a dense matrix: a view of mapped checkpoint bytes, or
// an owned copy when the matrix owns its bytes (so the whole can be freed).
WeightMatrix shard_rows(const WeightMatrix& matrix, int64_t first, int64_t count);
// Columns [first, first + count) of a dense matrix, as an owned copy.
WeightMatrix shard_columns(const WeightMatrix& matrix, int64_t first, int64_t count);

// Replaces a decoder layer's weights by this rank's part of them.
void shard_layer(DecoderLayerWeights& layer, const ModelConfig& config, const ShardPlan& plan);
// This rank's rows of the LM head.
WeightMatrix shard_lm_head(const WeightMatrix& head, const ModelConfig& config, const ShardPlan& plan);

}  // namespace ernie
