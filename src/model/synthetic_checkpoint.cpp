#include "model/synthetic_checkpoint.h"

#include <cmath>
#include <cstring>
#include <fstream>
#include <functional>

#include <nlohmann/json.hpp>

#include "model/safetensors_writer.h"
#include "util/error.h"
#include "util/hash.h"
#include "util/random.h"

namespace ernie {
namespace {

using Shape = std::vector<int64_t>;

// One logical tensor in torch orientation, before layout-specific renaming/fusing.
struct Values {
  Shape shape;
  std::vector<float> data;  // already rounded to the stored dtype's values
  DType dtype = DType::kBF16;
};

// A tensor's shape and dtype now, its values when it is written: a checkpoint larger
// than memory (21B-A3B is 43.7 GB) is generated one tensor at a time.
struct Lazy {
  Shape shape;
  DType dtype = DType::kBF16;
  std::function<Values()> make;
};

class Generator {
 public:
  explicit Generator(const SyntheticModelSpec& spec) : spec_(spec) {}

  // Values drawn from a stream keyed by (seed, canonical name), so they do not depend on
  // the order in which tensors are generated or on the layout written.
  Lazy normal(const std::string& key, const Shape& shape, double mean, double std, DType dtype) const {
    const uint64_t seed = spec_.seed * 0x100000001b3ull ^ fnv1a(key);
    return {shape, dtype, [=] {
              Random random(seed);
              Values values{shape, {}, dtype};
              int64_t count = 1;
              for (int64_t dim : shape) count *= dim;
              values.data.resize(static_cast<size_t>(count));
              for (float& value : values.data) {
                const float drawn = static_cast<float>(mean + std * random.normal());
                value = dtype == DType::kBF16 ? bf16_to_f32(f32_to_bf16(drawn)) : drawn;
              }
              return values;
            }};
  }
  Lazy linear(const std::string& key, int64_t out, int64_t in) const {
    return normal(key, {out, in}, 0.0, spec_.weight_std, DType::kBF16);
  }
  Lazy norm(const std::string& key, int64_t size) const { return normal(key, {size}, 1.0, spec_.norm_std, DType::kBF16); }
  Lazy bias(const std::string& key, int64_t size) const { return normal(key, {size}, 0.0, spec_.bias_std, DType::kBF16); }

 private:
  const SyntheticModelSpec& spec_;
};

std::vector<uint8_t> encode(const std::vector<float>& values, DType dtype) {
  std::vector<uint8_t> bytes(values.size() * dtype_size(dtype));
  if (dtype == DType::kF32) {
    std::memcpy(bytes.data(), values.data(), bytes.size());
  } else {
    for (size_t i = 0; i < values.size(); ++i) {
      const uint16_t bits = f32_to_bf16(values[i]);
      bytes[2 * i] = static_cast<uint8_t>(bits);
      bytes[2 * i + 1] = static_cast<uint8_t>(bits >> 8);
    }
  }
  return bytes;
}

// [out, in] -> [in, out]
Lazy transposed(const Lazy& matrix) {
  return {{matrix.shape[1], matrix.shape[0]}, matrix.dtype, [matrix] {
            const Values source = matrix.make();
            const int64_t out = source.shape[0], in = source.shape[1];
            Values result{{in, out}, std::vector<float>(source.data.size()), source.dtype};
            for (int64_t o = 0; o < out; ++o)
              for (int64_t i = 0; i < in; ++i)
                result.data[static_cast<size_t>(i * out + o)] = source.data[static_cast<size_t>(o * in + i)];
            return result;
          }};
}

// Stacks [out_k, in] matrices into [Σ out_k, in] (q|k|v, gate|up).
Lazy stacked(const std::vector<Lazy>& parts) {
  Shape shape{0, parts.front().shape[1]};
  for (const Lazy& part : parts) shape[0] += part.shape[0];
  return {shape, parts.front().dtype, [parts, shape] {
            Values result{shape, {}, parts.front().dtype};
            for (const Lazy& part : parts) {
              const Values values = part.make();
              result.data.insert(result.data.end(), values.data.begin(), values.data.end());
            }
            return result;
          }};
}

class CheckpointBuilder {
 public:
  CheckpointBuilder(const SyntheticModelSpec& spec, CheckpointLayout layout)
      : spec_(spec), layout_(layout), generator_(spec), prefix_(layout == CheckpointLayout::kPaddle ? "ernie." : "model.") {}

