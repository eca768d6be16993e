#include "model/config.h"

#include <fstream>
#include <sstream>

#include <nlohmann/json.hpp>

#include "util/error.h"

namespace ernie {
namespace {

using nlohmann::json;

class ConfigReader {
 public:
  ConfigReader(const json& root, const std::string& source) : root_(root), source_(source) {}

  bool has(const char* key) const { return root_.contains(key) && !root_.at(key).is_null(); }

  int required_int(const char* key) const {
    if (!has(key)) fail(source_, ": missing required field \"", key, "\"");
    return as_int(key, root_.at(key));
  }
  int int_or(const char* key, int fallback) const { return has(key) ? as_int(key, root_.at(key)) : fallback; }

  double required_number(const char* key) const {
    if (!has(key)) fail(source_, ": missing required field \"", key, "\"");
    return as_number(key, root_.at(key));
  }
  double number_or(const char* key, double fallback) const {
    return has(key) ? as_number(key, root_.at(key)) : fallback;
  }

  bool bool_or(const char* key, bool fallback) const {
    if (!has(key)) return fallback;
    const json& value = root_.at(key);
    if (!value.is_boolean()) fail(source_, ": field \"", key, "\" must be true or false, got ", value.dump());
    return value.get<bool>();
  }

  std::string string_or(const char* key, const std::string& fallback) const {
    if (!has(key)) return fallback;
    const json& value = root_.at(key);
    if (!value.is_string()) fail(source_, ": field \"", key, "\" must be a string, got ", value.dump());
    return value.get<std::string>();
  }

  // An int, or for VL-style configs a list whose entries are combined by `pick`.
  template <typename Pick>
  int int_or_list(const char* key, int fallback, Pick pick) const {
    if (!has(key)) return fallback;
    const json& value = root_.at(key);
    if (!value.is_array()) return as_int(key, value);
    if (value.empty()) fail(source_, ": field \"", key, "\" is an empty list");
    int result = as_int(key, value.at(0));
    for (const json& item : value) result = pick(result, as_int(key, item));
    return result;
  }

  std::vector<int> int_list_or(const char* key, std::vector<int> fallback) const {
    if (!has(key)) return fallback;
    const json& value = root_.at(key);
    if (!value.is_array()) return {as_int(key, value)};
    std::vector<int> result;
    for (const json& item : value) result.push_back(as_int(key, item));
    return result;
  }

  const std::string& source() const { return source_; }
  const json& root() const { return root_; }

 private:
  int as_int(const char* key, const json& value) const {
    if (value.is_number_integer()) {
      const auto wide = value.get<int64_t>();
      if (wide < INT32_MIN || wide > INT32_MAX) fail(source_, ": field \"", key, "\" is out of range: ", wide);
      return static_cast<int>(wide);
    }
    // Some exporters write integral values as floats (e.g. 1.0).
    if (value.is_number_float()) {
      const double real = value.get<double>();
      if (real == static_cast<double>(static_cast<int64_t>(real)) && real >= INT32_MIN && real <= INT32_MAX)
        return static_cast<int>(real);
    }
    fail(source_, ": field \"", key, "\" must be an integer, got ", value.dump());
  }
  double as_number(const char* key, const json& value) const {
    if (!value.is_number()) fail(source_, ": field \"", key, "\" must be a number, got ", value.dump());
    return value.get<double>();
  }

