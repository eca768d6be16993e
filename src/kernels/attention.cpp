#include "kernels/attention.h"

#include <algorithm>

#include "kernels/ops.h"
#include "kernels/simd_dispatch.h"

namespace ernie {

ERNIE_CLONE_FOR_ISAS
void attend_one_head(const float* q, const float* const* key_rows, const float* const* value_rows, int64_t n_keys,
                     int64_t head_offset, int head_dim, float scale, float* scores, float* out) {
  for (int64_t j = 0; j < n_keys; ++j) {
    const float* k = key_rows[j] + head_offset;
    float sum = 0.0f;
    for (int d = 0; d < head_dim; ++d) sum += q[d] * k[d];
    scores[j] = sum * scale;
  }
  softmax(scores, n_keys);
  std::fill(out, out + head_dim, 0.0f);
  for (int64_t j = 0; j < n_keys; ++j) {
    const float* v = value_rows[j] + head_offset;
    const float p = scores[j];
    for (int d = 0; d < head_dim; ++d) out[d] += p * v[d];
  }
}

}  // namespace ernie