  void add(const std::string& name, const Lazy& values) {
    TensorToWrite tensor{name, values.dtype, values.shape, {}};
    tensor.produce = [values] { return encode(values.make().data, values.dtype); };
    tensors_.push_back(std::move(tensor));
  }

  // A Linear in the layout's orientation.
  void add_linear(const std::string& name, const Lazy& torch_matrix) {
    add(name, layout_ == CheckpointLayout::kPaddle ? transposed(torch_matrix) : torch_matrix);
  }

  void add_mlp(const std::string& base, int64_t hidden, int64_t inner) {
    const Lazy gate = generator_.linear(base + "gate_proj", inner, hidden);
    const Lazy up = generator_.linear(base + "up_proj", inner, hidden);
    if (layout_ == CheckpointLayout::kPaddle) {
      add_linear(prefix_ + base + "up_gate_proj.weight", stacked({gate, up}));  // gate first
    } else {
      add(prefix_ + base + "gate_proj.weight", gate);
      add(prefix_ + base + "up_proj.weight", up);
    }
    add_linear(prefix_ + base + "down_proj.weight", generator_.linear(base + "down_proj", hidden, inner));
  }

  void add_layer(const std::string& base, bool moe) {
    const int64_t h = spec_.hidden_size, q = int64_t{spec_.num_heads} * spec_.head_dim,
                  kv = int64_t{spec_.num_kv_heads} * spec_.head_dim;
    add(prefix_ + base + "input_layernorm.weight", generator_.norm(base + "input_layernorm", h));
    add(prefix_ + base + "post_attention_layernorm.weight", generator_.norm(base + "post_attention_layernorm", h));
    const Lazy wq = generator_.linear(base + "q_proj", q, h);
    const Lazy wk = generator_.linear(base + "k_proj", kv, h);
    const Lazy wv = generator_.linear(base + "v_proj", kv, h);
    if (layout_ == CheckpointLayout::kPaddle) {
      add_linear(prefix_ + base + "self_attn.qkv_proj.weight", stacked({wq, wk, wv}));
    } else {
      add(prefix_ + base + "self_attn.q_proj.weight", wq);
      add(prefix_ + base + "self_attn.k_proj.weight", wk);
      add(prefix_ + base + "self_attn.v_proj.weight", wv);
    }
    add_linear(prefix_ + base + "self_attn.o_proj.weight", generator_.linear(base + "o_proj", h, q));
    if (!moe) {
      add_mlp(base + "mlp.", h, spec_.intermediate_size);
      return;
    }
    const int64_t e = spec_.num_experts;
    const bool vl = spec_.vision_depth > 0;
    const Lazy router = generator_.normal(base + "router", {e, h}, 0.0, spec_.weight_std, DType::kF32);
    // VL stores both routers [H, E] in either layout (docs/vl-model-notes.md §2).
    if (vl) {
      add(prefix_ + base + "mlp.gate.weight", transposed(router));
      add(prefix_ + base + "mlp.gate.weight_1",
          transposed(generator_.normal(base + "vision_router", {e, h}, 0.0, spec_.weight_std, DType::kF32)));
    } else {
      add_linear(prefix_ + base + "mlp.gate.weight", router);
    }
    add(prefix_ + base + "mlp.moe_statics.e_score_correction_bias",
        generator_.normal(base + "bias", {vl ? 2 : 1, e}, 0.0, spec_.bias_std, DType::kF32));
    for (int64_t expert = 0; expert < e; ++expert)
      add_mlp(base + "mlp.experts." + std::to_string(expert) + ".", h, spec_.moe_intermediate_size);
    if (vl)
      for (int64_t expert = e; expert < 2 * e; ++expert)
        add_mlp(base + "mlp.experts." + std::to_string(expert) + ".", h, spec_.vision_moe_intermediate_size);
    if (spec_.num_shared_experts > 0)
      add_mlp(base + "mlp.shared_experts.", h, int64_t{spec_.moe_intermediate_size} * spec_.num_shared_experts);
  }

