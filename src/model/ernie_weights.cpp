#include "model/ernie_weights.h"

#include <cstring>

#include "util/error.h"
#include "util/log.h"

namespace ernie {
namespace {

using Shape = std::vector<int64_t>;

void expect_shape(const TensorView& tensor, const Shape& expected) {
  if (tensor.shape() != expected)
    fail("tensor \"", tensor.name(), "\" has shape ", shape_to_string(tensor.shape()), ", expected ",
         shape_to_string(expected));
}

std::vector<float> to_f32(const TensorView& tensor) {
  std::vector<float> values(static_cast<size_t>(tensor.info->num_elements()));
  convert_to_f32(tensor.dtype(), tensor.data, values.data(), values.size());
  return values;
}

WeightMatrix view_matrix(const TensorView& tensor) {
  WeightMatrix matrix;
  matrix.dtype = tensor.dtype();
  matrix.rows = tensor.shape()[0];
  matrix.cols = tensor.shape()[1];
  matrix.data = tensor.data;
  return matrix;
}

// From an [in, out] tensor, the columns [first, first + count) as an owned [count, in]
// matrix with the element bits unchanged.
WeightMatrix transposed_columns(const TensorView& tensor, int64_t first, int64_t count) {
  const int64_t in = tensor.shape()[0];
  const int64_t out = tensor.shape()[1];
  const size_t element = dtype_size(tensor.dtype());
  auto bytes = std::shared_ptr<uint8_t[]>(new uint8_t[static_cast<size_t>(count * in) * element]);
  for (int64_t o = 0; o < count; ++o) {
    for (int64_t i = 0; i < in; ++i) {
      std::memcpy(bytes.get() + (o * in + i) * element, tensor.data + (i * out + first + o) * element, element);
    }
  }
  WeightMatrix matrix;
  matrix.dtype = tensor.dtype();
  matrix.rows = count;
  matrix.cols = in;
  matrix.data = bytes.get();
  matrix.storage = std::shared_ptr<const void>(bytes, bytes.get());
  return matrix;
}

// Reads the checkpoint in the layout found, naming tensors with the right prefix and
// re-laying-out Paddle's [in, out] and fused tensors.
class WeightReader {
 public:
  WeightReader(Checkpoint& checkpoint, CheckpointLayout layout)
      : checkpoint_(checkpoint), layout_(layout), prefix_(layout == CheckpointLayout::kPaddle ? "ernie." : "model.") {}

  const std::string& prefix() const { return prefix_; }
  bool has(const std::string& name) const { return checkpoint_.contains(prefix_ + name); }

  std::vector<float> vector(const std::string& name, int64_t size) {
    const TensorView tensor = checkpoint_.take(prefix_ + name, {size});
    expect_shape(tensor, {size});
    return to_f32(tensor);
  }

  // A Linear with `out` outputs and `in` inputs.
  WeightMatrix linear(const std::string& name, int64_t out, int64_t in) {
    return fused_linear(name, {out}, in).front();
  }

  // A Linear whose outputs are the concatenation of parts (q|k|v, gate|up): torch gives
  // [Σout, in] row blocks (zero-copy slices), Paddle [in, Σout] column blocks.
  std::vector<WeightMatrix> fused_linear(const std::string& name, const std::vector<int64_t>& outs, int64_t in) {
    int64_t total = 0;
    for (int64_t out : outs) total += out;
    const Shape expected = layout_ == CheckpointLayout::kPaddle ? Shape{in, total} : Shape{total, in};
    const TensorView tensor = checkpoint_.take(prefix_ + name, expected);
    expect_shape(tensor, expected);
    std::vector<WeightMatrix> parts;
    int64_t first = 0;
    const WeightMatrix whole = layout_ == CheckpointLayout::kTorch ? view_matrix(tensor) : WeightMatrix{};
    for (int64_t out : outs) {
      parts.push_back(layout_ == CheckpointLayout::kTorch ? whole.row_slice(first, out)
                                                           : transposed_columns(tensor, first, out));
      first += out;
    }
    return parts;
  }

  // Router weight [E, H] in fp32. Paddle (and VL-PT raw parameters) store [H, E].
  std::vector<float> router(const std::string& name, int64_t experts, int64_t hidden) {
    const TensorView tensor = checkpoint_.take(prefix_ + name, {experts, hidden});
    const bool stored_in_out = tensor.shape() == Shape{hidden, experts} &&
                               (layout_ == CheckpointLayout::kPaddle || experts != hidden);
    if (stored_in_out) {
      const std::vector<float> in_out = to_f32(tensor);
      std::vector<float> out_in(in_out.size());
      for (int64_t h = 0; h < hidden; ++h)
        for (int64_t e = 0; e < experts; ++e) out_in[e * hidden + h] = in_out[h * experts + e];
      return out_in;
    }
    expect_shape(tensor, {experts, hidden});
    return to_f32(tensor);
  }

