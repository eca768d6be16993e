// Random ERNIE 4.5 checkpoints in exactly the published formats (names, layouts,
// dtypes, config keys), for tests and benchmarks when real weights are unavailable.
// The weights depend only on the seed and the shapes: the PT and Paddle forms of one
// spec hold bit-identical values, and so do the single-file and sharded forms.
#pragma once

#include <cstdint>
#include <string>

#include "model/config.h"

namespace ernie {

struct SyntheticModelSpec {
  int hidden_size = 256;
  int num_layers = 3;
  int num_heads = 4;
  int num_kv_heads = 2;
  int head_dim = 128;
  int intermediate_size = 512;
  int vocab_size = 4096;
  bool tie_embeddings = true;
  // MoE when num_experts > 0.
  int num_experts = 0;
  int moe_k = 2;
  int moe_intermediate_size = 128;
  int num_shared_experts = 0;
  int moe_start = 1;
  int moe_end = -1;
  bool with_mtp = false;  // adds mtp_* tensors and num_nextn_predict_layers = 1
  // ERNIE-4.5-VL (Ernie4_5_VLMoeForConditionalGeneration) when vision_depth > 0; needs
  // num_experts > 0 (as many vision experts as text ones).
  int vision_depth = 0;
  int vision_hidden_size = 64;
  int vision_heads = 4;
  int vision_moe_intermediate_size = 64;
  int freq_allocation = 20;
  int im_patch_id = -1;  // -1: vocab_size - 16; the start/end markers follow it
  double rope_theta = 500000.0;
  double rms_norm_eps = 1e-5;
  double weight_std = 0.15;
  double norm_std = 0.1;   // norm weights are 1 + N(0, norm_std)
  double bias_std = 0.1;   // e_score_correction_bias and the vision tower's biases ~ N(0, bias_std)
  uint64_t seed = 1;
};

// Named shapes: "tiny-dense", "tiny-moe" (the golden shapes), "0.3b" (ERNIE-4.5-0.3B),
// "21b-a3b" (ERNIE-4.5-21B-A3B), "vl-tiny" (ERNIE-4.5-VL's structure at test size),
// "vl-28b-layer" (VL-28B-A3B's vision tower and one MoE layer, for timing). Throws naming the presets for an unknown name.
SyntheticModelSpec synthetic_preset(const std::string& name);

// Writes config.json, generation_config.json and the weights (no tokenizer) to `dir`,
// which must exist.
void write_synthetic_checkpoint(const std::string& dir, const SyntheticModelSpec& spec, CheckpointLayout layout,
                                int num_shards);

}  // namespace ernie
