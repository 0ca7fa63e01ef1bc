// RoPE, KV-cache append and decode attention against the CPU reference, in
// fp16 and bf16, for sequences whose contexts differ (1 token, 2, lengths not
// a multiple of 128 or 32, the full max_context), each at its own slot: the
// two kernels (EnqueueRopeAppendKv then EnqueueDecodeAttention) and the fused
// one (EnqueueRopeAttention) alike, with multi-head, grouped-query and
// multi-query attention and each RoPE scaling (none, linear, llama3).
// decode_fused_kernels_gpu_test.cc checks that the fused kernel gives the two
// kernels' bits.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "kernels/decode_kernels.h"
#include "kernels/rope.h"
#include "support/decode_reference.h"
#include "support/kernel_harness.h"

namespace baton {
namespace {

using kernel_test::Download;
using kernel_test::ExpectClose;
using kernel_test::ExpectNormWithin;
using kernel_test::ExpectUntouched;
using kernel_test::MakeBatch;
using kernel_test::Poisoned;
using kernel_test::RandomHalf;
using kernel_test::Rng;
using kernel_test::TestBatch;
using kernel_test::ToDouble;
using kernel_test::Upload;

constexpr std::int32_t kAnyPosition = -1;  // drawn from [0, max_context)

struct AttentionShape {
  int heads, kv_heads, head_dim, max_context;
  RopeScalingType scaling;
  std::vector<std::int32_t> positions;  // one live batch position each
};

const std::vector<AttentionShape>& AttentionShapes() {
  static const std::vector<AttentionShape> shapes = {
      // head_dim 64: two thread groups split the context in the value pass.
      {4, 4, 64, 300, RopeScalingType::kNone, {0, 1, 129, 299, kAnyPosition}},
      // head_dim 96 (does not divide the block), longer contexts, four query
      // heads per key/value head.
      {8, 2, 96, 1000, RopeScalingType::kLinear, {517, 0, 999, 31, kAnyPosition, kAnyPosition}},
      // head_dim 128, the largest; multi-query; sequences at slots far apart.
      {3, 1, 128, 2048, RopeScalingType::kLlama3, {2047, 1500, 1}},
      // head_dim 10: even but not a multiple of 8 (4-byte loads); pairs of heads.
      {4, 2, 10, 64, RopeScalingType::kNone, {0, 63, 17}},
  };
  return shapes;
}

class AttentionTest : public kernel_test::DecodeKernelTest,
                      public ::testing::WithParamInterface<std::tuple<std::size_t, DecoderDType>> {
 protected:
  // Runs the shape's batch (its positions live, one more position not) and
  // checks q rotated in place, the appended cache rows, every other cache
  // row unchanged bit for bit, qkv past the live batch unchanged, and the
  // attention output.
  void RunAttentionCase(bool fused);
};

void AttentionTest::RunAttentionCase(bool fused) {
  const AttentionShape& shape = AttentionShapes()[std::get<0>(GetParam())];
  const DecoderDType dtype = std::get<1>(GetParam());
  const int heads = shape.heads, kv_heads = shape.kv_heads, head_dim = shape.head_dim;
  const int max_context = shape.max_context;
  DecoderConfig config;
  config.dtype = dtype;
  config.heads = heads;
  config.kv_heads = kv_heads;
  config.head_dim = head_dim;
  config.max_context = max_context;
  config.rope.theta = 10000.0f;
  config.rope.scaling = shape.scaling;
  config.rope.factor = shape.scaling == RopeScalingType::kLinear ? 4.0f : 8.0f;
  config.rope.original_max_position_embeddings = 512;
  const std::vector<float> inv_freq = RopeInverseFrequencies(config.rope, head_dim);
  const int width = config.attention_width();
  const int kv_width = config.kv_width();
  const int qkv_width = config.qkv_width();
  const int group = config.group_size();
  std::vector<std::int32_t> positions = shape.positions;
  std::uniform_int_distribution<std::int32_t> any(0, max_context - 1);
  for (auto& pos : positions) {
    if (pos == kAnyPosition) pos = any(Rng());
  }
  const std::uint32_t capacity = static_cast<std::uint32_t>(positions.size()) + 1;
  const std::uint32_t active = capacity - 1;  // the last position is not live
  positions.push_back(0);
  const std::uint32_t max_slots = capacity + 3;
  TestBatch batch = MakeBatch(capacity, active, max_slots, positions);
  const std::size_t cache_elements =
      static_cast<std::size_t>(max_slots) * kv_heads * max_context * head_dim;
  const auto keys0 = RandomHalf(cache_elements, dtype, 1.0);
  const auto values0 = RandomHalf(cache_elements, dtype, 1.0);
  const auto qkv0 = RandomHalf(static_cast<std::size_t>(capacity) * qkv_width, dtype, 1.0);
  auto d_keys = Upload(keys0);
  auto d_values = Upload(values0);
  auto d_qkv = Upload(qkv0);
  auto d_rope = Upload(inv_freq);
  auto d_out = Poisoned<std::uint16_t>(static_cast<std::size_t>(capacity) * width);
  const KvCacheLayer cache{d_keys.data(), d_values.data()};
  cudaStream_t stream = stream_.get();
  if (fused) {
    ASSERT_EQ(EnqueueRopeAttention(config, d_rope.data(), d_qkv.data(), cache, batch.view,
                                   d_out.data(), stream),
              cudaSuccess);
  } else {
    ASSERT_EQ(EnqueueRopeAppendKv(config, d_rope.data(), d_qkv.data(), cache, batch.view, stream),
              cudaSuccess);
    ASSERT_EQ(EnqueueDecodeAttention(config, d_qkv.data(), cache, batch.view, d_out.data(), stream),
              cudaSuccess);
  }
  Sync();
  const auto keys = Download(d_keys);
  const auto values = Download(d_values);
  const auto qkv = Download(d_qkv);
  const auto out_bits = Download(d_out);

  auto expected_keys = keys0;
  auto expected_values = values0;
  std::vector<double> q_out, q_ref, k_out, k_ref, att_out, att_ref, att_stored_ref;
  const auto at = [&](const std::vector<std::uint16_t>& v, std::size_t i) {
    return ToDouble(v[i], dtype);
  };
  for (std::uint32_t p = 0; p < active; ++p) {
    const std::uint32_t slot = batch.host_slots[p];
    const int pos = positions[p];
    const std::size_t qkv_base = static_cast<std::size_t>(p) * qkv_width;
    // This token's rotated key and its value, per key/value head, appended once.
    std::vector<std::vector<double>> k_of(kv_heads), v_of(kv_heads);
    for (int kh = 0; kh < kv_heads; ++kh) {
      const std::size_t k_base = qkv_base + width + kh * head_dim;
      const std::size_t v_base = qkv_base + width + kv_width + kh * head_dim;
      k_of[kh].resize(head_dim);
      v_of[kh].resize(head_dim);
      for (int d = 0; d < head_dim; ++d) {
        k_of[kh][d] = at(qkv0, k_base + d);
        v_of[kh][d] = at(qkv0, v_base + d);
      }
      reference::Rope(k_of[kh].data(), head_dim, pos, inv_freq);
      const std::size_t row =
          ((static_cast<std::size_t>(slot) * kv_heads + kh) * max_context + pos) * head_dim;
      for (int d = 0; d < head_dim; ++d) {
        k_ref.push_back(k_of[kh][d]);
        k_out.push_back(at(keys, row + d));
        expected_keys[row + d] = keys[row + d];       // compared by value above
        expected_values[row + d] = qkv0[v_base + d];  // v is copied exactly
      }
    }
    for (int h = 0; h < heads; ++h) {
      const int kh = h / group;
      const std::size_t q_base = qkv_base + h * head_dim;
      std::vector<double> q(head_dim);
      for (int d = 0; d < head_dim; ++d) q[d] = at(qkv0, q_base + d);
      reference::Rope(q.data(), head_dim, pos, inv_freq);
      for (int d = 0; d < head_dim; ++d) {
        q_ref.push_back(q[d]);
        q_out.push_back(at(qkv, q_base + d));
      }
      // The sequence's context: cached rows of its key/value head before
      // pos, then this token.
      const std::size_t first =
          (static_cast<std::size_t>(slot) * kv_heads + kh) * max_context * head_dim;
      std::vector<double> ctx_keys, ctx_values;
      for (int t = 0; t < pos; ++t) {
        for (int d = 0; d < head_dim; ++d) {
          ctx_keys.push_back(at(keys0, first + static_cast<std::size_t>(t) * head_dim + d));
          ctx_values.push_back(at(values0, first + static_cast<std::size_t>(t) * head_dim + d));
        }
      }
      for (int d = 0; d < head_dim; ++d) {
        ctx_keys.push_back(k_of[kh][d]);
        ctx_values.push_back(v_of[kh][d]);
      }
      const auto att = reference::Attention(q, ctx_keys, ctx_values, head_dim);
      // The same attention from the q and k the kernel stored (rounded to
      // the storage type), which is what it attends with.
      std::vector<double> stored_q(head_dim);
      const std::size_t row = first + static_cast<std::size_t>(pos) * head_dim;
      for (int d = 0; d < head_dim; ++d) {
        stored_q[d] = at(qkv, q_base + d);
        ctx_keys[static_cast<std::size_t>(pos) * head_dim + d] = at(keys, row + d);
      }
      const auto att_stored = reference::Attention(stored_q, ctx_keys, ctx_values, head_dim);
      for (int d = 0; d < head_dim; ++d) {
        att_ref.push_back(att[d]);
        att_stored_ref.push_back(att_stored[d]);
        att_out.push_back(at(out_bits, static_cast<std::size_t>(p) * width + h * head_dim + d));
      }
    }
  }
  // One row per (position, head) in every comparison below.
  const std::string kernel = fused ? "_fused" : "";
  ExpectClose("rope_q" + kernel, dtype, q_out, q_ref, head_dim);
  ExpectClose("rope_k_cache" + kernel, dtype, k_out, k_ref, head_dim);
  // Attention by the norm against the whole chain from the unrounded RoPE
  // (as before), and element by element against the stored q and k.
  ExpectNormWithin("attention" + kernel, dtype, att_out, att_ref);
  ExpectClose("attention_of_stored_qk" + kernel, dtype, att_out, att_stored_ref, head_dim);
  EXPECT_TRUE(keys == expected_keys) << "a key cache row other than the appended ones changed";
  EXPECT_TRUE(values == expected_values) << "value cache differs from old rows + appended v";
  // q is rotated in place; k and v stay as they were (the cache holds k's
  // rotation), and nothing past the live batch changes.
  for (std::uint32_t p = 0; p < active; ++p) {
    for (int i = width; i < qkv_width; ++i) {
      const std::size_t at_i = static_cast<std::size_t>(p) * qkv_width + i;
      ASSERT_EQ(qkv[at_i], qkv0[at_i]) << "k or v of position " << p << " changed in qkv";
    }
  }
  for (std::size_t i = active * static_cast<std::size_t>(qkv_width); i < qkv.size(); ++i) {
    ASSERT_EQ(qkv[i], qkv0[i]) << "qkv past the live batch changed";
  }
  ExpectUntouched(out_bits, width, active, capacity);
}

TEST_P(AttentionTest, RopeAppendKvThenAttentionMatchReference) { RunAttentionCase(false); }

// EnqueueRopeAttention (RoPE and KV append fused into attention) against the
// same references and the same cache checks.
TEST_P(AttentionTest, RopeAttentionMatchesReference) { RunAttentionCase(true); }

std::string AttentionName(const ::testing::TestParamInfo<AttentionTest::ParamType>& info) {
  const AttentionShape& shape = AttentionShapes()[std::get<0>(info.param)];
  return "h" + std::to_string(shape.heads) + "kv" + std::to_string(shape.kv_heads) + "x" +
         std::to_string(shape.head_dim) + "_ctx" + std::to_string(shape.max_context) + "_" +
         kernel_test::Name(std::get<1>(info.param));
}

INSTANTIATE_TEST_SUITE_P(, AttentionTest,
                         ::testing::Combine(::testing::Range<std::size_t>(0,
                                                                          AttentionShapes().size()),
                                            ::testing::ValuesIn(kernel_test::kDTypes)),
                         AttentionName);

}  // namespace
}  // namespace baton
