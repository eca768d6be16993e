// Causal attention for a chunk of query tokens of one sequence and the query heads that
// share one kv head (GQA), computed flash-style: key blocks are visited once per tile of
// (query token x head) rows with an online softmax, so no n_queries x n_keys score matrix
// is ever materialised and every K/V row loaded serves the whole tile.
//
// Keys and values are reached through per-position row pointers (contiguous or paged cache
// alike), stored either as fp32 or as int8 with one scale per kv head.
#pragma once

#include <cstddef>
#include <cstdint>
#include <vector>

namespace ernie {

// How one cached position's keys (or values) for all kv heads are stored.
//   kF32:  float[kv_heads * head_dim]
//   kInt8: int8_t[kv_heads * head_dim], then at the next 4-byte aligned offset float[kv_heads]
//          scales; element = int8 * scale[head], scale = max|x| / 127 over that head's
//          head_dim values (an all-zero head has scale 0).
//   kBF16: bfloat16[kv_heads * head_dim], rounded to nearest even (the serving default:
//          FastDeploy's cache dtype, half fp32's bytes and read traffic).
enum class KvStorage : uint8_t { kF32, kInt8, kBF16 };
const char* kv_storage_name(KvStorage storage);  // "fp32", "int8", "bf16"

size_t kv_row_bytes(KvStorage storage, int kv_heads, int head_dim);
// Writes one row from fp32 values [kv_heads * head_dim] in the given storage.
void store_kv_row(const float* values, int kv_heads, int head_dim, KvStorage storage, void* row);
// A kInt8 row with static per-channel scales (FastDeploy's C8 cache): channel c is
// stored as clip(round_half_even(x · inverse_scales[c]), ±127) and every head's scale is
// 1, so attention reads the codes themselves; the caller folds the per-channel
// dequantization scales into the queries (keys) and into the attention output (values).
void store_kv_row_static(const float* values, int kv_heads, int head_dim, const float* inverse_scales, void* row);
// Reads one row back to fp32 (tests, debugging).
void load_kv_row(const void* row, int kv_heads, int head_dim, KvStorage storage, float* values);

struct AttentionShape {
  int heads;       // query heads
  int kv_heads;    // heads must be a multiple of kv_heads
  int head_dim;    // any value >= 1
  float scale;     // applied to q·k, usually 1/sqrt(head_dim)
  KvStorage storage;
};

// Caller-owned working memory, reused across calls: it only grows, so in steady state the
// kernel never allocates. One per thread.
struct AttentionScratch {
  std::vector<float> storage;
};

// Grows `scratch` to what any call with this head_dim needs, so none grows it later.
void reserve_attention_scratch(AttentionScratch& scratch, int head_dim);

// Causal attention for `num_queries` consecutive query tokens at positions
// first_position .. first_position + num_queries - 1, for the heads/kv_heads query heads
// that share kv head `kv_head` (query head h uses kv head h / (heads / kv_heads)).
// Query token i sees keys 0 .. first_position + i.
// key_rows[p] / value_rows[p] point at position p's row (format shape.storage) for every
// p < first_position + num_queries; rows need no particular alignment.
// q: token i's heads start at q + i * q_stride (all `heads` heads, head-major, head_dim
// each, RoPE applied); out has the same layout with out_stride, and only the group's heads
// are written. Single-threaded; callers parallelise over sequences, kv heads and query
// chunks (a chunk's cost grows with its last position: every query sees all earlier keys).
//
// Numerics: fp32 throughout (except where attention_uses_bf16_products), scores scaled and shifted by the running max before the
// exponential (a degree-7 polynomial for 2^x, a few ulp), so results match a double
// reference to ~1e-6 relative of max|v| for ordinary scores; they differ from
// attend_one_head only by rounding.
void causal_attention_group(const AttentionShape& shape, const void* const* key_rows, const void* const* value_rows,
                            int kv_head, const float* q, int64_t q_stride, int64_t first_position, int num_queries,
                            float* out, int64_t out_stride, AttentionScratch& scratch);

// The same, with the output rounded to bf16 into out's rows instead, bit for bit what
// Bf16Activations::round makes of the fp32 output: a bf16-product consumer's input
// written directly, with no fp32 copy written and read back. Only where
// attention_uses_bf16_products(shape) (it fails elsewhere).
void causal_attention_group(const AttentionShape& shape, const void* const* key_rows, const void* const* value_rows,
                            int kv_head, const float* q, int64_t q_stride, int64_t first_position, int num_queries,
                            uint16_t* out, int64_t out_stride, AttentionScratch& scratch);

// Whether calls with this shape multiply in bf16: with bf16 products switched on
// (set_bf16_products, kernels/matmul.h) on a CPU with AVX512-BF16, a bf16 cache and
// head_dim a multiple of 32. Such a call rounds the queries to bf16 (the scale multiplies
// the fp32 scores after) and the softmax probabilities to bf16 for P·V, as flash
// attention on bf16 tensors does; scores, softmax and sums stay fp32. Each probability's
// rounding moves the output by at most 2^-8 of max|v|. Decode-sized calls and prefill
// tiles alike, and a position's output is the same bits whichever call computes it.
bool attention_uses_bf16_products(const AttentionShape& shape);

// The same without the causal mask: every one of the num_queries query tokens (q rows as
// above) sees all keys 0 .. num_keys - 1 (the vision transformer's attention within one
// image or frame).
void bidirectional_attention_group(const AttentionShape& shape, const void* const* key_rows,
                                   const void* const* value_rows, int kv_head, const float* q, int64_t q_stride,
                                   int64_t num_keys, int num_queries, float* out, int64_t out_stride,
                                   AttentionScratch& scratch);

}  // namespace ernie
