// ERNIE 4.5 weights in one canonical form, whichever published layout they came from
// (spec §5): every Linear as a WeightMatrix [out, in]; q/k/v and gate/up separate;
// router and correction bias in fp32; norms in fp32.
#pragma once

#include <functional>
#include <optional>
#include <vector>

#include "model/checkpoint.h"
#include "model/config.h"
#include "tensor/weight_matrix.h"

namespace ernie {

struct AttentionWeights {
  WeightMatrix q, k, v, o;
};

// SwiGLU MLP: down(silu(gate(x)) * up(x)).
struct MlpWeights {
  WeightMatrix gate, up, down;
};

struct MoeWeights {
  std::vector<float> router;           // [E, H] fp32
  std::vector<float> correction_bias;  // [E] fp32; zeros when the checkpoint has none
  // E experts of inner size Im, each in `expert_parts` parts: experts[e * parts + p].
  // A part is an MLP of inner size Im / parts whose output adds to the others'
  // (FastDeploy's pre-sharded W4A8 releases keep each rank's part with its own scales).
  std::vector<MlpWeights> experts;
  int expert_parts = 1;
  std::optional<MlpWeights> shared;    // shared experts as one MLP, weight 1
};

struct DecoderLayerWeights {
  std::vector<float> input_norm;           // [H]
  std::vector<float> post_attention_norm;  // [H]
  AttentionWeights attention;
  // C8 (FastDeploy's W4A8C8 releases, self_attn.cache{k,v}_matmul.activation_scale): the
  // static absmax of each key (after RoPE) and value channel, [kv_heads · head_dim], with
  // which an int8 KV cache stores this layer; empty otherwise.
  std::vector<float> key_absmax, value_absmax;
  std::optional<MlpWeights> mlp;  // dense layers
  std::optional<MoeWeights> moe;  // MoE layers (the text experts and the shared ones of VL)
  // ERNIE-4.5-VL: the experts of vision tokens, with their own router and bias row
  // (no shared experts: those of `moe` serve every token).
  std::optional<MoeWeights> vision_moe;
};

// The vision tower's layers carry biases, unlike the text decoder's.
struct BiasedLinear {
  WeightMatrix weight;      // [out, in]
  std::vector<float> bias;  // [out] fp32
};
struct LayerNormWeights {
  std::vector<float> weight, bias;  // fp32
};

// One pre-LN block of the DFNRope vision transformer (docs/vl-model-notes.md §4).
struct VisionBlockWeights {
  LayerNormWeights norm1, norm2;
  BiasedLinear qkv;   // [3·De, De], outputs q | k | v, each head-major
  BiasedLinear proj;  // [De, De]
  BiasedLinear fc1, fc2;
};

// Vision encoder and resampler of ERNIE-4.5-VL (notes §4, §5).
struct VisionTowerWeights {
  WeightMatrix patch_embed;  // [De, 3·14·14], no bias
  std::vector<VisionBlockWeights> blocks;
  LayerNormWeights final_norm;
  // Resampler: 2x2 patches (4·De) -> spatial MLP -> frame pairs (8·De) -> temporal MLP
  // -> projection to the text hidden size -> RMSNorm.
  BiasedLinear spatial1, spatial2;
  LayerNormWeights spatial_norm;
  BiasedLinear temporal1, temporal2;
  LayerNormWeights temporal_norm;
  BiasedLinear projection;       // [H, 4·De]
  std::vector<float> after_norm;  // [H]
};

// Multi-token prediction head (spec §4), used by speculative decoding.
struct MtpWeights {
  std::vector<float> embedding_norm;  // mtp_emb_norm
  std::vector<float> hidden_norm;     // mtp_hidden_norm
  WeightMatrix linear_projection;     // [H, 2H]: input = [normed embedding ; normed hidden]
  DecoderLayerWeights block;          // dense decoder layer
};

struct ErnieWeights {
  CheckpointLayout layout = CheckpointLayout::kTorch;
  WeightMatrix embedding;  // [V, H]
  std::vector<DecoderLayerWeights> layers;
  std::vector<float> final_norm;  // [H]
  WeightMatrix lm_head;           // [V, H]; the embedding itself when tied
  std::vector<MtpWeights> mtp;
  std::optional<VisionTowerWeights> vision;  // ERNIE-4.5-VL
};

// Reads every tensor the config calls for, checking names and shapes; refuses a
// checkpoint with missing, wrongly shaped or unexpected tensors, naming each.
// `on_layer_loaded(done, total)` reports progress after each decoder layer.
// `shard`: under tensor/expert parallelism, only this rank's part of each layer and of
// the LM head is kept (model/weight_sharding.h), layer by layer as they are read.
using LayerProgress = std::function<void(int done, int total)>;
struct ShardPlan;
ErnieWeights load_ernie_weights(Checkpoint& checkpoint, const ModelConfig& config,
                                const LayerProgress& on_layer_loaded = nullptr, const ShardPlan* shard = nullptr);

// The MTP head(s) of a checkpoint kept apart from the main one (speculative config
// "model"), in either layout; its other tensors are not read.
std::vector<MtpWeights> load_mtp_weights(Checkpoint& checkpoint, const ModelConfig& config);

}  // namespace ernie