  const json& root_;
  std::string source_;
};

void require_positive(const ConfigReader& reader, const char* key, int value) {
  if (value <= 0) fail(reader.source(), ": field \"", key, "\" must be positive, got ", value);
}

// `clamp_end`: an end index past the last layer means the last layer (VL configs give
// [29, 28] for 28 layers; the runtimes only test layer <= end).
MoeConfig parse_moe(const ConfigReader& reader, int num_layers, bool clamp_end) {
  MoeConfig moe;
  // VL configs give [text, vision] lists; the text branch is the first entry.
  moe.num_experts = reader.int_or_list("moe_num_experts", 0, [](int first, int) { return first; });
  moe.intermediate_size = reader.int_or_list("moe_intermediate_size", 0, [](int first, int) { return first; });
  moe.top_k = reader.int_or("moe_k", 2);
  moe.num_shared_experts = reader.int_or("moe_num_shared_experts", 0);
  // Spec §1.3: start = min of the list, end = max of the list, -1 = last layer.
  moe.layer_start_index = reader.int_or_list("moe_layer_start_index", 0, [](int a, int b) { return std::min(a, b); });
  moe.layer_end_index = reader.int_or_list("moe_layer_end_index", -1, [](int a, int b) { return std::max(a, b); });
  moe.layer_interval = reader.int_or("moe_layer_interval", 1);
  moe.norm_min = reader.number_or("moe_norm_min", 1e-12);
  moe.use_correction_bias = reader.bool_or("moe_use_aux_free", true);

  require_positive(reader, "moe_num_experts", moe.num_experts);
  require_positive(reader, "moe_intermediate_size", moe.intermediate_size);
  require_positive(reader, "moe_k", moe.top_k);
  require_positive(reader, "moe_layer_interval", moe.layer_interval);
  if (moe.top_k > moe.num_experts)
    fail(reader.source(), ": moe_k (", moe.top_k, ") exceeds moe_num_experts (", moe.num_experts, ")");
  if (moe.num_shared_experts < 0)
    fail(reader.source(), ": moe_num_shared_experts must be >= 0, got ", moe.num_shared_experts);
  if (moe.layer_end_index == -1 || (clamp_end && moe.layer_end_index >= num_layers))
    moe.layer_end_index = num_layers - 1;
  if (moe.layer_start_index < 0 || moe.layer_start_index >= num_layers)
    fail(reader.source(), ": moe_layer_start_index ", moe.layer_start_index, " is outside layers 0..", num_layers - 1);
  if (moe.layer_end_index < moe.layer_start_index || moe.layer_end_index >= num_layers)
    fail(reader.source(), ": moe_layer_end_index ", moe.layer_end_index, " must lie in ", moe.layer_start_index,
         "..", num_layers - 1);
  const std::string gate = reader.string_or("moe_gate", "topk");
  if (gate != "topk") fail(reader.source(), ": moe_gate \"", gate, "\" is not supported (expected \"topk\")");
  const std::string gate_act = reader.string_or("moe_gate_act", "softmax");
  if (gate_act != "softmax")
    fail(reader.source(), ": moe_gate_act \"", gate_act, "\" is not supported (expected \"softmax\")");
  return moe;
}

// Entry `index` of a [text, vision] list, or the value itself when it is a plain int.
int modality_entry(const ConfigReader& reader, const char* key, size_t index, int fallback) {
  const std::vector<int> values = reader.int_list_or(key, {fallback});
  if (values.size() > 2) fail(reader.source(), ": field \"", key, "\" has ", values.size(), " entries, expected [text, vision]");
  return values.size() == 1 ? values[0] : values[index];
}

VisionConfig parse_vision(const ConfigReader& outer) {
  if (!outer.has("vision_config") || !outer.root().at("vision_config").is_object())
    fail(outer.source(), ": an ERNIE-4.5-VL config needs the object \"vision_config\" (depth, hidden_size, num_heads, ...)");
  const ConfigReader reader(outer.root().at("vision_config"), outer.source() + " vision_config");
  VisionConfig vision;
  vision.depth = reader.required_int("depth");
  const int embed_dim = reader.int_or("embed_dim", 0);
  vision.hidden_size = reader.int_or("hidden_size", embed_dim);
  if (embed_dim != 0 && embed_dim != vision.hidden_size)
    fail(reader.source(), ": embed_dim (", embed_dim, ") and hidden_size (", vision.hidden_size, ") must agree");
  vision.num_heads = reader.required_int("num_heads");
  vision.mlp_ratio = reader.int_or("mlp_ratio", 4);
  vision.patch_size = reader.int_or("patch_size", 14);
  vision.in_channels = reader.int_or("in_channels", 3);
  vision.spatial_merge_size = reader.int_or("spatial_merge_size", 2);
  for (const auto& [key, value] : std::initializer_list<std::pair<const char*, int>>{
           {"depth", vision.depth}, {"hidden_size", vision.hidden_size}, {"num_heads", vision.num_heads},
           {"mlp_ratio", vision.mlp_ratio}, {"patch_size", vision.patch_size}})
    require_positive(reader, key, value);
  if (vision.hidden_size % vision.num_heads != 0 || vision.head_dim() % 4 != 0)
    fail(reader.source(), ": hidden_size (", vision.hidden_size, ") must split into num_heads (", vision.num_heads,
         ") heads whose size is a multiple of 4 (the 2-D RoPE splits each half into rows and columns)");
  if (vision.in_channels != 3) fail(reader.source(), ": in_channels must be 3 (RGB), got ", vision.in_channels);
  if (vision.spatial_merge_size != 2)
    fail(reader.source(), ": spatial_merge_size ", vision.spatial_merge_size, " is not supported (expected 2)");
  const std::string act = reader.string_or("hidden_act", "quick_gelu");
  if (act != "quick_gelu") fail(reader.source(), ": hidden_act \"", act, "\" is not supported (expected \"quick_gelu\")");
  return vision;
}

VlConfig parse_vl(const ConfigReader& reader, const ModelConfig& config) {
  if (reader.has("text_config"))
    fail(reader.source(), ": the transformers-native ERNIE-VL format (text_config, model.language_model.*) is not "
         "supported; use the -PT or -Paddle release");
  VlConfig vl;
  vl.vision = parse_vision(reader);
  vl.pixel_hidden_size = reader.int_or("pixel_hidden_size", vl.vision.hidden_size);
  if (vl.pixel_hidden_size != vl.vision.hidden_size)
    fail(reader.source(), ": pixel_hidden_size (", vl.pixel_hidden_size, ") must equal the vision hidden_size (",
         vl.vision.hidden_size, ")");
  vl.spatial_conv_size = reader.int_or("spatial_conv_size", 2);
  vl.temporal_conv_size = reader.int_or("temporal_conv_size", 2);
  if (vl.spatial_conv_size != vl.vision.spatial_merge_size || vl.temporal_conv_size != 2)
    fail(reader.source(), ": spatial_conv_size ", vl.spatial_conv_size, " / temporal_conv_size ", vl.temporal_conv_size,
         " are not supported (expected 2 / 2, as every ERNIE-4.5-VL release)");
  if (!reader.bool_or("use_temporal_conv", true))
    fail(reader.source(), ": use_temporal_conv=false is not supported (every ERNIE-4.5-VL release uses it)");
  if (!reader.bool_or("rope_3d", true))
    fail(reader.source(), ": rope_3d=false is not supported (ERNIE-4.5-VL uses 3-D RoPE)");
  vl.freq_allocation = reader.int_or("freq_allocation", 20);
  const int pairs = config.head_dim / 2;
  if (vl.freq_allocation < 0 || vl.freq_allocation > pairs || (pairs - vl.freq_allocation) % 2 != 0)
    fail(reader.source(), ": freq_allocation ", vl.freq_allocation, " must lie in 0..", pairs,
         " and leave an even number of rotary pairs for height and width");
  vl.im_patch_id = reader.int_or("im_patch_id", vl.im_patch_id);
  vl.image_start_token_id = reader.int_or("image_start_token_id", vl.image_start_token_id);
  vl.image_end_token_id = reader.int_or("image_end_token_id", vl.image_end_token_id);
  vl.video_start_token_id = reader.int_or("video_start_token_id", vl.video_start_token_id);
  vl.video_end_token_id = reader.int_or("video_end_token_id", vl.video_end_token_id);
  for (const auto& [key, id] : std::initializer_list<std::pair<const char*, int>>{
           {"im_patch_id", vl.im_patch_id},
           {"image_start_token_id", vl.image_start_token_id},
           {"image_end_token_id", vl.image_end_token_id},
           {"video_start_token_id", vl.video_start_token_id},
           {"video_end_token_id", vl.video_end_token_id}})
    if (id < 0 || id >= config.vocab_size)
      fail(reader.source(), ": ", key, " ", id, " is outside the vocabulary 0..", config.vocab_size - 1);

  // [text, vision] lists: the text entries became config.moe; the vision experts must
  // cover the same layers (every release does), since a layer's tokens share one block.
  vl.vision_num_experts = modality_entry(reader, "moe_num_experts", 1, 0);
  vl.vision_intermediate_size = modality_entry(reader, "moe_intermediate_size", 1, 0);
  require_positive(reader, "moe_num_experts (vision)", vl.vision_num_experts);
  require_positive(reader, "moe_intermediate_size (vision)", vl.vision_intermediate_size);
  if (vl.vision_num_experts != config.moe->num_experts)
    fail(reader.source(), ": moe_num_experts gives ", config.moe->num_experts, " text and ", vl.vision_num_experts,
         " vision experts; only equal counts are supported (e_score_correction_bias is [2, E])");
  const int last = config.num_hidden_layers - 1;
  for (const char* key : {"moe_layer_start_index", "moe_layer_end_index"}) {
    const bool end = std::string(key) == "moe_layer_end_index";
    int text = modality_entry(reader, key, 0, end ? -1 : 0), vision = modality_entry(reader, key, 1, end ? -1 : 0);
    if (end) {
      text = text < 0 ? last : std::min(text, last);
      vision = vision < 0 ? last : std::min(vision, last);
    }
    if (text != vision)
      fail(reader.source(), ": ", key, " differs between text (", text, ") and vision (", vision,
           ") experts; only equal MoE layer ranges are supported");
  }
  return vl;
}

}  // namespace

const char* checkpoint_layout_name(CheckpointLayout layout) {
  return layout == CheckpointLayout::kTorch ? "torch (PT)" : "paddle";
}

const std::vector<std::string>& supported_architectures() {
  static const std::vector<std::string> names = {"Ernie4_5ForCausalLM", "Ernie4_5_ForCausalLM",
                                                 "Ernie4_5_MoeForCausalLM", "Ernie4_5_VLMoeForConditionalGeneration"};
  return names;
}

bool ModelConfig::is_moe_layer(int layer) const {
  if (!moe) return false;
  return (layer + 1) % moe->layer_interval == 0 && layer >= moe->layer_start_index &&
         layer <= moe->layer_end_index;
}

ModelConfig parse_model_config(const std::string& json_text, const std::string& source) {
  json root;
  try {
    root = json::parse(json_text);
  } catch (const json::parse_error& error) {
    fail(source, ": invalid JSON (", error.what(), ")");
  }
  if (!root.is_object()) fail(source, ": expected a JSON object at the top level");
  const ConfigReader reader(root, source);

  ModelConfig config;
  if (!reader.has("architectures") || !root.at("architectures").is_array() || root.at("architectures").empty() ||
      !root.at("architectures").at(0).is_string())
    fail(source, ": missing \"architectures\" (expected e.g. [\"Ernie4_5ForCausalLM\"])");
  config.architecture = root.at("architectures").at(0).get<std::string>();
  bool known = false;
  std::string supported_list;
  for (const auto& name : supported_architectures()) {
    known = known || name == config.architecture;
    supported_list += (supported_list.empty() ? "" : ", ") + name;
  }
  if (!known) fail(source, ": unsupported architecture \"", config.architecture, "\" (supported: ", supported_list, ")");
  config.model_type = reader.string_or("model_type", "");

  config.hidden_size = reader.required_int("hidden_size");
  config.intermediate_size = reader.required_int("intermediate_size");
  config.num_hidden_layers = reader.required_int("num_hidden_layers");
  config.num_attention_heads = reader.required_int("num_attention_heads");
  config.num_key_value_heads = reader.int_or("num_key_value_heads", config.num_attention_heads);
  config.head_dim = reader.required_int("head_dim");
  config.vocab_size = reader.required_int("vocab_size");
  if (reader.has("ori_vocab_size")) config.ori_vocab_size = reader.required_int("ori_vocab_size");
  config.max_position_embeddings = reader.int_or("max_position_embeddings", 131072);
  config.rope_theta = reader.required_number("rope_theta");
  config.rms_norm_eps = reader.required_number("rms_norm_eps");
  config.compression_ratio = reader.number_or("compression_ratio", 1.0);
  config.tie_word_embeddings = reader.bool_or("tie_word_embeddings", true);
  config.bos_token_id = reader.int_or("bos_token_id", 1);
  config.eos_token_ids = reader.int_list_or("eos_token_id", {2});
  config.pad_token_id = reader.int_or("pad_token_id", 0);
  config.num_nextn_predict_layers = reader.int_or("num_nextn_predict_layers", 0);

  // FastDeploy tells the formats apart by this key: dtype => Paddle, torch_dtype => torch.
  if (reader.has("torch_dtype")) {
    config.weight_dtype = reader.string_or("torch_dtype", "");
    config.layout_hint = CheckpointLayout::kTorch;
  } else if (reader.has("dtype")) {
    config.weight_dtype = reader.string_or("dtype", "");
    config.layout_hint = CheckpointLayout::kPaddle;
  }

  for (const auto& [key, value] : std::initializer_list<std::pair<const char*, int>>{
           {"hidden_size", config.hidden_size},
           {"intermediate_size", config.intermediate_size},
           {"num_hidden_layers", config.num_hidden_layers},
           {"num_attention_heads", config.num_attention_heads},
           {"num_key_value_heads", config.num_key_value_heads},
           {"head_dim", config.head_dim},
           {"vocab_size", config.vocab_size},
           {"max_position_embeddings", config.max_position_embeddings}})
    require_positive(reader, key, value);
  if (config.num_attention_heads % config.num_key_value_heads != 0)
    fail(source, ": num_attention_heads (", config.num_attention_heads, ") must be divisible by num_key_value_heads (",
         config.num_key_value_heads, ")");
  if (config.head_dim % 2 != 0) fail(source, ": head_dim must be even for RoPE pairs, got ", config.head_dim);
  if (!(config.rope_theta > 0)) fail(source, ": rope_theta must be positive, got ", config.rope_theta);
  if (!(config.rms_norm_eps > 0)) fail(source, ": rms_norm_eps must be positive, got ", config.rms_norm_eps);
  if (!(config.compression_ratio > 0))
    fail(source, ": compression_ratio must be positive, got ", config.compression_ratio);
  if (config.ori_vocab_size && (*config.ori_vocab_size <= 0 || *config.ori_vocab_size > config.vocab_size))
    fail(source, ": ori_vocab_size ", *config.ori_vocab_size, " must lie in 1..vocab_size (", config.vocab_size, ")");
  if (config.num_nextn_predict_layers < 0)
    fail(source, ": num_nextn_predict_layers must be >= 0, got ", config.num_nextn_predict_layers);
  if (reader.bool_or("use_bias", false))
    fail(source, ": use_bias=true is not an ERNIE 4.5 text model (no released checkpoint has Linear biases)");
  const std::string act = reader.string_or("hidden_act", "silu");
  if (act != "silu") fail(source, ": hidden_act \"", act, "\" is not supported (expected \"silu\")");
  if (reader.has("rope_scaling"))
    fail(source, ": rope_scaling ", root.at("rope_scaling").dump(), " is not supported (ERNIE 4.5 uses plain RoPE)");

  const bool vl_architecture = config.architecture == "Ernie4_5_VLMoeForConditionalGeneration";
  const bool moe_architecture = config.architecture == "Ernie4_5_MoeForCausalLM" || vl_architecture;
  if (moe_architecture) {
    config.moe = parse_moe(reader, config.num_hidden_layers, vl_architecture);
    if (vl_architecture) config.vl = parse_vl(reader, config);
  } else if (reader.has("moe_num_experts")) {
    fail(source, ": architecture ", config.architecture, " is dense but the config sets moe_num_experts");
  }
  config.release = parse_fastdeploy_quantization(root, source);
  return config;
}

ModelConfig load_model_config(const std::string& model_dir) {
  const std::string path = model_dir + "/config.json";
  std::ifstream file(path);
  if (!file) fail("cannot read ", path, " (is --model a checkpoint directory?)");
  std::stringstream text;
  text << file.rdbuf();
  return parse_model_config(text.str(), path);
}

}  // namespace ernie