  // The separate torch names, or the fused name (torch or Paddle orientation).
  AttentionWeights attention(const std::string& base, const ModelConfig& config) {
    const int64_t h = config.hidden_size, q = config.q_width(), kv = config.kv_width();
    AttentionWeights attention;
    if (layout_ == CheckpointLayout::kTorch && !has(base + "qkv_proj.weight")) {
      attention.q = linear(base + "q_proj.weight", q, h);
      attention.k = linear(base + "k_proj.weight", kv, h);
      attention.v = linear(base + "v_proj.weight", kv, h);
    } else {
      auto parts = fused_linear(base + "qkv_proj.weight", {q, kv, kv}, h);
      attention.q = parts[0];
      attention.k = parts[1];
      attention.v = parts[2];
    }
    attention.o = linear(base + "o_proj.weight", h, q);
    return attention;
  }

  MlpWeights mlp(const std::string& base, int64_t hidden, int64_t inner) {
    MlpWeights mlp;
    if (layout_ == CheckpointLayout::kTorch && !has(base + "up_gate_proj.weight")) {
      mlp.gate = linear(base + "gate_proj.weight", inner, hidden);
      mlp.up = linear(base + "up_proj.weight", inner, hidden);
    } else {
      auto parts = fused_linear(base + "up_gate_proj.weight", {inner, inner}, hidden);  // gate first
      mlp.gate = parts[0];
      mlp.up = parts[1];
    }
    mlp.down = linear(base + "down_proj.weight", hidden, inner);
    return mlp;
  }

  Checkpoint& checkpoint() { return checkpoint_; }
  CheckpointLayout layout() const { return layout_; }

 private:
  Checkpoint& checkpoint_;
  CheckpointLayout layout_;
  std::string prefix_;
};

MoeWeights read_moe(WeightReader& reader, const std::string& base, const ModelConfig& config) {
  const MoeConfig& moe_config = *config.moe;
  const int64_t h = config.hidden_size, e = moe_config.num_experts;
  MoeWeights moe;
  moe.router = reader.router(base + "gate.weight", e, h);
  const std::string bias_name = base + "moe_statics.e_score_correction_bias";
  if (reader.has(bias_name)) {
    const TensorView bias = reader.checkpoint().take(reader.prefix() + bias_name);
    // [1, E] for text models; VL keeps one row per modality and the text row is row 0.
    if (bias.shape().size() != 2 || bias.shape()[1] != e || bias.shape()[0] < 1)
      fail("tensor \"", bias.name(), "\" has shape ", shape_to_string(bias.shape()), ", expected [1, ", e, "]");
    std::vector<float> all = to_f32(bias);
    moe.correction_bias.assign(all.begin(), all.begin() + e);
  } else {
    if (moe_config.use_correction_bias)
      fail("checkpoint is missing tensor \"", reader.prefix() + bias_name, "\" (expected shape [1, ", e,
           "]; config has moe_use_aux_free=true)");
    moe.correction_bias.assign(static_cast<size_t>(e), 0.0f);
  }
  for (int64_t expert = 0; expert < e; ++expert)
    moe.experts.push_back(
        reader.mlp(base + "experts." + std::to_string(expert) + ".", h, moe_config.intermediate_size));
  if (moe_config.num_shared_experts > 0)
    moe.shared = reader.mlp(base + "shared_experts.", h,
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
  if (moe_layer) {
    layer.moe = read_moe(reader, base + "mlp.", config);
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
  if (head == nullptr) fail("checkpoint is missing tensor \"lm_head.weight\" (expected shape [", v, ", ", h,
                            "]; tie_word_embeddings is false)");
  // Paddle stores [H, V]; some early PT releases did too. Square heads follow the layout.
  const bool in_out = head->shape() == std::vector<int64_t>{h, v} &&
                      (reader.layout() == CheckpointLayout::kPaddle || h != v);
  if (in_out) return transposed_columns(*head, 0, v);
  expect_shape(*head, {v, h});
  return view_matrix(*head);
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
                                const LayerProgress& on_layer_loaded) {
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
    if (on_layer_loaded) on_layer_loaded(layer + 1, config.num_hidden_layers);
  }
  weights.final_norm = reader.vector("norm.weight", h);
  weights.lm_head = read_lm_head(reader, checkpoint, config, weights.embedding);

  weights.mtp = read_mtp(reader, config);
  if (config.num_nextn_predict_layers > 0 && weights.mtp.empty())
    log_info("config.json declares ", config.num_nextn_predict_layers,
             " MTP layer(s) but the checkpoint has none; speculative decoding with MTP will be unavailable");

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
