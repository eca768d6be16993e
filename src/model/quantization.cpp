#include "model/quantization.h"

#include "util/progress.h"

#include <optional>

#include <sys/mman.h>
#include <unistd.h>

#include <nlohmann/json.hpp>

#include "kernels/matmul_bf16.h"
#include "kernels/quantize.h"
#include "util/error.h"

namespace ernie {
namespace {

constexpr const char* kAccepted =
    "wint8, wint4, block_wise_fp8, or mix_quant JSON such as "
    "'{\"quantization\":\"mix_quant\",\"dense_quant_type\":\"wint8\",\"moe_quant_type\":\"wint4\","
    "\"kv_cache_quant_type\":\"int8\"}'";

WeightFormat weight_format_or_fail(std::string_view name, std::string_view what) {
  const std::optional<WeightFormat> format = parse_weight_format(name);
  if (format == WeightFormat::kInt6)
    fail(what, " \"int6\" is the LM head's format under the 4-bit names, not a quantization of its own; use ", kAccepted);
  if (format) return *format;
  static constexpr std::string_view kFastDeployOnly[] = {"wint2",      "weight_only",     "w4afp8", "w8a8",
                                                         "w4a8",       "wfp8afp8",        "kvcache",
                                                         "modelopt_fp4", "tensor_wise_fp8", "mxfp4"};
  for (std::string_view known : kFastDeployOnly)
    if (name == known)
      fail(what, " \"", name, "\" is a FastDeploy GPU scheme ernie.cpp does not run on CPUs; use ", kAccepted);
  fail(what, " \"", name, "\" is not a quantization ernie.cpp knows; use ", kAccepted);
}

// nullopt: not named (the caller's default applies).
std::optional<KvStorage> kv_storage_or_fail(std::string_view name) {
  if (name.empty() || name == "none") return std::nullopt;
  if (name == "int8") return KvStorage::kInt8;
  if (name == "float32" || name == "fp32") return KvStorage::kF32;
  if (name == "bfloat16" || name == "bf16") return KvStorage::kBF16;
  fail("kv_cache_quant_type \"", name,
       "\" is not supported; ernie.cpp keeps the KV cache in \"bfloat16\", \"float32\" or \"int8\" (one dynamic "
       "scale per token and kv head)");
}

std::string string_field(const nlohmann::json& object, const char* key) {
  if (!object.contains(key)) return "";
  if (!object[key].is_string()) fail("--quantization: \"", key, "\" must be a string");
  return object[key].get<std::string>();
}

// The LM head follows the width the value names: int8 under wint8, int6 under wint4 (as
// llama.cpp's 4-bit files keep their output matrix in Q6_K), FP8 under FP8.
WeightFormat head_format(WeightFormat named, HeadRule rule) {
  if (rule == HeadRule::kBf16 || named == WeightFormat::kDense) return WeightFormat::kDense;
  if (named == WeightFormat::kFp8) return WeightFormat::kFp8;
  if (rule == HeadRule::kInt8) return WeightFormat::kInt8;
  return named == WeightFormat::kInt4 ? WeightFormat::kInt6 : WeightFormat::kInt8;
}

QuantizationPlan uniform(WeightFormat format, HeadRule head) {
  QuantizationPlan plan;
  plan.dense = plan.experts = format;
  plan.head = head_format(format, head);
  return plan;
}

}  // namespace

bool QuantizationPlan::quantizes_weights() const {
  return dense != WeightFormat::kDense || experts != WeightFormat::kDense || head != WeightFormat::kDense;
}

std::string QuantizationPlan::describe() const {
  const std::string routed = experts_as_stored.empty()
                                 ? std::string(weight_format_name(experts))
                                 : str_cat(experts_as_stored, " as stored (", weight_format_name(experts), " where held in float)");
  return str_cat("dense layers ", weight_format_name(dense), ", experts ", routed, ", LM head ", weight_format_name(head),
                 ", KV cache ", kv_storage_name(kv_cache));
}

QuantizationPlan parse_quantization(std::string_view value, const ModelConfig& config, HeadRule head) {
  if (value.empty() || value == "none" || value == "bf16") return {};
  if (value.front() == '{') {
    nlohmann::json object;
    try {
      object = nlohmann::json::parse(value);
    } catch (const nlohmann::json::exception& e) {
      fail("--quantization is not valid JSON (", e.what(), "); expected ", kAccepted);
    }
    if (!object.is_object()) fail("--quantization JSON must be an object; expected ", kAccepted);
    for (const auto& [key, unused] : object.items())
      if (key != "quantization" && key != "dense_quant_type" && key != "moe_quant_type" &&
          key != "kv_cache_quant_type")
        fail("--quantization: unknown key \"", key,
             "\"; mix_quant takes quantization, dense_quant_type, moe_quant_type and kv_cache_quant_type");
    const std::string scheme = string_field(object, "quantization");
    if (!scheme.empty() && scheme != "mix_quant") {
      QuantizationPlan plan = uniform(weight_format_or_fail(scheme, "--quantization"), head);
      plan.kv_cache_named = kv_storage_or_fail(string_field(object, "kv_cache_quant_type"));
      plan.kv_cache = plan.kv_cache_named.value_or(plan.kv_cache);
      return plan;
    }
    QuantizationPlan plan;
    plan.dense = weight_format_or_fail(string_field(object, "dense_quant_type"), "dense_quant_type");
    const std::string moe = string_field(object, "moe_quant_type");
    plan.experts = moe.empty() ? plan.dense : weight_format_or_fail(moe, "moe_quant_type");
    plan.head = head_format(plan.dense, head);
    plan.kv_cache_named = kv_storage_or_fail(string_field(object, "kv_cache_quant_type"));
    plan.kv_cache = plan.kv_cache_named.value_or(plan.kv_cache);
    return plan;
  }
  const WeightFormat format = weight_format_or_fail(value, "--quantization");
  QuantizationPlan plan = uniform(format, head);
  // FastDeploy rewrites wint4 on ERNIE MoE models to dense wint8 + experts wint4.
  if (format == WeightFormat::kInt4 && config.moe) plan.dense = WeightFormat::kInt8;
  return plan;
}

namespace {

// The part of the model a Linear belongs to, which decides its format.
enum class LinearRole { kDense, kExpert, kHead };

// Calls visit(matrix, role) for every Linear weight (not the embedding or the router).
template <typename Weights, typename Visit>
void for_each_linear(Weights& weights, Visit visit) {
  auto visit_mlp = [&](auto& mlp, LinearRole role) {
    visit(mlp.gate, role);
    visit(mlp.up, role);
    visit(mlp.down, role);
  };
  auto visit_layer = [&](auto& layer) {
    visit(layer.attention.q, LinearRole::kDense);
    visit(layer.attention.k, LinearRole::kDense);
    visit(layer.attention.v, LinearRole::kDense);
    visit(layer.attention.o, LinearRole::kDense);
    if (layer.mlp) visit_mlp(*layer.mlp, LinearRole::kDense);
    if (layer.moe) {
      for (auto& expert : layer.moe->experts) visit_mlp(expert, LinearRole::kExpert);
      if (layer.moe->shared) visit_mlp(*layer.moe->shared, LinearRole::kDense);
    }
    if (layer.vision_moe)
      for (auto& expert : layer.vision_moe->experts) visit_mlp(expert, LinearRole::kExpert);
  };
  for (auto& layer : weights.layers) visit_layer(layer);
  for (auto& mtp : weights.mtp) {
    visit(mtp.linear_projection, LinearRole::kDense);
    visit_layer(mtp.block);
  }
  visit(weights.lm_head, LinearRole::kHead);
}

// Calls visit(matrix) for every weight matrix of the vision tower.
template <typename Weights, typename Visit>
void for_each_vision_matrix(Weights& weights, Visit visit) {
  if (!weights.vision) return;
  auto& tower = *weights.vision;
  visit(tower.patch_embed);
  for (auto& block : tower.blocks)
    for (auto* linear : {&block.qkv, &block.proj, &block.fc1, &block.fc2}) visit(linear->weight);
  for (auto* linear : {&tower.spatial1, &tower.spatial2, &tower.temporal1, &tower.temporal2, &tower.projection})
    visit(linear->weight);
}

}  // namespace

// A zero-copy view's pages in the checkpoint mapping were read while quantizing it and
// would stay resident; once the quantized copy replaces it they go back to the kernel
// (the page cache keeps them, the process's RSS does not). Only whole pages inside the
// view are released, so a neighbouring tensor sharing a boundary page keeps it.
void release_mapped_range(const void* data, size_t bytes) {
  const auto page = static_cast<uintptr_t>(sysconf(_SC_PAGESIZE));
  const auto first = reinterpret_cast<uintptr_t>(data);
  const uintptr_t begin = (first + page - 1) / page * page;
  const uintptr_t end = (first + bytes) / page * page;
  if (end > begin) madvise(reinterpret_cast<void*>(begin), end - begin, MADV_DONTNEED);
}

void release_mapped_pages(const WeightMatrix& view) {
  if (view.storage != nullptr || view.data == nullptr) return;  // owned copies are freed with their storage
  release_mapped_range(view.data, static_cast<size_t>(view.rows) * view.row_bytes());
}

namespace {

using Conversions = std::vector<std::pair<WeightMatrix*, WeightFormat>>;

// Replaces each matrix by its copy in the paired format (in parallel) and gives a
// zero-copy source's mapped pages back. Returns how many the format cannot hold (they
// stay as they are). `progress_label`: bytes converted so far on stderr, when set.
int convert_weights(const ErnieWeights& weights, Conversions& work, ThreadPool& pool, const char* progress_label) {
  std::vector<char> kept_dense(work.size(), 0);
  std::optional<ByteProgress> progress;
  if (progress_label != nullptr) {
    uint64_t total = 0;
    for (const auto& [matrix, format] : work) total += weight_bytes(*matrix);
    progress.emplace(progress_label, total);
  }
  pool.parallel_for(work.size(), 1, [&](size_t begin, size_t end) {
    for (size_t i = begin; i < end; ++i) {
      auto& [matrix, format] = work[i];
      if (progress) progress->add(weight_bytes(*matrix));
      if (!can_quantize(*matrix, format)) {
        kept_dense[i] = 1;
        continue;
      }
      const WeightMatrix source = *matrix;
      *matrix = quantize_weight(source, format);
      // The tied head's source is the embedding (or, under tensor parallelism, a slice of
      // it), which lookups still read.
      const auto* first = static_cast<const uint8_t*>(source.data);
      const auto* embedding = static_cast<const uint8_t*>(weights.embedding.data);
      const bool in_embedding = embedding != nullptr && first >= embedding &&
                                first < embedding + weights.embedding.rows * weights.embedding.row_bytes();
      if (!in_embedding) release_mapped_pages(source);
    }
  });
  int kept = 0;
  for (char k : kept_dense) kept += k;
  return kept;
}

}  // namespace

int quantize_weights(ErnieWeights& weights, const QuantizationPlan& plan, ThreadPool& pool, bool report_progress) {
  Conversions work;
  for_each_linear(weights, [&](WeightMatrix& matrix, LinearRole role) {
    const WeightFormat format = role == LinearRole::kDense    ? plan.dense
                                : role == LinearRole::kExpert ? plan.experts
                                                              : plan.head;
    // Linears a pre-quantized checkpoint already holds packed stay as they are.
    // Expert parallelism leaves other ranks' experts empty.
    if (format != WeightFormat::kDense && matrix.dense() && !matrix.empty()) work.push_back({&matrix, format});
  });
  return convert_weights(weights, work, pool, report_progress ? "quantizing weights" : nullptr);
}

int pack_bf16_weights(ErnieWeights& weights, ThreadPool& pool) {
  // Every bf16 Linear, and the vision tower (not quantized, but multiplied alike).
  Conversions work;
  const auto add = [&](WeightMatrix& matrix) {
    if (can_pack_bf16(matrix)) work.push_back({&matrix, WeightFormat::kBf16Packed});
  };
  for_each_linear(weights, [&](WeightMatrix& matrix, LinearRole) { add(matrix); });
  for_each_vision_matrix(weights, add);
  convert_weights(weights, work, pool, nullptr);
  return static_cast<int>(work.size());
}

std::vector<WeightMatrix*> linear_weights(ErnieWeights& weights) {
  std::vector<WeightMatrix*> linears;
  for_each_linear(weights, [&](WeightMatrix& matrix, LinearRole) { linears.push_back(&matrix); });
  return linears;
}

std::vector<const WeightMatrix*> linear_weights(const ErnieWeights& weights) {
  std::vector<const WeightMatrix*> linears;
  for_each_linear(weights, [&](const WeightMatrix& matrix, LinearRole) { linears.push_back(&matrix); });
  return linears;
}

uint64_t resident_weight_bytes(const ErnieWeights& weights) {
  uint64_t total = weight_bytes(weights.embedding);
  for_each_linear(weights, [&](const WeightMatrix& matrix, LinearRole) {
    if (matrix.data != weights.embedding.data) total += weight_bytes(matrix);
  });
  // The vision tower stays in the checkpoint's dtype (FastDeploy quantizes only the
  // text decoder).
  for_each_vision_matrix(weights, [&](const WeightMatrix& matrix) { total += weight_bytes(matrix); });
  return total;
}

}  // namespace ernie
