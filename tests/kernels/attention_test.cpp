#include "kernels/attention.h"

#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "util/random.h"

namespace ernie {
namespace {

TEST(AttentionTest, MatchesANaiveDoubleComputation) {
  const int head_dim = 8, kv_heads = 2, n_keys = 37;
  const int64_t width = kv_heads * head_dim;
  Random random(3);
  std::vector<float> keys(static_cast<size_t>(n_keys * width)), values(keys.size()), q(static_cast<size_t>(head_dim));
  for (float& v : keys) v = static_cast<float>(random.normal());
  for (float& v : values) v = static_cast<float>(random.normal());
  for (float& v : q) v = static_cast<float>(random.normal());
  std::vector<const float*> key_rows, value_rows;
  for (int j = 0; j < n_keys; ++j) {
    key_rows.push_back(keys.data() + j * width);
    value_rows.push_back(values.data() + j * width);
  }
  const float scale = 1.0f / std::sqrt(8.0f);
  std::vector<float> scores(n_keys), out(head_dim);
  attend_one_head(q.data(), key_rows.data(), value_rows.data(), n_keys, head_dim, head_dim, scale, scores.data(),
                  out.data());  // kv head 1

  std::vector<double> weights(n_keys);
  double total = 0;
  for (int j = 0; j < n_keys; ++j) {
    double dot = 0;
    for (int d = 0; d < head_dim; ++d) dot += double(q[d]) * keys[j * width + head_dim + d];
    weights[j] = std::exp(dot * scale);
    total += weights[j];
  }
  for (int d = 0; d < head_dim; ++d) {
    double expected = 0;
    for (int j = 0; j < n_keys; ++j) expected += weights[j] / total * values[j * width + head_dim + d];
    EXPECT_NEAR(out[d], expected, 1e-5);
  }
}

TEST(AttentionTest, SingleKeyReturnsItsValue) {
  const float q[] = {1, 2}, k[] = {3, 4}, v[] = {-1, 5};
  const float* key_rows[] = {k};
  const float* value_rows[] = {v};
  float scores[1], out[2];
  attend_one_head(q, key_rows, value_rows, 1, 0, 2, 1.0f, scores, out);
  EXPECT_EQ(out[0], -1.0f);
  EXPECT_EQ(out[1], 5.0f);
}

}  // namespace
}  // namespace ernie