  void add_biased_linear(const std::string& name, int64_t out, int64_t in) {
    add_linear(name + ".weight", generator_.linear(name, out, in));
    add(name + ".bias", generator_.bias(name + ".bias", out));
  }
  void add_layer_norm(const std::string& name, int64_t size) {
    add(name + ".weight", generator_.norm(name, size));
    add(name + ".bias", generator_.bias(name + ".bias", size));
  }

  // The ViT ("vision_model.", no layout prefix) and the resampler (layout prefix).
  void add_vision_tower() {
    const int64_t de = spec_.vision_hidden_size, patch = 3 * 14 * 14, wide = 4 * de;
    add_linear("vision_model.patch_embed.proj.weight", generator_.linear("patch_embed", de, patch));
    for (int block = 0; block < spec_.vision_depth; ++block) {
      const std::string base = "vision_model.blocks." + std::to_string(block) + ".";
      add_layer_norm(base + "norm1", de);
      add_layer_norm(base + "norm2", de);
      add_biased_linear(base + "attn.qkv", 3 * de, de);
      add_biased_linear(base + "attn.proj", de, de);
      add_biased_linear(base + "mlp.fc1", wide, de);
      add_biased_linear(base + "mlp.fc2", de, wide);
    }
    add_layer_norm("vision_model.ln", de);
    const std::string resampler = prefix_ + "resampler_model.";
    const int64_t spatial = 4 * de;
    add_biased_linear(resampler + "spatial_linear.0", spatial, spatial);
    add_biased_linear(resampler + "spatial_linear.2", spatial, spatial);
    add_layer_norm(resampler + "spatial_linear.3", spatial);
    add_biased_linear(resampler + "temporal_linear.0", spatial, 2 * spatial);
    add_biased_linear(resampler + "temporal_linear.2", spatial, spatial);
    add_layer_norm(resampler + "temporal_linear.3", spatial);
    add_biased_linear(resampler + "mlp", spec_.hidden_size, spatial);
    add(resampler + "after_norm.weight", generator_.norm("resampler.after_norm", spec_.hidden_size));
  }

  std::vector<TensorToWrite> build(const ModelConfig& config) {
    const int64_t h = spec_.hidden_size, v = spec_.vocab_size;
    const Lazy embedding = generator_.linear("embed_tokens", v, h);
    add(prefix_ + "embed_tokens.weight", embedding);  // [V, H] in both layouts
    for (int layer = 0; layer < spec_.num_layers; ++layer)
      add_layer("layers." + std::to_string(layer) + ".", config.is_moe_layer(layer));
    add(prefix_ + "norm.weight", generator_.norm("norm", h));
    if (!spec_.tie_embeddings) add_linear("lm_head.weight", generator_.linear("lm_head", v, h));
    if (spec_.with_mtp) {
      add(prefix_ + "mtp_emb_norm.0.weight", generator_.norm("mtp_emb_norm", h));
      add(prefix_ + "mtp_hidden_norm.0.weight", generator_.norm("mtp_hidden_norm", h));
      add_linear(prefix_ + "mtp_linear_proj.0.weight", generator_.linear("mtp_linear_proj", h, 2 * h));
      add_layer("mtp_block.0.", /*moe=*/false);
    }
    if (spec_.vision_depth > 0) add_vision_tower();
    return std::move(tensors_);
  }

