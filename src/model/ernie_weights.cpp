#include "model/ernie_weights.h"

#include <cmath>
#include <cstring>

#include "model/prequantized.h"
#include "model/weight_reader.h"
#include "model/weight_sharding.h"
#include "util/error.h"
#include "util/log.h"

namespace ernie {
namespace {

// The correction-bias row of one modality: [1, E] in text models; VL keeps [2, E]
// (row 0 text, row 1 vision), which FastDeploy also accepts flattened as [1, 2E].
std::vector<float> read_correction_bias(WeightReader& reader, const std::string& name, int64_t e, int row,
                                        int rows_expected) {
  const TensorView bias = reader.checkpoint().take(reader.prefix() + name);
  const std::vector<int64_t>& shape = bias.shape();
  const bool fits = shape.size() == 2 && ((shape[0] == rows_expected && shape[1] == e) ||
                                          (shape[0] == 1 && shape[1] == e * rows_expected));
  if (!fits)
    fail("tensor \"", bias.name(), "\" has shape ", shape_to_string(shape), ", expected [", rows_expected, ", ", e, "]");
  const std::vector<float> all = to_f32(bias);
  return {all.begin() + row * e, all.begin() + (row + 1) * e};
}

// A C8 scale vector: one positive absmax per key or value channel.
std::vector<float> read_kv_absmax(WeightReader& reader, const std::string& name, const ModelConfig& config) {
  std::vector<float> absmax = reader.vector(name, config.kv_width());
  for (const float value : absmax)
    if (!(value > 0.0f) || !std::isfinite(value))
      fail("tensor \"", reader.prefix() + name, "\" holds ", value, "; a KV channel's absmax must be a positive number");
  return absmax;
}

// The routed experts of one modality: router `router_name`, bias row `bias_row`,
// experts first_expert .. first_expert + E - 1 of inner size `inner`.
MoeWeights read_routed_experts(WeightReader& reader, const std::string& base, const ModelConfig& config,
                               const std::string& router_name, int bias_row, int first_expert, int64_t inner) {
  const MoeConfig& moe_config = *config.moe;
  const int64_t h = config.hidden_size, e = moe_config.num_experts;
  const int bias_rows = config.vl ? 2 : 1;
  MoeWeights moe;
  moe.router = reader.router(base + router_name, e, h);
  const std::string bias_name = base + "moe_statics.e_score_correction_bias";
  if (reader.has(bias_name)) {
    moe.correction_bias = read_correction_bias(reader, bias_name, e, bias_row, bias_rows);
  } else {
    if (moe_config.use_correction_bias)
      fail("checkpoint is missing tensor \"", reader.prefix() + bias_name, "\" (expected shape [", bias_rows, ", ", e,
           "]; config has moe_use_aux_free=true)");
    moe.correction_bias.assign(static_cast<size_t>(e), 0.0f);
  }
  const int32_t hadamard = config.release && config.release->scheme == "w4a8" ? config.release->hadamard_block_size : 0;
  for (int64_t expert = 0; expert < e; ++expert) {
    std::vector<MlpWeights> parts =
        reader.expert(base + "experts." + std::to_string(first_expert + expert) + ".", h, inner, hadamard);
    moe.expert_parts = static_cast<int>(parts.size());
    for (MlpWeights& part : parts) moe.experts.push_back(std::move(part));
  }
  return moe;
}

MoeWeights read_moe(WeightReader& reader, const std::string& base, const ModelConfig& config) {
  const MoeConfig& moe_config = *config.moe;
  MoeWeights moe = read_routed_experts(reader, base, config, "gate.weight", 0, 0, moe_config.intermediate_size);
  if (moe_config.num_shared_experts > 0)
    moe.shared = reader.mlp(base + "shared_experts.", config.hidden_size,
                            static_cast<int64_t>(moe_config.intermediate_size) * moe_config.num_shared_experts);
  return moe;
}

DecoderLayerWeights read_layer(WeightReader& reader, const std::string& base, const ModelConfig& config,
                               bool moe_layer) {
  const int64_t h = config.hidden_size;
  DecoderLayerWeights layer;
  layer.input_norm = reader.vector(base + "input_layernorm.weight", h);
  layer.post_attention_norm = reader.vector(base + "post_attention_layernorm.weight", h);
  layer.attention = reader.attention(base + "self_attn.", config);
  // The MTP block has none: its cache rows keep their own per-head scales.
  if (reader.has(base + "self_attn.cachek_matmul.activation_scale") ||
      (config.release && config.release->static_kv_int8 && base.starts_with("layers."))) {
    layer.key_absmax = read_kv_absmax(reader, base + "self_attn.cachek_matmul.activation_scale", config);
    layer.value_absmax = read_kv_absmax(reader, base + "self_attn.cachev_matmul.activation_scale", config);
  }
  if (moe_layer) {
    layer.moe = read_moe(reader, base + "mlp.", config);
    if (config.vl)
      layer.vision_moe = read_routed_experts(reader, base + "mlp.", config, "gate.weight_1", 1,
                                             config.moe->num_experts, config.vl->vision_intermediate_size);
  } else {
    layer.mlp = reader.mlp(base + "mlp.", h, config.intermediate_size);
  }
  return layer;
}

CheckpointLayout detect_layout(const Checkpoint& checkpoint, const ModelConfig& config) {
  const bool paddle_names = checkpoint.contains("ernie.embed_tokens.weight");
  const bool torch_names = checkpoint.contains("model.embed_tokens.weight");
  if (paddle_names == torch_names)
    fail("cannot tell the checkpoint layout: expected exactly one of \"model.embed_tokens.weight\" (PT) and "
         "\"ernie.embed_tokens.weight\" (Paddle), found ",
         paddle_names ? "both" : "neither");
  const CheckpointLayout by_names = paddle_names ? CheckpointLayout::kPaddle : CheckpointLayout::kTorch;
  // Newer transformers write "dtype" even for torch checkpoints, so the tensor names,
  // which both layouts fix, decide; the config key only confirms.
  if (by_names != config.layout_hint)
    log_warning("config.json suggests the ", checkpoint_layout_name(config.layout_hint),
                " layout but the tensor names are ", checkpoint_layout_name(by_names), "; following the tensor names");
  return by_names;
}

WeightMatrix read_lm_head(WeightReader& reader, Checkpoint& checkpoint, const ModelConfig& config,
                          const WeightMatrix& embedding) {
  const int64_t v = config.vocab_size, h = config.hidden_size;
  // lm_head carries no model./ernie. prefix in either layout.
  const TensorView* head = checkpoint.take_if_present("lm_head.weight");
  if (config.tie_word_embeddings) {
    if (head != nullptr) log_info("tie_word_embeddings is true: lm_head.weight is ignored, the embedding is used");
    return embedding;
  }
  if (head == nullptr && is_prequantized(checkpoint)) return prequantized_placeholder(v, h);
  if (head == nullptr) fail("checkpoint is missing tensor \"lm_head.weight\" (expected shape [", v, ", ", h,
                            "]; tie_word_embeddings is false)");
  // Paddle stores [H, V]; some early PT releases did too. Square heads follow the layout.
  const bool in_out = head->shape() == std::vector<int64_t>{h, v} &&
                      (reader.layout() == CheckpointLayout::kPaddle || h != v);
  WeightMatrix matrix = in_out ? transposed_columns(*head, 0, v) : WeightMatrix{};
  if (!in_out) {
    expect_shape(*head, {v, h});
    matrix = view_matrix(*head);
  }
  matrix.source_tensor = &head->name();
  return matrix;
}

// The ViT sits under "vision_model." in both layouts; the resampler under the text
// decoder's prefix (notes §2).
VisionTowerWeights read_vision_tower(Checkpoint& checkpoint, CheckpointLayout layout, const ModelConfig& config) {
  const VisionConfig& vision = config.vl->vision;
  const int64_t de = vision.hidden_size, wide = de * vision.mlp_ratio, h = config.hidden_size;
  VisionTowerWeights tower;
  WeightReader vit(checkpoint, layout, "vision_model.");
  tower.patch_embed = vit.linear("patch_embed.proj.weight", de, vision.patch_values());
  for (int block = 0; block < vision.depth; ++block) {
    const std::string base = "blocks." + std::to_string(block) + ".";
    VisionBlockWeights weights;
    weights.norm1 = vit.layer_norm(base + "norm1", de);
    weights.norm2 = vit.layer_norm(base + "norm2", de);
    weights.qkv = vit.biased_linear(base + "attn.qkv", 3 * de, de);
    weights.proj = vit.biased_linear(base + "attn.proj", de, de);
    weights.fc1 = vit.biased_linear(base + "mlp.fc1", wide, de);
    weights.fc2 = vit.biased_linear(base + "mlp.fc2", de, wide);
    tower.blocks.push_back(std::move(weights));
  }
  tower.final_norm = vit.layer_norm("ln", de);

  WeightReader resampler(checkpoint, layout, WeightReader(checkpoint, layout).prefix() + "resampler_model.");
  const int64_t spatial = de * 4, temporal = spatial * 2;
  tower.spatial1 = resampler.biased_linear("spatial_linear.0", spatial, spatial);
  tower.spatial2 = resampler.biased_linear("spatial_linear.2", spatial, spatial);
  tower.spatial_norm = resampler.layer_norm("spatial_linear.3", spatial);
  tower.temporal1 = resampler.biased_linear("temporal_linear.0", spatial, temporal);
  tower.temporal2 = resampler.biased_linear("temporal_linear.2", spatial, spatial);
  tower.temporal_norm = resampler.layer_norm("temporal_linear.3", spatial);
  tower.projection = resampler.biased_linear("mlp", h, spatial);
  tower.after_norm = resampler.vector("after_norm.weight", h);
  return tower;
}

std::vector<MtpWeights> read_mtp(WeightReader& reader, const ModelConfig& config) {
  const int64_t h = config.hidden_size;
  std::vector<MtpWeights> heads;
  for (int index = 0; reader.has("mtp_emb_norm." + std::to_string(index) + ".weight"); ++index) {
    const std::string n = std::to_string(index);
    MtpWeights mtp;
    mtp.embedding_norm = reader.vector("mtp_emb_norm." + n + ".weight", h);
    mtp.hidden_norm = reader.vector("mtp_hidden_norm." + n + ".weight", h);
    mtp.linear_projection = reader.linear("mtp_linear_proj." + n + ".weight", h, 2 * h);
    mtp.block = read_layer(reader, "mtp_block." + n + ".", config, /*moe_layer=*/false);
    heads.push_back(std::move(mtp));
  }
  return heads;
}

}  // namespace

std::vector<MtpWeights> load_mtp_weights(Checkpoint& checkpoint, const ModelConfig& config) {
  for (const CheckpointLayout layout : {CheckpointLayout::kTorch, CheckpointLayout::kPaddle}) {
    WeightReader reader(checkpoint, layout);
    if (reader.has("mtp_emb_norm.0.weight")) return read_mtp(reader, config);
  }
  fail("the MTP checkpoint has no tensor \"model.mtp_emb_norm.0.weight\" (PT layout) or ",
       "\"ernie.mtp_emb_norm.0.weight\" (Paddle layout): it holds no MTP head");
}

ErnieWeights load_ernie_weights(Checkpoint& checkpoint, const ModelConfig& config,
                                const LayerProgress& on_layer_loaded, const ShardPlan* shard) {
  const bool sharded = shard != nullptr && shard->sharded();
  if (sharded) {
    shard_shape(config, *shard);  // refuses a model that does not divide, before reading anything
    if (is_prequantized(checkpoint))
      fail("tensor parallelism slices the weights before quantizing them, and this checkpoint was written by "
           "`ernie quantize`: serve the original checkpoint with --quantization instead");
  }
  ErnieWeights weights;
  weights.layout = detect_layout(checkpoint, config);
  WeightReader reader(checkpoint, weights.layout);
  const int64_t v = config.vocab_size, h = config.hidden_size;

  const TensorView embedding = checkpoint.take(reader.prefix() + "embed_tokens.weight", {v, h});
  expect_shape(embedding, {v, h});  // [V, H] in both layouts
  weights.embedding = view_matrix(embedding);

  for (int layer = 0; layer < config.num_hidden_layers; ++layer) {
    weights.layers.push_back(
        read_layer(reader, "layers." + std::to_string(layer) + ".", config, config.is_moe_layer(layer)));
    if (sharded) shard_layer(weights.layers.back(), config, *shard);
    if (on_layer_loaded) on_layer_loaded(layer + 1, config.num_hidden_layers);
  }
  weights.final_norm = reader.vector("norm.weight", h);
  weights.lm_head = read_lm_head(reader, checkpoint, config, weights.embedding);
  if (sharded) weights.lm_head = shard_lm_head(weights.lm_head, config, *shard);

  weights.mtp = read_mtp(reader, config);
  if (sharded && !weights.mtp.empty()) {
    log_info("tensor parallelism: the checkpoint's MTP head is not loaded (MTP drafting runs in one process only)");
    weights.mtp.clear();
  }
  if (config.vl) weights.vision = read_vision_tower(checkpoint, weights.layout, config);
  if (config.num_nextn_predict_layers > 0 && weights.mtp.empty())
    log_info("config.json declares ", config.num_nextn_predict_layers,
             " MTP layer(s) but the checkpoint has none; speculative decoding with MTP will be unavailable");

  if (is_prequantized(checkpoint)) attach_prequantized_linears(checkpoint, weights);
  const std::vector<std::string> unused = checkpoint.unused_names();
  if (!unused.empty()) {
    std::string listed;
    for (size_t i = 0; i < unused.size() && i < 5; ++i) listed += (i ? ", \"" : "\"") + unused[i] + "\"";
    fail("checkpoint has ", unused.size(), " tensor(s) that ", config.architecture, " with this config.json does not use: ",
         listed, unused.size() > 5 ? ", ..." : "");
  }
  return weights;
}

}  // namespace ernie
