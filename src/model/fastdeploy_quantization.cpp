#include "model/fastdeploy_quantization.h"

#include <nlohmann/json.hpp>

#include "util/error.h"
#include "util/text_file.h"

namespace ernie {

std::string FastDeployQuantization::quantization() const {
  // The wint4 experts of the first layers, where the checkpoint holds them unquantized.
  return nlohmann::json{{"quantization", "mix_quant"}, {"dense_quant_type", dense_quant_type}, {"moe_quant_type", "wint4"}}
      .dump();
}

std::optional<FastDeployQuantization> fastdeploy_quantization(const std::string& model_dir) {
  const nlohmann::json config = nlohmann::json::parse(read_text_file(model_dir + "/config.json"), nullptr, false);
  if (!config.is_object()) return std::nullopt;  // load_model_config reports it, with its path
  const auto found = config.find("quantization_config");
  if (found == config.end() || !found->is_object() || found->contains("ernie_packed_layout")) return std::nullopt;
  const nlohmann::json& quantization = *found;
  const std::string where = model_dir + "/config.json: quantization_config";
  const auto scheme = quantization.find("quantization");
  if (scheme == quantization.end() || !scheme->is_string()) fail(where, " names no \"quantization\"");
  const std::string name = scheme->get<std::string>();
  if (name == "mix_quant" && quantization.value("moe_quant_type", "") == "w4a8")
    fail(where, " announces FastDeploy's W4A8 experts (", quantization.dump(),
         "), which ernie.cpp does not read yet (docs/quantization.md describes the format)");
  if (name != "wint2") return std::nullopt;  // a quantization ernie.cpp applies online (parse_quantization)
  FastDeployQuantization result;
  result.scheme = name;
  result.dense_quant_type = quantization.value("dense_quant_type", std::string("wint8"));
  if (result.dense_quant_type != "wint8" && result.dense_quant_type != "bf16")
    fail(where, ": dense_quant_type \"", result.dense_quant_type, "\" is not one WINT2 releases use (wint8)");
  const auto moe = quantization.find("moe_quant_config");
  if (moe != quantization.end() && moe->is_object()) {
    const auto w4 = moe->find("moe_w4_quant_config");
    if (w4 != moe->end() && w4->is_object() && w4->contains("quant_end_layer")) {
      if (!(*w4)["quant_end_layer"].is_number_integer())
        fail(where, ".moe_quant_config.moe_w4_quant_config.quant_end_layer must be a layer number");
      result.moe_w4_quant_end_layer = (*w4)["quant_end_layer"].get<int>();
    }
  }
  return result;
}

}  // namespace ernie
