// ernie.cpp pre-quantized checkpoints, as `ernie quantize` writes them: the source
// checkpoint's directory with
//   - config.json gaining "quantization_config": {"quantization": <the --quantization
//     value, a name or FastDeploy's mix_quant object>, "ernie_packed_layout": <version>},
//     which FastDeploy's rule lets take priority over the command line;
//   - one model.safetensors holding every source tensor that is not a quantized Linear,
//     unchanged (names, layout, dtype), and the quantized Linears packed as the kernels
//     read them, in the quantized-weights cache's format (model/quantized_cache.h), with
//     metadata "ernie.packed_layout" naming the layout version.
// Loading one maps the packed Linears in place: nothing is converted at start.
#pragma once

#include <optional>
#include <string>

#include "model/checkpoint.h"
#include "model/ernie_weights.h"

namespace ernie {

// Whether the checkpoint was written by `ernie quantize` (any packed-layout version).
bool is_prequantized(const Checkpoint& checkpoint);

// Stands for a Linear the checkpoint left out (rows x cols, no data) until
// attach_prequantized_linears gives it its packed form.
WeightMatrix prequantized_placeholder(int64_t rows, int64_t cols);

// Gives every Linear the checkpoint left out its packed form. Throws ernie::Error when the
// packed layout is another version's or a Linear's packed data is missing or does not fit.
void attach_prequantized_linears(Checkpoint& checkpoint, ErnieWeights& weights);

// The --quantization value a pre-quantized checkpoint was made with (its config.json),
// as the flag would spell it; nullopt for an ordinary checkpoint.
std::optional<std::string> prequantized_quantization(const std::string& model_dir);

struct PrequantizedWrite {
  size_t packed_linears = 0;
  size_t copied_tensors = 0;
  uint64_t bytes = 0;  // of model.safetensors
};

// Writes `out_dir` (created; it must not hold a checkpoint already) from the checkpoint
// in `source_dir`, whose weights `weights` were loaded from `source` and quantized with
// `quantization` (the flag's value).
PrequantizedWrite write_prequantized_checkpoint(const std::string& source_dir, Checkpoint& source,
                                                const ErnieWeights& weights, const std::string& quantization,
                                                const std::string& out_dir);

}  // namespace ernie
