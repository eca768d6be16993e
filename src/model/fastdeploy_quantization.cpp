#include "model/fastdeploy_quantization.h"

#include <nlohmann/json.hpp>

#include "util/error.h"

namespace ernie {

std::string FastDeployQuantization::quantization() const {
  // Float experts (WINT2's first layers) become wint4; the KV cache int8 under C8.
  nlohmann::json value{{"quantization", "mix_quant"}, {"dense_quant_type", dense_quant_type}, {"moe_quant_type", "wint4"}};
  if (static_kv_int8) value["kv_cache_quant_type"] = "int8";
  return value.dump();
}

namespace {

void read_dense_type(const nlohmann::json& quantization, const std::string& where, FastDeployQuantization& result) {
  result.dense_quant_type = quantization.value("dense_quant_type", std::string("wint8"));
  if (result.dense_quant_type != "wint8" && result.dense_quant_type != "wint4" && result.dense_quant_type != "bf16")
    fail(where, ": dense_quant_type \"", result.dense_quant_type, "\" is not one ernie.cpp reads (wint8, wint4, bf16)");
}

void read_wint2(const nlohmann::json& quantization, const std::string& where, FastDeployQuantization& result) {
  const auto moe = quantization.find("moe_quant_config");
  if (moe == quantization.end() || !moe->is_object()) return;
  const auto w4 = moe->find("moe_w4_quant_config");
  if (w4 == moe->end() || !w4->is_object() || !w4->contains("quant_end_layer")) return;
  if (!(*w4)["quant_end_layer"].is_number_integer())
    fail(where, ".moe_quant_config.moe_w4_quant_config.quant_end_layer must be a layer number");
  result.moe_w4_quant_end_layer = (*w4)["quant_end_layer"].get<int>();
}

void read_w4a8(const nlohmann::json& quantization, const std::string& where, FastDeployQuantization& result) {
  // FastDeploy's default is the CUTLASS-permuted layout (mix_quant.py); its releases for
  // CPUs and XPUs hold the plain one and say so.
  const auto permuted = quantization.find("is_permuted");
  if (permuted == quantization.end() || !permuted->is_boolean() || permuted->get<bool>())
    fail(where, ": W4A8 experts are read in the plain layout only, which the config announces with "
         "\"is_permuted\": false (FastDeploy's default, true, is its GPU kernels' permuted layout)");
  if (quantization.contains("hadamard_block_size")) {
    const nlohmann::json& block = quantization["hadamard_block_size"];
    const int64_t size = block.is_number_integer() ? block.get<int64_t>() : 0;
    if (size < 2 || size > 4096 || (size & (size - 1)) != 0)
      fail(where, ".hadamard_block_size must be a power of two from 2 to 4096, got ", block.dump());
    result.hadamard_block_size = static_cast<int32_t>(size);
  }
  const std::string kv = quantization.value("kv_cache_quant_type", std::string());
  if (!kv.empty() && kv != "int8")
    fail(where, ": kv_cache_quant_type \"", kv, "\" is not read with W4A8 experts (int8, or none)");
  result.static_kv_int8 = kv == "int8";
}

}  // namespace

std::optional<FastDeployQuantization> parse_fastdeploy_quantization(const nlohmann::json& config,
                                                                    const std::string& source) {
  const auto found = config.find("quantization_config");
  if (found == config.end() || !found->is_object() || found->contains("ernie_packed_layout")) return std::nullopt;
  const nlohmann::json& quantization = *found;
  const std::string where = source + ": quantization_config";
  const auto scheme = quantization.find("quantization");
  if (scheme == quantization.end() || !scheme->is_string()) fail(where, " names no \"quantization\"");
  const std::string name = scheme->get<std::string>();
  const bool w4a8 = name == "mix_quant" && quantization.value("moe_quant_type", "") == "w4a8";
  if (name != "wint2" && !w4a8) return std::nullopt;
  FastDeployQuantization result;
  result.scheme = w4a8 ? "w4a8" : name;
  read_dense_type(quantization, where, result);
  if (w4a8) read_w4a8(quantization, where, result);
  else read_wint2(quantization, where, result);
  return result;
}

}  // namespace ernie
