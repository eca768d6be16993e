// Matrix products against weights: y[n, W.rows] = x[n, W.cols] · Wᵀ with fp32
// activations and fp32 accumulation, for every weight dtype a WeightMatrix can hold.
// This is the portable path and the test oracle; ISA-specific fast paths plug in
// behind the same call (the compiler clones the inner loop per ISA and the loader
// picks the best clone the CPU supports at run time).
#pragma once

#include <cstdint>
#include <span>

#include "kernels/matmul_bf16.h"
#include "kernels/quantize.h"
#include "tensor/weight_matrix.h"
#include "util/thread_pool.h"

namespace ernie {

// One activation matrix x [n, cols] that feeds one or more matmuls. Quantized weights
// need it quantized (int8 blocks, or rounded through fp8), packed bf16 weights rounded
// to bf16; that happens at most once per form however many weights read it, into
// buffers the object keeps, so a caller that keeps a MatmulInput across steps allocates
// nothing in steady state.
class MatmulInput {
 public:
  void reset(const float* x, int64_t n, int64_t cols);
  const float* x() const { return x_; }
  int64_t n() const { return n_; }
  int64_t cols() const { return cols_; }
  // The int8 form the integer kernels need for `w`: per block of w.group inputs, or with
  // w's static absmax (and Hadamard) for FastDeploy's W4A8 weights.
  const QuantizedActivations& int8_for(ThreadPool& pool, const WeightMatrix& w);
  const float* fp8_rounded();
  // The bf16-product form (kernels/matmul_bf16.h): rounded over the pool on first use,
  // unless the producer of x rounded it as it wrote it.
  const Bf16Activations& bf16_rows(ThreadPool& pool);

  // A producer that writes x range by range on the pool can round each range for bf16
  // products while it is still in its thread's cache, instead of leaving a pass over all
  // of x to the product. After reset and before writing, round_while_writing(w) says
  // whether w, the input's consumer, takes that form; when it does, the producer must
  // give every element of x to round_written before a product reads the input.
  bool round_while_writing(const WeightMatrix& w);
  // Elements [c0, c1) of rows [t0, t1) of x are final: rounded now if round_while_writing
  // said yes, else nothing. Disjoint ranges may come from different threads at once.
  void round_written(int64_t t0, int64_t t1, int64_t c0, int64_t c1) {
    if (rounding_while_writing_) bf16_.round(x_, t0, t1, c0, c1);
  }
  void round_written(int64_t t0, int64_t t1) { round_written(t0, t1, 0, cols_); }

  // For a producer that writes the bf16-product form itself: where `w` takes that form and
  // it holds bf16 rows (bf16_rows_writable), resets the input to that form alone (n rows of
  // cols; x() is null and no other form exists) and returns it to be written; else
  // returns nullptr and changes nothing. A row's padding input, for odd cols, is the
  // producer's to zero.
  Bf16Activations* bf16_form_alone(const WeightMatrix& w, int64_t n, int64_t cols);

 private:
  // Fails for an input that exists in the bf16-product form alone (bf16_form_alone).
  void need_floats(const char* form) const;

  const float* x_ = nullptr;
  int64_t n_ = 0, cols_ = 0;
  bool have_int8_ = false, have_fp8_ = false, have_bf16_ = false, rounding_while_writing_ = false;
  float int8_absmax_ = 0.0f;  // the form int8_ holds (WeightMatrix::input_absmax, input_hadamard)
  int32_t int8_hadamard_ = 0;
  QuantizedActivations int8_;
  std::vector<float> fp8_;
  Bf16Activations bf16_;
};

// Whether w is in an integer format (int8, int4, int6) the integer kernels multiply.
bool is_integer(const WeightMatrix& w);

// y[n, w.rows] = x · Wᵀ for any weight format.
void matmul(ThreadPool& pool, MatmulInput& input, const WeightMatrix& w, float* y);
// y_i = x · W_iᵀ for up to 4 weights that read the same input (q, k and v; gate and
// up): in one parallel loop where their kernels allow it, else one after another.
void matmul_shared_input(ThreadPool& pool, MatmulInput& input, std::span<const WeightMatrix* const> weights,
                         std::span<float* const> outputs);

// A SwiGLU MLP's down input, silu(x · gateᵀ) ∘ (x · upᵀ): where gate, up and down are packed
// bf16 and the CPU has AVX512-BF16 (bf16_rows_writable), one fused loop writes it
// into `out` in down's bf16-product form alone (out.x() is null: no fp32 copy exists) and
// the call returns true; elsewhere it does nothing and returns false, and the caller
// multiplies gate and up and applies silu_mul itself (the same bits).
bool matmul_swiglu(ThreadPool& pool, MatmulInput& input, const WeightMatrix& gate, const WeightMatrix& up,
                   const WeightMatrix& down, MatmulInput& out);

// y_i = x_i · W_iᵀ, each weight with its own input (an input may serve several weights:
// an expert's gate and up), in one parallel loop where every weight is integer (at most
// kMaxBatchWeights, kernels/matmul_integer.h), else one after another: a MoE decode
// step's experts stream as one run. Each y_i is bitwise what matmul(pool, *x_i, W_i, y_i)
// gives.
// Room for every expert's gate and up of a 64-expert layer and the shared experts'.
inline constexpr size_t kMaxBatchWeights = 160;
void matmul_batch(ThreadPool& pool, std::span<MatmulInput* const> inputs, std::span<const WeightMatrix* const> weights,
                  std::span<float* const> outputs);

// The same for a one-off input (its quantization buffers are per thread and reused).
void matmul(ThreadPool& pool, const float* x, int64_t n, const WeightMatrix& w, float* y);

// The same product on one thread, element by element, in double: the reference the
// tests hold every fast path to. For quantized weights it uses the dequantized values
// and the same activation rounding the kernels apply.
void matmul_reference(const float* x, int64_t n, const WeightMatrix& w, float* y);

// Products of fewer activation rows than this (decode's) are bound by reading the
// weights, more by arithmetic; kernels split their work accordingly.
inline constexpr int64_t kDecodeRows = 16;

// Sizes the calling thread's kernel buffers for weights of up to `max_cols` inputs, so
// later matmuls on this thread allocate nothing (run it on every pool thread), including
// decode-sized ones that a pool thread runs whole on its own.
void reserve_matmul_scratch(int64_t max_cols);

// bf16 weights times activations rounded to bf16 (AVX512-BF16's vdpbf16ps, fp32
// accumulation, twice the float peak; on AVX2 the same exact products as fp32
// multiply-adds), as llama.cpp's BF16 and the reference models' own bf16 arithmetic do;
// off, bf16 weights are widened and multiplied in fp32. CPUs with AVX512-BF16 or AVX2
// change path (bf16_products_available()): the loader then repacks bf16 Linears into
// WeightFormat::kBf16Packed (kernels/matmul_bf16.h), and a dense bf16 matrix is always
// multiplied in fp32. The serving commands turn it on; the numerics tools (ernie logits,
// ernie perplexity) and the golden tests keep fp32.
void set_bf16_products(bool enabled);
bool bf16_products_enabled();

// Bytes of weights the matmuls above have read since the process started: each call adds
// its weights' weight_bytes once (kernels/quantize.h). Decode reads each weight once per
// token, so the growth over a decode run is the bytes per token of `ernie bench`'s roofline.
uint64_t weight_bytes_streamed();

// Wraps an fp32 buffer [rows, cols] (e.g. the router) as a WeightMatrix view.
WeightMatrix f32_matrix_view(const float* data, int64_t rows, int64_t cols);

}  // namespace ernie
