// What --quantization means for an ERNIE model, with FastDeploy's spelling and rules
// (reference §8), and applying it to loaded weights.
//
//   wint8           every Linear int8 (per output channel)
//   wint4           dense models: every Linear int4 (group-wise); MoE models: FastDeploy's
//                   rule, dense layers wint8 and routed experts wint4
//   block_wise_fp8  every Linear FP8 e4m3 with 128x128 block scales
//   {"quantization":"mix_quant","dense_quant_type":..,"moe_quant_type":..,
//    "kv_cache_quant_type":"int8"}   per-part choice, FastDeploy's JSON form; the KV cache
//                   may also be "bfloat16" (the engine's default) or "float32"
// The embedding stays bf16 and the router fp32. Unlike FastDeploy, the LM head is
// quantized too (int8 under wint8, int6 under wint4, fp8 under block_wise_fp8; mix_quant
// follows dense_quant_type): on a CPU decode streams it every token and it is a third of
// the 0.3B model, half of the scaled 21B shape's bytes per token at 4 bits.
// ERNIE_QUANTIZE_LM_HEAD=0 keeps it bf16, =int8 int8 under every integer name.
#pragma once

#include <optional>
#include <string>
#include <string_view>

#include "kernels/flash_attention.h"
#include "model/config.h"
#include "model/ernie_weights.h"
#include "tensor/weight_matrix.h"
#include "util/thread_pool.h"

namespace ernie {

struct QuantizationPlan {
  WeightFormat dense = WeightFormat::kDense;    // attention, dense MLPs, shared experts, MTP
  WeightFormat experts = WeightFormat::kDense;  // routed MoE experts
  WeightFormat head = WeightFormat::kDense;     // the LM head
  KvStorage kv_cache = KvStorage::kF32;
  // kv_cache_quant_type as the flag named it; unset, the caller's default applies
  // (the engine's is bf16, the numerics tools' fp32).
  std::optional<KvStorage> kv_cache_named;
  // A FastDeploy release's routed experts, read as stored ("WINT2", "W4A8"); `experts`
  // then applies to those it holds in float only.
  std::string experts_as_stored;

  bool quantizes_weights() const;
  // e.g. "dense wint8, experts wint4, LM head wint8, KV cache int8".
  std::string describe() const;
};

// What ERNIE_QUANTIZE_LM_HEAD asks of the head: "1" (the default) the format above,
// "0" bf16, "int8" int8 where the rule would give int6.
enum class HeadRule { kFollow, kBf16, kInt8 };

// Parses the --quantization value (a name or mix_quant JSON) for this model; an empty
// value means unquantized. Throws ernie::Error naming the accepted values otherwise.
QuantizationPlan parse_quantization(std::string_view value, const ModelConfig& config, HeadRule head = HeadRule::kFollow);

// Replaces the weights the plan names by quantized copies (in parallel on `pool`).
// Matrices a format cannot hold (input width not a multiple of 32 for the integer
// formats) stay bf16; the count of those is returned so the caller can say so.
// `report_progress`: bytes quantized so far on stderr (util/progress.h).
int quantize_weights(ErnieWeights& weights, const QuantizationPlan& plan, ThreadPool& pool, bool report_progress = false);

// Repacks every bf16 weight matrix (Linears and the vision tower) for bf16 products
// (kernels/matmul_bf16.h); the loader does it when bf16_products_active(). Returns how
// many it packed.
int pack_bf16_weights(ErnieWeights& weights, ThreadPool& pool);

// Gives the pages of a zero-copy view of the checkpoint mapping back to the kernel once
// a copy replaces it (they were read making the copy and would stay in the process's RSS;
// the page cache keeps them). Owned matrices are left alone.
void release_mapped_pages(const WeightMatrix& view);
// The same for any bytes of the checkpoint mapping (a tensor read into another layout).
void release_mapped_range(const void* data, size_t bytes);

// Every Linear weight of the text decoder and MTP head (not the embedding, the routers
// or the vision tower), always in the same order: what quantization and its cache visit.
std::vector<WeightMatrix*> linear_weights(ErnieWeights& weights);
std::vector<const WeightMatrix*> linear_weights(const ErnieWeights& weights);

// Bytes of every weight matrix as the kernels hold them (the tied head counted once).
uint64_t resident_weight_bytes(const ErnieWeights& weights);

}  // namespace ernie
