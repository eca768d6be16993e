// Reading ERNIE tensors from a checkpoint in whichever published layout it uses: names
// get the layout's prefix, Paddle's [in, out] and fused tensors are re-laid-out into the
// canonical [out, in] WeightMatrix form, and every shape is checked.
#pragma once

#include <string>
#include <vector>

#include "model/checkpoint.h"
#include "model/config.h"
#include "model/ernie_weights.h"
#include "tensor/weight_matrix.h"

namespace ernie {

// Fails naming the tensor unless its shape is `expected`.
void expect_shape(const TensorView& tensor, const std::vector<int64_t>& expected);
std::vector<float> to_f32(const TensorView& tensor);
// A zero-copy view of a 2-D tensor as [rows, cols].
WeightMatrix view_matrix(const TensorView& tensor);
// From an [in, out] tensor, the columns [first, first + count) as an owned [count, in]
// matrix with the element bits unchanged.
WeightMatrix transposed_columns(const TensorView& tensor, int64_t first, int64_t count);

class WeightReader {
 public:
  // `prefix` overrides the layout's ("model." / "ernie."), e.g. "" for the vision tower.
  WeightReader(Checkpoint& checkpoint, CheckpointLayout layout);
  WeightReader(Checkpoint& checkpoint, CheckpointLayout layout, std::string prefix);

  const std::string& prefix() const { return prefix_; }
  bool has(const std::string& name) const { return checkpoint_.contains(prefix_ + name); }

  std::vector<float> vector(const std::string& name, int64_t size);
  // A Linear with `out` outputs and `in` inputs.
  WeightMatrix linear(const std::string& name, int64_t out, int64_t in);
  // A Linear whose outputs are the concatenation of parts (q|k|v, gate|up): torch gives
  // [Σout, in] row blocks (zero-copy slices), Paddle [in, Σout] column blocks.
  std::vector<WeightMatrix> fused_linear(const std::string& name, const std::vector<int64_t>& outs, int64_t in);
  // BASE.weight and BASE.bias.
  BiasedLinear biased_linear(const std::string& base, int64_t out, int64_t in);
  LayerNormWeights layer_norm(const std::string& base, int64_t size);
  // Router weight [E, H] in fp32. Paddle (and VL-PT raw parameters) store [H, E].
  std::vector<float> router(const std::string& name, int64_t experts, int64_t hidden);
  // The separate torch names, or the fused name (torch or Paddle orientation).
  AttentionWeights attention(const std::string& base, const ModelConfig& config);
  MlpWeights mlp(const std::string& base, int64_t hidden, int64_t inner);
  // FastDeploy's WINT2 Linear BASE.{quant_weight, weight_scale, super_scales, code_scale,
  // code_zp} (kernels/wint2.h), its outputs split into `outs`.
  std::vector<WeightMatrix> wint2_linear(const std::string& base, const std::vector<int64_t>& outs, int64_t in);
  // A routed expert BASE: one MLP, or for FastDeploy's W4A8 experts (BASE{up_gate_proj,
  // down_proj}.{quant_weight, weight_scale, activation_scale}) one MLP per rank part of a
  // pre-sharded release, each of inner / parts with its own scales; the parts' outputs
  // sum to the expert's. `hadamard`: the block of the W4A8 down projection's input rotation.
  std::vector<MlpWeights> expert(const std::string& base, int64_t hidden, int64_t inner, int32_t hadamard);

  Checkpoint& checkpoint() { return checkpoint_; }
  CheckpointLayout layout() const { return layout_; }

 private:
  // Part `part` of a FastDeploy W4A8 Linear BASE{quant_weight, weight_scale, activation_scale}.
  std::vector<WeightMatrix> w4a8_linear(const std::string& base, const std::vector<int64_t>& outs, int64_t in, int part,
                                        int32_t hadamard);

  Checkpoint& checkpoint_;
  CheckpointLayout layout_;
  std::string prefix_;
};

}  // namespace ernie
