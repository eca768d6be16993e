// FastDeploy's offline-quantized releases, as a checkpoint's config.json announces them
// (docs/quantization.md has the formats with their sources). ernie.cpp reads today:
// WINT2 ("quantization": "wint2"), whose routed experts past moe_w4_quant_end_layer are
// stored in FastDeploy's 2-bit CCQ form (kernels/wint2.h) and read as they are. As
// FastDeploy does, the checkpoint's own quantization_config takes priority over
// --quantization.
#pragma once

#include <optional>
#include <string>

namespace ernie {

struct FastDeployQuantization {
  std::string scheme;             // "wint2"
  std::string dense_quant_type;   // attention, dense MLPs, shared experts ("wint8"; "bf16": not quantized)
  int moe_w4_quant_end_layer = 6; // routed experts of decoder layers <= this are wint4, later ones WINT2
  // What ernie.cpp applies at load to the checkpoint's unquantized tensors, as a
  // --quantization value (the WINT2 experts are read as they are stored).
  std::string quantization() const;
};

// The release's quantization_config, or nullopt when config.json announces none of
// FastDeploy's offline formats. Throws ernie::Error naming the key for a scheme or a
// field ernie.cpp does not read (W4A8, a missing field, a bad layer number).
std::optional<FastDeployQuantization> fastdeploy_quantization(const std::string& model_dir);

}  // namespace ernie
