// The typed, validated form of a checkpoint's config.json (spec §1).
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json_fwd.hpp>

#include "model/fastdeploy_quantization.h"

namespace ernie {

// Which published checkpoint layout a directory uses (spec §5).
enum class CheckpointLayout {
  kTorch,   // "-PT": prefix model., Linear [out, in], separate q/k/v and gate/up
  kPaddle,  // "-Paddle": prefix ernie., Linear [in, out], fused qkv_proj and up_gate_proj
};
const char* checkpoint_layout_name(CheckpointLayout layout);

struct MoeConfig {
  int num_experts = 0;           // moe_num_experts (E)
  int top_k = 0;                 // moe_k (K)
  int intermediate_size = 0;     // moe_intermediate_size (Im), per expert
  int num_shared_experts = 0;    // shared MLP width = Im * num_shared_experts
  int layer_start_index = 0;     // first MoE layer (0-based)
  int layer_end_index = -1;      // last MoE layer, resolved: -1 in the file means the last layer
  int layer_interval = 1;
  double norm_min = 1e-12;       // clamp of the renormalisation denominator
  bool use_correction_bias = true;  // moe_use_aux_free: choose experts by p + e_score_correction_bias
};

// The DFNRope vision transformer of ERNIE-4.5-VL (config.json "vision_config";
// docs/vl-model-notes.md §1.1, §4).
struct VisionConfig {
  int depth = 0;             // transformer blocks
  int hidden_size = 0;       // embed_dim (De)
  int num_heads = 0;
  int mlp_ratio = 4;         // fc1 width = hidden_size * mlp_ratio
  int patch_size = 14;
  int in_channels = 3;
  int spatial_merge_size = 2;
  int head_dim() const { return hidden_size / num_heads; }
  int patch_values() const { return in_channels * patch_size * patch_size; }
};

// What Ernie4_5_VLMoeForConditionalGeneration adds to the text decoder.
struct VlConfig {
  VisionConfig vision;
  int pixel_hidden_size = 0;     // resampler input width (= vision hidden size)
  int spatial_conv_size = 2;     // 2x2 patches merge into one token
  int temporal_conv_size = 2;    // video frames are paired
  int freq_allocation = 20;      // rotary pairs of the temporal axis (3-D RoPE, spec §8.4)
  // Token ids (special tokens of the VL tokenizer).
  int im_patch_id = 100295;      // <|IMAGE_PLACEHOLDER|>: one per visual token, images and video
  int image_start_token_id = 101304;
  int image_end_token_id = 101305;
  int video_start_token_id = 101306;
  int video_end_token_id = 101307;
  // The vision experts (the text ones are ModelConfig::moe).
  int vision_num_experts = 0;
  int vision_intermediate_size = 0;

  // Placeholders and the start/end markers go to the vision experts; every other token
  // to the text experts (notes §7.1: vLLM, HF and the processors agree).
  bool is_vision_token(int32_t id) const {
    return id == im_patch_id || id == image_start_token_id || id == image_end_token_id ||
           id == video_start_token_id || id == video_end_token_id;
  }
};

struct ModelConfig {
  std::string architecture;      // architectures[0]
  std::string model_type;
  int hidden_size = 0;
  int intermediate_size = 0;
  int num_hidden_layers = 0;
  int num_attention_heads = 0;
  int num_key_value_heads = 0;
  int head_dim = 0;              // read from the file, never hidden/heads (0.3B: 16*128 != 1024)
  int vocab_size = 0;
  std::optional<int> ori_vocab_size;  // logits at and above it are -inf (FastDeploy)
  int max_position_embeddings = 0;
  double rope_theta = 0;
  double rms_norm_eps = 0;
  double compression_ratio = 1.0;  // RoPE positions are divided by it (Paddle configs; 1.0)
  bool tie_word_embeddings = true;
  int bos_token_id = 1;
  std::vector<int> eos_token_ids;
  int pad_token_id = 0;
  std::string weight_dtype;      // torch_dtype or dtype, e.g. "bfloat16"
  CheckpointLayout layout_hint = CheckpointLayout::kTorch;  // from torch_dtype vs dtype
  int num_nextn_predict_layers = 0;  // MTP layers in the checkpoint
  std::optional<MoeConfig> moe;  // set for Ernie4_5_MoeForCausalLM and the VL model
  std::optional<VlConfig> vl;    // set for Ernie4_5_VLMoeForConditionalGeneration
  // FastDeploy's offline-quantized release this checkpoint is, from quantization_config.
  std::optional<FastDeployQuantization> release;

  bool is_moe_layer(int layer) const;
  int q_width() const { return num_attention_heads * head_dim; }
  int kv_width() const { return num_key_value_heads * head_dim; }
};

// Architectures we compute; anything else is refused naming these.
const std::vector<std::string>& supported_architectures();

// Parses and validates config.json text. `source` names the file in error messages.
ModelConfig parse_model_config(const std::string& json_text, const std::string& source);
// Reads MODEL_DIR/config.json.
ModelConfig load_model_config(const std::string& model_dir);

}  // namespace ernie
