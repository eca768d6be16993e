// Causal attention of one query head over a sequence's cached keys and values.
// Keys and values are reached through per-position row pointers, so a contiguous
// cache and a paged one (blocks anywhere in a pool) look the same to the kernel.
#pragma once

#include <cstdint>

namespace ernie {

// out[head_dim] = Σ_j softmax_j(q · k_j · scale) v_j over j < n_keys, where k_j =
// key_rows[j] + head_offset and v_j = value_rows[j] + head_offset. `scores` has room
// for n_keys floats. Softmax in fp32 with the max subtracted.
void attend_one_head(const float* q, const float* const* key_rows, const float* const* value_rows, int64_t n_keys,
                     int64_t head_offset, int head_dim, float scale, float* scores, float* out);

}  // namespace ernie
