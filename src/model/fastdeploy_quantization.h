// FastDeploy's offline-quantized releases, as a checkpoint's config.json announces them
// (docs/quantization.md has the formats with their sources). ernie.cpp reads:
//   - WINT2 ("quantization": "wint2"): routed experts past moe_w4_quant_end_layer in the
//     2-bit CCQ form (kernels/wint2.h);
//   - W4A8C8 ("quantization": "mix_quant", "moe_quant_type": "w4a8"): routed experts as
//     int4 weights with static int8 activation scales (kernels/quantize.h
//     make_w4a8_weight), and with "kv_cache_quant_type": "int8" the KV cache in int8
//     with the checkpoint's static per-channel scales (C8).
// Both are read as stored. As FastDeploy does, the checkpoint's own quantization_config
// takes priority over --quantization.
#pragma once

#include <cstdint>
#include <optional>
#include <string>

#include <nlohmann/json_fwd.hpp>

namespace ernie {

struct FastDeployQuantization {
  std::string scheme;             // "wint2" or "w4a8"
  std::string dense_quant_type;   // attention, dense MLPs, shared experts ("wint8"; "bf16": not quantized)
  int moe_w4_quant_end_layer = 6; // WINT2: routed experts of decoder layers <= this are wint4, later ones WINT2
  int32_t hadamard_block_size = 128;  // W4A8: the down projection's input is rotated in blocks of this
  bool static_kv_int8 = false;    // C8: int8 KV cache with the checkpoint's per-channel scales
  // What ernie.cpp applies at load to the checkpoint's unquantized tensors (and the KV
  // cache), as a --quantization value; the experts are read as they are stored.
  std::string quantization() const;
};

// The config's quantization_config when it announces one of FastDeploy's offline
// formats, else nullopt (a quantization applied online, parsed by parse_quantization).
// Throws ernie::Error naming the key for a field ernie.cpp does not read (a permuted
// W4A8 layout, a missing field, a bad layer number or block size).
std::optional<FastDeployQuantization> parse_fastdeploy_quantization(const nlohmann::json& config,
                                                                    const std::string& source);

}  // namespace ernie
