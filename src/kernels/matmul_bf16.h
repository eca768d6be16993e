// bf16 weights multiplied as bf16 products (AVX512-BF16's vdpbf16ps: pairs of bf16
// products summed in fp32; on AVX2, the same exact products as fp32 multiply-adds), on
// weights repacked once at load into the layout that instruction wants: one fp32 lane
// per output row, so a weight vector serves 16 rows (AVX2: two halves of 8) and an
// activation is a broadcast, with no horizontal sums at all.
//
// Layout (WeightFormat::kBf16Packed): the inputs are taken in pairs (cols rounded up to
// even, the extra input zero) and the rows in groups of 16 (rows rounded up to a
// multiple of 16, the extra rows zero). Rows [64p, 64p + 64) form panel p, of G = 4
// groups (the last panel may hold fewer). Panel p starts at element 64p·kp (kp: the
// even column count); inside it, input pair j holds G·32 consecutive bf16: group g's
// row l at g·32 + 2l (input 2j) and g·32 + 2l + 1 (input 2j + 1). A panel is one
// sequential stream, so decode reads each thread's share of the weights front to back.
//
// Every output is one fp32 lane summed over the input pairs in order, whatever the
// batch, the tile or the thread split: a token's result does not depend on its
// neighbours.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "tensor/weight_matrix.h"
#include "util/thread_pool.h"

namespace ernie {

// Rows that share a vdpbf16ps: one fp32 lane each.
constexpr int64_t kBf16GroupRows = 16;
// Groups in a panel (the rows one tile of the kernel produces).
constexpr int64_t kBf16PanelGroups = 4;

// Whether this CPU has a fast path for bf16 products at the active ISA level
// (kernels/cpu_features.h): AVX512-BF16, or AVX2 with FMA.
bool bf16_products_available();
// Whether bf16 weights are multiplied as bf16 products in this process: available and
// set_bf16_products(true) (kernels/matmul.h). The loader packs bf16 Linears when it is.
bool bf16_products_active();

// A dense bf16 matrix in the layout above (owned); others cannot be packed.
bool can_pack_bf16(const WeightMatrix& dense);
WeightMatrix pack_bf16_weight(const WeightMatrix& dense);
// Row r of a packed matrix as its cols bf16 values.
void unpack_bf16_row(const WeightMatrix& packed, int64_t r, uint16_t* out);
// The packed bytes, padding included (what a product reads).
uint64_t packed_bf16_bytes(int64_t rows, int64_t cols);

// The activations of bf16 products in the form the kernel reads: every value rounded to
// bf16 (nearest even), rows of even length (the padding input zero). With AVX512-BF16
// they are bf16 pairs; on AVX2 the same rounded values kept as floats (each one a
// broadcast load). Rounding is element by element, so a producer that writes the
// activations in pieces on several threads can round each piece while it is still in its
// thread's cache (MatmulInput::round_while_writing): a separate pass reading them all back
// took 3% of a bf16 prefill.
class Bf16Activations {
 public:
  // Sizes the form for n rows of `cols` inputs; its rows are then filled by round().
  void reset(int64_t n, int64_t cols);
  // Elements [c0, c1) of rows [t0, t1) of x (n x cols, row-major), rounded into the form.
  // Disjoint ranges may be rounded on different threads at once.
  void round(const float* x, int64_t t0, int64_t t1, int64_t c0, int64_t c1);
  // All of x, over the pool (one thread for decode's few rows).
  void round_all(ThreadPool& pool, const float* x);
  int64_t n() const { return n_; }
  int64_t cols() const { return cols_; }
  // Token t's row as its kernel takes it: 32-bit input pairs, or (AVX2) floats.
  const uint32_t* pairs(int64_t t) const;
  const float* floats(int64_t t) const;
  // Token t's row of bf16, for a producer that writes this form directly (where
  // bf16_rows_writable()): `stride()` elements apart.
  uint16_t* bf16_row(int64_t t);
  int64_t stride() const { return stride_; }

 private:
  int64_t n_ = 0, cols_ = 0, stride_ = 0;
  std::vector<uint16_t> bf16_;
  std::vector<float> floats_;
};

// ys[i] = x · ws[i]ᵀ for 1 to 4 packed weights that take the same rounded input (q, k and
// v; gate and up), all their work in one parallel loop: vdpbf16ps where the CPU has it,
// fp32 multiply-adds of the same exact products on AVX2, else the same sums (in the same
// order as vdpbf16ps, with fp32 multiply-adds) on any CPU.
void matmul_bf16_packed_group(ThreadPool& pool, const Bf16Activations& x, std::span<const WeightMatrix* const> ws,
                              std::span<float* const> ys);

// Whether the bf16-product form holds bf16 rows, which a producer may write directly
// (AVX512-BF16; on AVX2 it holds floats): matmul_bf16_swiglu runs where it does.
bool bf16_rows_writable();
// A SwiGLU MLP's first half in one parallel loop: out = silu(x · gateᵀ) ∘ (x · upᵀ), rounded
// to bf16 straight into down's input form, for packed gate and up of one shape (out sized
// for x.n() rows of gate.rows inputs). The same bits as the two products, silu_mul and
// rounding, without writing or reading back their fp32 rows.
void matmul_bf16_swiglu(ThreadPool& pool, const Bf16Activations& x, const WeightMatrix& gate, const WeightMatrix& up,
                        Bf16Activations& out);

}  // namespace ernie