 private:
  const SyntheticModelSpec& spec_;
  CheckpointLayout layout_;
  Generator generator_;
  std::string prefix_;
  std::vector<TensorToWrite> tensors_;
};

nlohmann::ordered_json config_json(const SyntheticModelSpec& spec, CheckpointLayout layout) {
  const bool moe = spec.num_experts > 0;
  const bool vl = spec.vision_depth > 0;
  nlohmann::ordered_json config;
  config["architectures"] = {vl ? "Ernie4_5_VLMoeForConditionalGeneration"
                                : moe ? "Ernie4_5_MoeForCausalLM" : "Ernie4_5ForCausalLM"};
  config["model_type"] = vl ? "ernie4_5_moe_vl" : moe ? "ernie4_5_moe" : "ernie4_5";
  config["bos_token_id"] = 1;
  config["eos_token_id"] = 2;
  config["pad_token_id"] = 0;
  config["hidden_act"] = "silu";
  config["hidden_size"] = spec.hidden_size;
  config["intermediate_size"] = spec.intermediate_size;
  config["max_position_embeddings"] = 131072;
  config["num_attention_heads"] = spec.num_heads;
  config["num_key_value_heads"] = spec.num_kv_heads;
  config["head_dim"] = spec.head_dim;
  config["num_hidden_layers"] = spec.num_layers;
  config["rms_norm_eps"] = spec.rms_norm_eps;
  config["rope_theta"] = spec.rope_theta;
  config["tie_word_embeddings"] = spec.tie_embeddings;
  config["use_bias"] = false;
  config["use_cache"] = true;
  config["vocab_size"] = spec.vocab_size;
  // FastDeploy tells the formats apart by this key.
  config[layout == CheckpointLayout::kPaddle ? "dtype" : "torch_dtype"] = "bfloat16";
  if (moe) {
    config["moe_num_experts"] = spec.num_experts;
    config["moe_k"] = spec.moe_k;
    config["moe_intermediate_size"] = spec.moe_intermediate_size;
    config["moe_num_shared_experts"] = spec.num_shared_experts;
    config["moe_layer_start_index"] = spec.moe_start;
    config["moe_layer_end_index"] = spec.moe_end < 0 ? spec.num_layers - 1 : spec.moe_end;
    config["moe_layer_interval"] = 1;
    config["moe_norm_min"] = 1e-12;
    config["moe_gate"] = "topk";
    config["moe_use_aux_free"] = true;
  }
  if (spec.with_mtp) config["num_nextn_predict_layers"] = 1;
  if (vl) {
    // VL writes [text, vision] lists (docs/vl-model-notes.md §1.1).
    config["moe_num_experts"] = {spec.num_experts, spec.num_experts};
    config["moe_intermediate_size"] = {spec.moe_intermediate_size, spec.vision_moe_intermediate_size};
    config["moe_layer_start_index"] = {spec.moe_start, spec.moe_start};
    const int end = spec.moe_end < 0 ? spec.num_layers - 1 : spec.moe_end;
    config["moe_layer_end_index"] = {end, end};
    config["moe_use_hard_gate"] = true;
    config["rope_3d"] = true;
    config["freq_allocation"] = spec.freq_allocation;
    const int patch_id = spec.im_patch_id >= 0 ? spec.im_patch_id : spec.vocab_size - 16;
    config["im_patch_id"] = patch_id;
    config["image_start_token_id"] = patch_id + 1;
    config["image_end_token_id"] = patch_id + 2;
    config["video_start_token_id"] = patch_id + 3;
    config["video_end_token_id"] = patch_id + 4;
    config["pixel_hidden_size"] = spec.vision_hidden_size;
    config["spatial_conv_size"] = 2;
    config["temporal_conv_size"] = 2;
    config["use_temporal_conv"] = true;
    config["vision_config"] = {{"depth", spec.vision_depth},
                               {"embed_dim", spec.vision_hidden_size},
                               {"hidden_size", spec.vision_hidden_size},
                               {"num_heads", spec.vision_heads},
                               {"mlp_ratio", 4},
                               {"hidden_act", "quick_gelu"},
                               {"in_channels", 3},
                               {"patch_size", 14},
                               {"spatial_merge_size", 2}};
  }
  return config;
}

void write_json(const std::string& path, const nlohmann::ordered_json& value) {
  std::ofstream file(path, std::ios::trunc);
  if (!file) fail("cannot write ", path);
  file << value.dump(2) << "\n";
}

}  // namespace

SyntheticModelSpec synthetic_preset(const std::string& name) {
  SyntheticModelSpec spec;
  if (name == "tiny-dense") return spec;
  if (name == "tiny-moe") {
    spec.num_layers = 4;
    spec.head_dim = 64;
    spec.num_experts = 8;
    spec.moe_k = 2;
    spec.moe_intermediate_size = 128;
    spec.num_shared_experts = 2;
    spec.moe_start = 1;
    return spec;
  }
  if (name == "0.3b") {
    spec.hidden_size = 1024;
    spec.num_layers = 18;
    spec.num_heads = 16;
    spec.num_kv_heads = 2;
    spec.head_dim = 128;
    spec.intermediate_size = 3072;
    spec.vocab_size = 103424;
    spec.weight_std = 0.02;
    return spec;
  }
  if (name == "21b-a3b") {
    spec.hidden_size = 2560;
    spec.num_layers = 28;
    spec.num_heads = 20;
    spec.num_kv_heads = 4;
    spec.head_dim = 128;
    spec.intermediate_size = 12288;
    spec.vocab_size = 103424;
    spec.num_experts = 64;
    spec.moe_k = 6;
    spec.moe_intermediate_size = 1536;
    spec.num_shared_experts = 2;
    spec.moe_start = 1;
    spec.with_mtp = true;
    spec.weight_std = 0.02;
    return spec;
  }
  if (name == "moe-scaled") {
    // 21B-A3B's layer shapes (what decode streams per token) in 3 layers - one dense,
    // two MoE - so it fits and loads quickly on a small machine: a benchmark model.
    spec = synthetic_preset("21b-a3b");
    spec.num_layers = 3;
    spec.with_mtp = false;
    return spec;
  }
  if (name == "vl-tiny") {
    // ERNIE-4.5-VL's structure (two expert sets, shared experts, ViT, resampler, 3-D RoPE
    // with head_dim 128 and freq_allocation 20 as released) at test size.
    spec.num_layers = 3;
    spec.num_experts = 4;
    spec.moe_k = 2;
    spec.moe_intermediate_size = 128;
    spec.num_shared_experts = 1;
    spec.moe_start = 1;
    spec.vision_depth = 2;
    spec.vision_hidden_size = 64;
    spec.vision_heads = 4;
    spec.vision_moe_intermediate_size = 64;
    return spec;
  }
  if (name == "vl-28b-layer") {
    // VL-28B-A3B's vision tower (32 blocks of 1280, 16 heads) and decoder widths in two
    // layers: what image encoding and prefill cost per token, at a size that loads here.
    spec = synthetic_preset("21b-a3b");
    spec.num_layers = 2;
    spec.with_mtp = false;
    spec.vision_depth = 32;
    spec.vision_hidden_size = 1280;
    spec.vision_heads = 16;
    spec.vision_moe_intermediate_size = 512;
    spec.im_patch_id = 100295;
    return spec;
  }
  fail("unknown synthetic preset \"", name,
       "\" (expected tiny-dense, tiny-moe, 0.3b, 21b-a3b, moe-scaled, vl-tiny or vl-28b-layer)");
}

void write_synthetic_checkpoint(const std::string& dir, const SyntheticModelSpec& spec, CheckpointLayout layout,
                                int num_shards) {
  const nlohmann::ordered_json config = config_json(spec, layout);
  // Parsing our own config validates the spec (heads divisible, MoE range, ...).
  const ModelConfig parsed = parse_model_config(config.dump(), "synthetic config");
  write_json(dir + "/config.json", config);
  write_json(dir + "/generation_config.json",
             {{"bos_token_id", 1}, {"eos_token_id", 2}, {"pad_token_id", 0}, {"do_sample", false}});
  CheckpointBuilder builder(spec, layout);
  const std::map<std::string, std::string> metadata = {
      {"format", layout == CheckpointLayout::kPaddle ? "np" : "pt"}};
  write_sharded_safetensors(dir, builder.build(parsed), metadata, num_shards);
}

}  // namespace ernie
