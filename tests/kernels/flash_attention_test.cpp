#include "kernels/flash_attention.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <numeric>
#include <tuple>
#include <vector>

#include "kernels/attention.h"
#include "kernels/cpu_features.h"
#include "kernels/matmul.h"
#include "tensor/dtype.h"
#include "util/error.h"
#include "util/random.h"

namespace ernie {
namespace {

// A sequence's cache of `positions` rows in `storage`, each row in its own slot of one
// pool, slots shuffled so consecutive positions are never adjacent in memory (as in a
// paged cache). `keys`/`values` hold what the rows represent, read back with load_kv_row.
struct Cache {
  int kv_heads, head_dim;
  KvStorage storage;
  std::vector<uint8_t> pool;
  std::vector<const void*> key_rows, value_rows;
  std::vector<float> keys, values;  // [positions][kv_heads * head_dim]
};

Cache make_cache(int64_t positions, int kv_heads, int head_dim, KvStorage storage, Random& random) {
  Cache cache{kv_heads, head_dim, storage, {}, {}, {}, {}, {}};
  const size_t width = static_cast<size_t>(kv_heads) * head_dim;
  // A slot a few bytes bigger than the row, so rows start at varied (4-byte) alignments.
  const size_t slot = (kv_row_bytes(storage, kv_heads, head_dim) + 3) / 4 * 4 + 4;
  cache.pool.resize(slot * static_cast<size_t>(2 * positions));
  std::vector<size_t> order(static_cast<size_t>(2 * positions));
  std::iota(order.begin(), order.end(), size_t{0});
  for (size_t i = order.size(); i > 1; --i) std::swap(order[i - 1], order[random.next() % i]);
  cache.keys.resize(width * static_cast<size_t>(positions));
  cache.values.resize(cache.keys.size());
  std::vector<float> row(width);
  for (int64_t p = 0; p < positions; ++p) {
    for (int kind = 0; kind < 2; ++kind) {
      for (float& x : row) x = static_cast<float>(random.normal());
      uint8_t* at = cache.pool.data() + slot * order[static_cast<size_t>(2 * p + kind)];
      store_kv_row(row.data(), kv_heads, head_dim, storage, at);
      float* decoded = (kind == 0 ? cache.keys : cache.values).data() + width * static_cast<size_t>(p);
      load_kv_row(at, kv_heads, head_dim, storage, decoded);
      (kind == 0 ? cache.key_rows : cache.value_rows).push_back(at);
    }
  }
  return cache;
}

struct Reference {
  std::vector<double> out;  // [token][heads * head_dim], double
  double score_magnitude;   // max over pairs of scale · Σ_d |q_d k_d|
};

// Plain double-precision causal attention on the decoded rows, all heads; with all_keys
// > 0, every query sees that many keys instead (bidirectional).
Reference reference_attention(const AttentionShape& shape, const Cache& cache, const std::vector<float>& q,
                              int64_t q_stride, int64_t first_position, int num_queries, int64_t all_keys = 0) {
  const int hd = shape.head_dim, group = shape.heads / shape.kv_heads;
  const size_t width = static_cast<size_t>(shape.kv_heads) * hd;
  Reference ref{std::vector<double>(static_cast<size_t>(num_queries) * shape.heads * hd), 0.0};
  for (int i = 0; i < num_queries; ++i) {
    const int64_t n_keys = all_keys > 0 ? all_keys : first_position + i + 1;
    for (int h = 0; h < shape.heads; ++h) {
      const float* qh = q.data() + i * q_stride + h * hd;
      const size_t kv_offset = static_cast<size_t>(h / group) * hd;
      std::vector<double> weights(static_cast<size_t>(n_keys));
      double max_score = -INFINITY;
      for (int64_t j = 0; j < n_keys; ++j) {
        const float* k = cache.keys.data() + width * j + kv_offset;
        double dot = 0, magnitude = 0;
        for (int d = 0; d < hd; ++d) {
          dot += double(qh[d]) * k[d];
          magnitude += std::fabs(double(qh[d]) * k[d]);
        }
        weights[j] = dot * shape.scale;
        max_score = std::max(max_score, weights[j]);
        ref.score_magnitude = std::max(ref.score_magnitude, magnitude * shape.scale);
      }
      double total = 0;
      for (double& w : weights) total += (w = std::exp(w - max_score));
      double* o = ref.out.data() + (static_cast<size_t>(i) * shape.heads + h) * hd;
      for (int64_t j = 0; j < n_keys; ++j) {
        const float* v = cache.values.data() + width * j + kv_offset;
        for (int d = 0; d < hd; ++d) o[d] += weights[j] / total * v[d];
      }
    }
  }
  return ref;
}

struct Case {
  int heads, kv_heads, head_dim;
  KvStorage storage;
  int num_queries;
  int64_t first_position;
  float q_multiplier = 1.0f;
};

// Runs the kernel for every kv head of `c` and checks it against the double reference and,
// for fp32 rows, against attend_one_head.
//
// Tolerance: max|v| · (1e-5 + 2·2^-24·S), S = max scale·Σ|q_d k_d| over the pairs. The
// first term is the fixed accuracy asked of the kernel; the second is the rounding of fp32
// scores (relative error ~ u per term), which moves softmax weights by about the absolute
// score error and so matters only when scores are large (the ×50 stress cases).
// Where the call multiplies in bf16 (attention_uses_bf16_products), the reference takes
// the queries rounded to bf16 as the kernel documents, and the tolerance adds 2^-8 · max|v|:
// each probability rounded to bf16 is off by at most 2^-8 of itself, so the weighted sum
// of values moves by at most that share of max|v|.
void check_case(const Case& c, AttentionScratch& scratch, uint64_t seed) {
  SCOPED_TRACE(::testing::Message() << "heads " << c.heads << " kv_heads " << c.kv_heads << " head_dim " << c.head_dim
                                  << (c.storage == KvStorage::kInt8 ? " int8" : " f32") << " queries "
                                  << c.num_queries << " first " << c.first_position << " q x" << c.q_multiplier);
  Random random(seed);
  const int hd = c.head_dim;
  const AttentionShape shape{c.heads, c.kv_heads, hd, static_cast<float>(1.0 / std::sqrt(double(hd))), c.storage};
  const Cache cache = make_cache(c.first_position + c.num_queries, c.kv_heads, hd, c.storage, random);
  // Strides with a few floats of slack, so the kernel must honour them.
  const int64_t q_stride = int64_t{c.heads} * hd + 3, out_stride = int64_t{c.heads} * hd + 5;
  std::vector<float> q(static_cast<size_t>(c.num_queries * q_stride));
  for (float& x : q) x = static_cast<float>(random.normal()) * c.q_multiplier;
  const float sentinel = 12345.0f;
  std::vector<float> out(static_cast<size_t>(c.num_queries * out_stride), sentinel);

  const int group = c.heads / c.kv_heads;
  for (int kv = 0; kv < c.kv_heads; ++kv) {
    causal_attention_group(shape, cache.key_rows.data(), cache.value_rows.data(), kv, q.data(), q_stride,
                           c.first_position, c.num_queries, out.data(), out_stride, scratch);
    // Only this group's heads are written so far.
    for (int i = 0; i < c.num_queries; ++i)
      for (int64_t x = (int64_t{kv} + 1) * group * hd; x < out_stride; ++x)
        ASSERT_EQ(out[static_cast<size_t>(i * out_stride + x)], sentinel) << "token " << i << " float " << x;
  }

  const bool bf16_products = attention_uses_bf16_products(shape);
  std::vector<float> reference_q = q;
  if (bf16_products)
    for (float& x : reference_q) x = bf16_to_f32(f32_to_bf16(x));
  const Reference ref = reference_attention(shape, cache, reference_q, q_stride, c.first_position, c.num_queries);
  float max_v = 0;
  for (float v : cache.values) max_v = std::max(max_v, std::fabs(v));
  const double tolerance = max_v * ((bf16_products ? 0x1p-8 : 0.0) + 1e-5 + 2.0 * 0x1p-24 * ref.score_magnitude);

  std::vector<const float*> key_f32, value_f32;
  const size_t width = static_cast<size_t>(c.kv_heads) * hd;
  for (int64_t p = 0; p < c.first_position + c.num_queries; ++p) {
    key_f32.push_back(c.storage == KvStorage::kF32 ? static_cast<const float*>(cache.key_rows[p])
                                                   : cache.keys.data() + width * p);
    value_f32.push_back(c.storage == KvStorage::kF32 ? static_cast<const float*>(cache.value_rows[p])
                                                     : cache.values.data() + width * p);
  }
  std::vector<float> scores(static_cast<size_t>(c.first_position + c.num_queries)), simple(static_cast<size_t>(hd));
  double worst = 0;
  for (int i = 0; i < c.num_queries; ++i) {
    for (int h = 0; h < c.heads; ++h) {
      const float* got = out.data() + i * out_stride + h * hd;
      const double* want = ref.out.data() + (static_cast<size_t>(i) * c.heads + h) * hd;
      attend_one_head(q.data() + i * q_stride + h * hd, key_f32.data(), value_f32.data(), c.first_position + i + 1,
                      static_cast<int64_t>(h / group) * hd, hd, shape.scale, scores.data(), simple.data());
      for (int d = 0; d < hd; ++d) {
        worst = std::max(worst, std::fabs(got[d] - want[d]));
        ASSERT_NEAR(got[d], want[d], tolerance) << "token " << i << " head " << h << " d " << d;
        if (bf16_products) continue;  // the oracle takes the queries unrounded
        ASSERT_NEAR(simple[d], want[d], tolerance) << "oracle, token " << i << " head " << h << " d " << d;
        ASSERT_NEAR(got[d], simple[d], 2 * tolerance) << "token " << i << " head " << h << " d " << d;
      }
    }
    for (int64_t x = int64_t{c.heads} * hd; x < out_stride; ++x)
      ASSERT_EQ(out[static_cast<size_t>(i * out_stride + x)], sentinel);
  }
  ::testing::Test::RecordProperty("worst_error", std::to_string(worst));
}

// (head_dim, group, storage): every token count and start position below, all kv heads.
class FlashAttentionTest : public ::testing::TestWithParam<std::tuple<int, int, KvStorage>> {};

TEST_P(FlashAttentionTest, MatchesDoubleReferenceAndSimpleKernel) {
  const auto [head_dim, group, storage] = GetParam();
  AttentionScratch scratch;  // shared by all cases: it must cope with any earlier size
  uint64_t seed = 100;
  for (int num_queries : {1, 3, 17, 64, 130})
    for (int64_t first : {0, 5, 100, 1000}) {
      check_case({2 * group, 2, head_dim, storage, num_queries, first}, scratch, ++seed);
      if (HasFatalFailure()) return;
    }
}

INSTANTIATE_TEST_SUITE_P(Shapes, FlashAttentionTest,
                         ::testing::Combine(::testing::Values(16, 64, 128, 24), ::testing::Values(1, 2, 8),
                                          ::testing::Values(KvStorage::kF32, KvStorage::kInt8, KvStorage::kBF16)));

TEST(FlashAttention, LargeScoresStayStable) {
  AttentionScratch scratch;
  for (KvStorage storage : {KvStorage::kF32, KvStorage::kInt8, KvStorage::kBF16})
    for (int num_queries : {1, 17, 130}) {
      check_case({16, 2, 128, storage, num_queries, 300, 50.0f}, scratch, 7);
      check_case({4, 4, 24, storage, num_queries, 60, 50.0f}, scratch, 8);
    }
}

TEST(FlashAttention, AnyHeadDim) {
  AttentionScratch scratch;
  for (int head_dim : {1, 2, 3, 5, 8, 20, 33, 40, 130})
    for (KvStorage storage : {KvStorage::kF32, KvStorage::kInt8, KvStorage::kBF16}) {
      check_case({6, 2, head_dim, storage, 1, 70}, scratch, 11);
      check_case({6, 2, head_dim, storage, 29, 3}, scratch, 12);
    }
}

TEST(FlashAttention, ModelShapes) {
  AttentionScratch scratch;
  for (KvStorage storage : {KvStorage::kF32, KvStorage::kInt8, KvStorage::kBF16}) {
    check_case({16, 2, 128, storage, 1, 2500}, scratch, 21);  // 0.3B decode
    check_case({20, 4, 128, storage, 1, 777}, scratch, 22);   // 21B-A3B decode (group 5)
    check_case({20, 4, 128, storage, 45, 64}, scratch, 23);
    check_case({16, 2, 128, storage, 200, 0}, scratch, 24);   // prefill chunk
  }
}

// The vision transformer's attention: every query sees every key of its image, fewer or
// more keys than queries, fp32 rows, any head size (ERNIE-VL's ViT has 80).
TEST(FlashAttention, BidirectionalSeesEveryKey) {
  AttentionScratch scratch;
  Random random(31);
  for (const auto& [heads, head_dim, num_keys, num_queries] :
       std::vector<std::tuple<int, int, int64_t, int>>{{4, 16, 24, 24}, {16, 80, 300, 64}, {2, 20, 7, 70}, {3, 33, 130, 1}}) {
    SCOPED_TRACE(::testing::Message() << heads << " heads of " << head_dim << ", " << num_keys << " keys, "
                                    << num_queries << " queries");
    const AttentionShape shape{heads, heads, head_dim, static_cast<float>(1.0 / std::sqrt(double(head_dim))),
                               KvStorage::kF32};
    const Cache cache = make_cache(num_keys, heads, head_dim, KvStorage::kF32, random);
    const int64_t stride = int64_t{heads} * head_dim;
    std::vector<float> q(static_cast<size_t>(num_queries * stride)), out(q.size());
    for (float& x : q) x = static_cast<float>(random.normal());
    for (int head = 0; head < heads; ++head)
      bidirectional_attention_group(shape, cache.key_rows.data(), cache.value_rows.data(), head, q.data(), stride,
                                    num_keys, num_queries, out.data(), stride, scratch);
    const Reference ref = reference_attention(shape, cache, q, stride, 0, num_queries, num_keys);
    float max_v = 0;
    for (float v : cache.values) max_v = std::max(max_v, std::fabs(v));
    const double tolerance = max_v * (1e-5 + 2.0 * 0x1p-24 * ref.score_magnitude);
    for (size_t i = 0; i < out.size(); ++i) ASSERT_NEAR(out[i], ref.out[i], tolerance) << "float " << i;
  }
}

// bf16 products on for one test, as `ernie serve` switches them on.
struct Bf16ProductsOn {
  Bf16ProductsOn() { set_bf16_products(true); }
  ~Bf16ProductsOn() { set_bf16_products(false); }
};
bool cpu_has_bf16_products() { return active_isa_level() == IsaLevel::kAvx512 && cpu_features().avx512_bf16; }

// bf16 products switched on, as `ernie serve` does: bf16 rows with head_dim in whole 32s
// multiply in bf16 (where the CPU has AVX512-BF16), decode-sized calls (up to 8 rows) and
// prefill tiles alike; every other call keeps fp32, and each is checked against its
// documented numerics.
TEST(FlashAttention, Bf16ProductsMatchTheRoundedQueryReference) {
  const Bf16ProductsOn on;
  const bool cpu_has_them = cpu_has_bf16_products();
  const AttentionShape prefill{16, 2, 128, 0.088f, KvStorage::kBF16};
  EXPECT_EQ(attention_uses_bf16_products(prefill), cpu_has_them);
  EXPECT_FALSE(attention_uses_bf16_products({16, 2, 128, 0.088f, KvStorage::kF32}));
  EXPECT_FALSE(attention_uses_bf16_products({16, 2, 80, 0.1f, KvStorage::kBF16}));
  if (!cpu_has_them) std::printf("note: no AVX512-BF16 here, so every call below runs the fp32 kernels\n");

  AttentionScratch scratch;
  uint64_t seed = 500;
  for (int head_dim : {32, 64, 128, 96, 24})
    for (int group : {1, 2, 8})
      for (int num_queries : {1, 3, 17, 64, 130})
        for (int64_t first : {0, 5, 100, 1000}) {
          check_case({2 * group, 2, head_dim, KvStorage::kBF16, num_queries, first}, scratch, ++seed);
          if (HasFatalFailure()) return;
        }
  for (int num_queries : {17, 130}) {
    check_case({16, 2, 128, KvStorage::kBF16, num_queries, 300, 50.0f}, scratch, 7);
    check_case({16, 2, 128, KvStorage::kF32, num_queries, 300}, scratch, 9);
    check_case({16, 2, 128, KvStorage::kInt8, num_queries, 300}, scratch, 10);
  }
  check_case({20, 4, 128, KvStorage::kBF16, 45, 64}, scratch, 23);  // 21B-A3B prefill (group 5)
  check_case({16, 2, 128, KvStorage::kBF16, 200, 0}, scratch, 24);  // 0.3B prefill chunk
}

// With bf16 products a position's output is the same bits whether it is decoded alone,
// prefilled in one chunk or in a chunk that starts elsewhere: every row is summed in the
// same order in every tile, and the probabilities' rounding to bf16 would otherwise turn
// last-bit differences into 2^-8 ones.
TEST(FlashAttention, Bf16ProductsGiveARowTheSameBitsInEveryTile) {
  if (!cpu_has_bf16_products())
    GTEST_SKIP() << "no AVX512-BF16 here: the fp32 kernels run, which do not promise this";
  const Bf16ProductsOn on;
  AttentionScratch scratch;
  Random random(77);
  for (const auto& [heads, kv_heads, head_dim] : std::vector<std::tuple<int, int, int>>{{8, 2, 64}, {16, 2, 128}, {20, 4, 128}}) {
    SCOPED_TRACE(::testing::Message() << heads << " heads, " << kv_heads << " kv heads, head_dim " << head_dim);
    constexpr int kTokens = 150;
    const AttentionShape shape{heads, kv_heads, head_dim, static_cast<float>(1.0 / std::sqrt(double(head_dim))),
                               KvStorage::kBF16};
    ASSERT_TRUE(attention_uses_bf16_products(shape));
    const Cache cache = make_cache(kTokens, kv_heads, head_dim, KvStorage::kBF16, random);
    const int64_t stride = int64_t{heads} * head_dim;
    std::vector<float> q(static_cast<size_t>(kTokens * stride));
    for (float& x : q) x = static_cast<float>(random.normal());
    const auto run = [&](int64_t first, int count, float* out) {
      for (int kv = 0; kv < kv_heads; ++kv)
        causal_attention_group(shape, cache.key_rows.data(), cache.value_rows.data(), kv, q.data() + first * stride,
                               stride, first, count, out, stride, scratch);
    };
    std::vector<float> whole(q.size()), chunked(q.size()), alone(static_cast<size_t>(stride));
    run(0, kTokens, whole.data());
    run(0, 37, chunked.data());  // chunks of 37, 1, 2 and the rest
    run(37, 1, chunked.data() + 37 * stride);
    run(38, 2, chunked.data() + 38 * stride);
    run(40, kTokens - 40, chunked.data() + 40 * stride);
    ASSERT_EQ(0, std::memcmp(whole.data(), chunked.data(), whole.size() * sizeof(float)));
    for (int64_t t : {0, 1, 63, 64, 65, 100, 149}) {
      run(t, 1, alone.data());
      ASSERT_EQ(0, std::memcmp(alone.data(), whole.data() + t * stride, alone.size() * sizeof(float))) << "position " << t;
    }
  }
}

// With bf16 output the kernel writes what the fp32 output rounds to, bit for bit (the
// o projection's input, written directly), leaving other heads' columns alone; it
// refuses where it would not multiply in bf16.
TEST(FlashAttention, Bf16OutputIsTheRoundedFp32Output) {
  AttentionScratch scratch;
  Random random(78);
  const AttentionShape fp32_cache{16, 2, 128, 0.088f, KvStorage::kF32};
  uint16_t unused[16 * 128];
  EXPECT_THROW(causal_attention_group(fp32_cache, nullptr, nullptr, 0, nullptr, 16 * 128, 0, 1, unused, 16 * 128, scratch),
               Error);
  if (!cpu_has_bf16_products())
    GTEST_SKIP() << "no AVX512-BF16 here: bf16 output is refused (above)";
  const Bf16ProductsOn on;
  for (const auto& [heads, kv_heads, head_dim] : std::vector<std::tuple<int, int, int>>{{16, 2, 128}, {20, 4, 64}}) {
    SCOPED_TRACE(::testing::Message() << heads << " heads, " << kv_heads << " kv heads, head_dim " << head_dim);
    constexpr int kTokens = 170;
    const AttentionShape shape{heads, kv_heads, head_dim, static_cast<float>(1.0 / std::sqrt(double(head_dim))),
                               KvStorage::kBF16};
    const Cache cache = make_cache(kTokens, kv_heads, head_dim, KvStorage::kBF16, random);
    const int64_t stride = int64_t{heads} * head_dim;
    std::vector<float> q(static_cast<size_t>(kTokens * stride)), out(q.size());
    for (float& x : q) x = static_cast<float>(random.normal());
    std::vector<uint16_t> rounded(q.size(), 0xbeef);
    for (int kv = 0; kv < kv_heads; ++kv) {
      // Tokens 0..99 from position 0, then 100..169 as a second chunk.
      for (const auto& [first, count] : {std::pair<int64_t, int>{0, 100}, {100, kTokens - 100}}) {
        causal_attention_group(shape, cache.key_rows.data(), cache.value_rows.data(), kv, q.data() + first * stride,
                               stride, first, count, out.data() + first * stride, stride, scratch);
        causal_attention_group(shape, cache.key_rows.data(), cache.value_rows.data(), kv, q.data() + first * stride,
                               stride, first, count, rounded.data() + first * stride, stride, scratch);
      }
      const int64_t group_width = int64_t{heads / kv_heads} * head_dim;
      for (int64_t t = 0; t < kTokens; ++t)
        for (int64_t c = 0; c < stride; ++c) {
          const bool written = c / group_width <= kv;  // heads of kv heads done so far
          const size_t i = static_cast<size_t>(t * stride + c);
          ASSERT_EQ(rounded[i], written ? f32_to_bf16(out[i]) : uint16_t{0xbeef}) << "token " << t << " column " << c;
        }
    }
  }
}

TEST(FlashAttention, ZeroQueriesWritesNothing) {
  AttentionScratch scratch;
  const AttentionShape shape{2, 1, 16, 0.25f, KvStorage::kF32};
  float out[32];
  std::fill(std::begin(out), std::end(out), 1.0f);
  causal_attention_group(shape, nullptr, nullptr, 0, nullptr, 32, 0, 0, out, 32, scratch);
  for (float x : out) EXPECT_EQ(x, 1.0f);
}

TEST(KvRow, Int8RoundTripIsWithinHalfAStep) {
  Random random(5);
  for (int head_dim : {1, 7, 16, 128}) {
    const int kv_heads = 3;
    std::vector<float> values(static_cast<size_t>(kv_heads * head_dim)), decoded(values.size());
    for (float& x : values) x = static_cast<float>(random.normal() * 3.0);
    std::fill(values.begin(), values.begin() + head_dim, 0.0f);  // an all-zero head: scale 0
    values[values.size() - 1] = -40.0f;                           // max|x| taken by a negative value
    std::vector<uint8_t> row(kv_row_bytes(KvStorage::kInt8, kv_heads, head_dim) + 1);
    store_kv_row(values.data(), kv_heads, head_dim, KvStorage::kInt8, row.data() + 1);  // unaligned row
    load_kv_row(row.data() + 1, kv_heads, head_dim, KvStorage::kInt8, decoded.data());
    for (int h = 0; h < kv_heads; ++h) {
      float max_abs = 0;
      for (int d = 0; d < head_dim; ++d) max_abs = std::max(max_abs, std::fabs(values[h * head_dim + d]));
      const float half_step = max_abs / 127.0f / 2.0f;
      for (int d = 0; d < head_dim; ++d) {
        const size_t i = static_cast<size_t>(h * head_dim + d);
        EXPECT_LE(std::fabs(decoded[i] - values[i]), half_step * (1 + 1e-5f)) << "head " << h << " d " << d;
      }
    }
  }
}

TEST(KvRow, SizesAndFp32RoundTrip) {
  EXPECT_EQ(kv_row_bytes(KvStorage::kF32, 2, 128), 1024u);
  EXPECT_EQ(kv_row_bytes(KvStorage::kInt8, 2, 128), 256u + 8u);
  EXPECT_EQ(kv_row_bytes(KvStorage::kInt8, 3, 5), 16u + 12u);  // 15 codes padded to 16
  const float values[] = {1.5f, -2.25f, 3.0f};
  float row[3], back[3];
  store_kv_row(values, 1, 3, KvStorage::kF32, row);
  load_kv_row(row, 1, 3, KvStorage::kF32, back);
  for (int i = 0; i < 3; ++i) EXPECT_EQ(back[i], values[i]);
}

TEST(KvRow, Bf16RoundsToNearestEven) {
  EXPECT_EQ(kv_row_bytes(KvStorage::kBF16, 2, 128), 512u);
  // 1 + 2^-8 lies halfway between two bf16 values (1 and 1 + 2^-7): to the even one, 1;
  // 1 + 3·2^-8 halfway between 1 + 2^-7 and 1 + 2^-6: to 1 + 2^-6. Exact values stay.
  const float values[] = {1.0f + 0x1p-8f, 1.0f + 3 * 0x1p-8f, -2.5f, 0.0f};
  uint8_t row[sizeof(values) / 2 + 1];
  float back[4];
  store_kv_row(values, 1, 4, KvStorage::kBF16, row + 1);  // unaligned row
  load_kv_row(row + 1, 1, 4, KvStorage::kBF16, back);
  EXPECT_EQ(back[0], 1.0f);
  EXPECT_EQ(back[1], 1.0f + 0x1p-6f);
  EXPECT_EQ(back[2], -2.5f);
  EXPECT_EQ(back[3], 0.0f);
}

}  // namespace
}  // namespace ernie
