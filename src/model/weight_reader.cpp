#include "model/weight_reader.h"

#include <cstring>

#include "kernels/quantize.h"
#include "kernels/wint2.h"
#include "model/prequantized.h"
#include "model/quantization.h"
#include "util/error.h"

namespace ernie {

namespace {

void require_float(const TensorView& tensor) {
  if (!is_float_dtype(tensor.dtype()))
    fail("tensor \"", tensor.name(), "\" has dtype ", safetensors_dtype_name(tensor.dtype()),
         "; weights must be BF16, F16 or F32");
}

void require_shape(const TensorView& tensor, const std::vector<int64_t>& expected) {
  if (tensor.shape() != expected)
    fail("tensor \"", tensor.name(), "\" has shape ", shape_to_string(tensor.shape()), ", expected ",
         shape_to_string(expected));
}

// A tensor of raw bytes of exactly `shape` (FastDeploy's packed weights and WINT2 group
// scales), which the releases may type U8 or I8.
const uint8_t* take_bytes(Checkpoint& checkpoint, const std::string& name, const std::vector<int64_t>& shape) {
  const TensorView tensor = checkpoint.take(name, shape);
  if (tensor.dtype() != DType::kU8 && tensor.dtype() != DType::kI8)
    fail("tensor \"", tensor.name(), "\" has dtype ", safetensors_dtype_name(tensor.dtype()), ", expected U8 or I8");
  require_shape(tensor, shape);
  return tensor.data;
}

// A packed Linear whose outputs are the concatenation of `outs` (gate | up): one matrix
// per part, made by make(first output, count).
template <typename Make>
std::vector<WeightMatrix> split_outputs(const std::vector<int64_t>& outs, Make make) {
  std::vector<WeightMatrix> parts;
  int64_t first = 0;
  for (int64_t out : outs) {
    parts.push_back(make(first, out));
    first += out;
  }
  return parts;
}

}  // namespace

void expect_shape(const TensorView& tensor, const std::vector<int64_t>& expected) {
  require_float(tensor);
  require_shape(tensor, expected);
}

std::vector<float> to_f32(const TensorView& tensor) {
  require_float(tensor);
  std::vector<float> values(static_cast<size_t>(tensor.info->num_elements()));
  convert_to_f32(tensor.dtype(), tensor.data, values.data(), values.size());
  return values;
}

WeightMatrix view_matrix(const TensorView& tensor) {
  require_float(tensor);
  WeightMatrix matrix;
  matrix.dtype = tensor.dtype();
  matrix.rows = tensor.shape()[0];
  matrix.cols = tensor.shape()[1];
  matrix.data = tensor.data;
  return matrix;
}

WeightMatrix transposed_columns(const TensorView& tensor, int64_t first, int64_t count) {
  require_float(tensor);
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

using Shape = std::vector<int64_t>;

WeightReader::WeightReader(Checkpoint& checkpoint, CheckpointLayout layout)
    : WeightReader(checkpoint, layout, layout == CheckpointLayout::kPaddle ? "ernie." : "model.") {}

WeightReader::WeightReader(Checkpoint& checkpoint, CheckpointLayout layout, std::string prefix)
    : checkpoint_(checkpoint), layout_(layout), prefix_(std::move(prefix)) {}

std::vector<float> WeightReader::vector(const std::string& name, int64_t size) {
  const TensorView tensor = checkpoint_.take(prefix_ + name, {size});
  expect_shape(tensor, {size});
  return to_f32(tensor);
}

WeightMatrix WeightReader::linear(const std::string& name, int64_t out, int64_t in) {
  return fused_linear(name, {out}, in).front();
}

std::vector<WeightMatrix> WeightReader::fused_linear(const std::string& name, const std::vector<int64_t>& outs,
                                                     int64_t in) {
  int64_t total = 0;
  for (int64_t out : outs) total += out;
  const Shape expected = layout_ == CheckpointLayout::kPaddle ? Shape{in, total} : Shape{total, in};
  std::vector<WeightMatrix> parts;
  if (!checkpoint_.contains(prefix_ + name) && is_prequantized(checkpoint_)) {
    // `ernie quantize` left this Linear out: its packed form is attached after loading.
    for (int64_t out : outs) parts.push_back(prequantized_placeholder(out, in));
    return parts;
  }
  const std::string stem = name.size() > 7 && name.ends_with(".weight") ? name.substr(0, name.size() - 7) : "";
  if (!checkpoint_.contains(prefix_ + name) && !stem.empty() && checkpoint_.contains(prefix_ + stem + ".quant_weight"))
    fail("tensor \"", prefix_ + stem, ".quant_weight\" is a FastDeploy pre-quantized wint8/wint4 Linear in Paddle's GPU "
         "weight_quantize layout, which ernie.cpp does not read yet (docs/quantization.md); only WINT2 experts are read");
  const TensorView tensor = checkpoint_.take(prefix_ + name, expected);
  expect_shape(tensor, expected);
  int64_t first = 0;
  const WeightMatrix whole = layout_ == CheckpointLayout::kTorch ? view_matrix(tensor) : WeightMatrix{};
  for (int64_t out : outs) {
    parts.push_back(layout_ == CheckpointLayout::kTorch ? whole.row_slice(first, out)
                                                         : transposed_columns(tensor, first, out));
    parts.back().source_tensor = &tensor.name();
    first += out;
  }
  return parts;
}

BiasedLinear WeightReader::biased_linear(const std::string& base, int64_t out, int64_t in) {
  return {linear(base + ".weight", out, in), vector(base + ".bias", out)};
}

LayerNormWeights WeightReader::layer_norm(const std::string& base, int64_t size) {
  return {vector(base + ".weight", size), vector(base + ".bias", size)};
}

std::vector<float> WeightReader::router(const std::string& name, int64_t experts, int64_t hidden) {
  const TensorView tensor = checkpoint_.take(prefix_ + name, {experts, hidden});
  const bool stored_in_out =
      tensor.shape() == Shape{hidden, experts} && (layout_ == CheckpointLayout::kPaddle || experts != hidden);
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

AttentionWeights WeightReader::attention(const std::string& base, const ModelConfig& config) {
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

std::vector<WeightMatrix> WeightReader::wint2_linear(const std::string& base, const std::vector<int64_t>& outs,
                                                    int64_t in) {
  int64_t total = 0;
  for (int64_t out : outs) total += out;
  if (in % 128 != 0) fail("tensor \"", prefix_ + base, "quant_weight\": a WINT2 Linear needs a multiple of 128 inputs, got ", in);
  auto floats = [&](const char* field) {
    const TensorView tensor = checkpoint_.take(prefix_ + base + field, {total});
    expect_shape(tensor, {total});
    return to_f32(tensor);
  };
  const uint8_t* quant_weight = take_bytes(checkpoint_, prefix_ + base + "quant_weight", {in / 4, total});
  const uint8_t* weight_scale = take_bytes(checkpoint_, prefix_ + base + "weight_scale", {in / 128, total});
  const std::vector<float> super_scales = floats("super_scales"), code_scale = floats("code_scale"),
                           code_zp = floats("code_zp");
  std::vector<WeightMatrix> parts = split_outputs(outs, [&](int64_t first, int64_t count) {
    return make_wint2_weight(quant_weight, weight_scale, super_scales.data(), code_scale.data(), code_zp.data(), in,
                             total, first, count);
  });
  // Transposed into rows: the mapped bytes' pages would stay in the RSS.
  release_mapped_range(quant_weight, static_cast<size_t>(in / 4 * total));
  release_mapped_range(weight_scale, static_cast<size_t>(in / 128 * total));
  return parts;
}

std::vector<WeightMatrix> WeightReader::w4a8_linear(const std::string& base, const std::vector<int64_t>& outs,
                                                   int64_t in, int part, int32_t hadamard) {
  int64_t total = 0;
  for (int64_t out : outs) total += out;
  const std::string name = checkpoint_.part_name(part, prefix_ + base);
  if (in % kIntegerGroup != 0)
    fail("tensor \"", name, "quant_weight\": a W4A8 Linear needs a multiple of ", kIntegerGroup, " inputs, got ", in);
  if (hadamard > 0 && in % hadamard != 0)
    fail("tensor \"", name, "quant_weight\": its ", in, " inputs are not whole blocks of hadamard_block_size ", hadamard);
  const uint8_t* packed = take_bytes(checkpoint_, name + "quant_weight", {in / 2, total});
  const TensorView scale = checkpoint_.take(name + "weight_scale", {total});
  expect_shape(scale, {total});
  const std::vector<float> weight_scale = to_f32(scale);
  const TensorView activation = checkpoint_.take(name + "activation_scale", {1});
  if (activation.info->num_elements() != 1 || activation.shape().size() > 1)
    fail("tensor \"", activation.name(), "\" has shape ", shape_to_string(activation.shape()), ", expected [1] (one scale per expert)");
  const float activation_scale = to_f32(activation).front();
  std::vector<WeightMatrix> parts = split_outputs(outs, [&](int64_t first, int64_t count) {
    return make_w4a8_weight(packed, weight_scale.data(), activation_scale, hadamard, in, total, first, count);
  });
  release_mapped_range(packed, static_cast<size_t>(in / 2 * total));  // repacked: its pages would stay in the RSS
  return parts;
}

std::vector<MlpWeights> WeightReader::expert(const std::string& base, int64_t hidden, int64_t inner, int32_t hadamard) {
  if (!checkpoint_.contains(checkpoint_.part_name(0, prefix_ + base + "up_gate_proj.activation_scale")))
    return {mlp(base, hidden, inner)};
  const int parts = checkpoint_.rank_parts();
  if (inner % parts != 0)
    fail("tensor \"", checkpoint_.part_name(0, prefix_ + base), "up_gate_proj.quant_weight\": ", parts,
         " rank parts do not divide the experts' inner size ", inner);
  if (hadamard <= 0)
    fail("tensor \"", checkpoint_.part_name(0, prefix_ + base), "up_gate_proj.activation_scale\" is a FastDeploy W4A8 "
         "expert, but config.json's quantization_config does not announce moe_quant_type \"w4a8\"");
  std::vector<MlpWeights> mlps;
  const int64_t part_inner = inner / parts;
  for (int part = 0; part < parts; ++part) {
    MlpWeights mlp;
    // gate | up, as FastDeploy's fused up_gate_proj holds them; the up projection's input
    // is not rotated, the down projection's is.
    auto gate_up = w4a8_linear(base + "up_gate_proj.", {part_inner, part_inner}, hidden, part, 0);
    mlp.gate = gate_up[0];
    mlp.up = gate_up[1];
    mlp.down = w4a8_linear(base + "down_proj.", {hidden}, part_inner, part, hadamard).front();
    mlps.push_back(std::move(mlp));
  }
  return mlps;
}

MlpWeights WeightReader::mlp(const std::string& base, int64_t hidden, int64_t inner) {
  MlpWeights mlp;
  if (has(base + "up_gate_proj.code_scale")) {
    // FastDeploy's WINT2 experts ([in/4, out] bytes, gate then up), read as stored.
    auto parts = wint2_linear(base + "up_gate_proj.", {inner, inner}, hidden);
    mlp.gate = parts[0];
    mlp.up = parts[1];
    mlp.down = wint2_linear(base + "down_proj.", {hidden}, inner).front();
    return mlp;
  }
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

}  // namespace ernie
