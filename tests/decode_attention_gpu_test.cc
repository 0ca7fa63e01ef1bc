// RoPE, KV-cache append and decode attention against the CPU reference, in
// fp16 and bf16, for sequences whose contexts differ (1 token, 2, lengths not
// a multiple of 128 or 32, the full max_context), each at its own slot: the
// two kernels (EnqueueRopeAppendKv then EnqueueDecodeAttention) and the fused
// one (EnqueueRopeAttention) alike. decode_fused_kernels_gpu_test.cc checks
// that the fused kernel gives the two kernels' bits.
#include <gtest/gtest.h>

#include <cstdint>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "kernels/decode_kernels.h"
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
  int heads, head_dim, max_context;
  std::vector<std::int32_t> positions;  // one live batch position each
};

const std::vector<AttentionShape>& AttentionShapes() {
  static const std::vector<AttentionShape> shapes = {
      // head_dim 64: two thread groups split the context in the value pass.
      {4, 64, 300, {0, 1, 129, 299, kAnyPosition}},
      // head_dim 96 (does not divide the block), longer contexts.
      {2, 96, 1000, {517, 0, 999, 31, kAnyPosition, kAnyPosition}},
      // head_dim 128, the largest; sequences at slots far apart.
      {3, 128, 2048, {2047, 1500, 1}},
      // head_dim 10: even but not a multiple of 8 (4-byte loads).
      {4, 10, 64, {0, 63, 17}},
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
  const int heads = shape.heads, head_dim = shape.head_dim, max_context = shape.max_context;
  DecoderConfig config;
  config.dtype = dtype;
  config.heads = heads;
  config.head_dim = head_dim;
  config.max_context = max_context;
  config.rope_theta = 10000.0f;
  const int width = config.attention_width();
  const int qkv_width = config.qkv_width();
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
      static_cast<std::size_t>(max_slots) * heads * max_context * head_dim;
  const auto keys0 = RandomHalf(cache_elements, dtype, 1.0);
  const auto values0 = RandomHalf(cache_elements, dtype, 1.0);
  const auto qkv0 = RandomHalf(static_cast<std::size_t>(capacity) * qkv_width, dtype, 1.0);
  auto d_keys = Upload(keys0);
  auto d_values = Upload(values0);
  auto d_qkv = Upload(qkv0);
  auto d_out = Poisoned<std::uint16_t>(static_cast<std::size_t>(capacity) * width);
  const KvCacheLayer cache{d_keys.data(), d_values.data()};
  cudaStream_t stream = stream_.get();
  if (fused) {
    ASSERT_EQ(EnqueueRopeAttention(config, d_qkv.data(), cache, batch.view, d_out.data(), stream),
              cudaSuccess);
  } else {
    ASSERT_EQ(EnqueueRopeAppendKv(config, d_qkv.data(), cache, batch.view, stream), cudaSuccess);
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
    for (int h = 0; h < heads; ++h) {
      const std::size_t q_base = static_cast<std::size_t>(p) * qkv_width + h * head_dim;
      std::vector<double> q(head_dim), k(head_dim);
      for (int d = 0; d < head_dim; ++d) {
        q[d] = at(qkv0, q_base + d);
        k[d] = at(qkv0, q_base + width + d);
      }
      reference::Rope(q.data(), head_dim, pos, config.rope_theta);
      reference::Rope(k.data(), head_dim, pos, config.rope_theta);
      const std::size_t row =
          ((static_cast<std::size_t>(slot) * heads + h) * max_context + pos) * head_dim;
      for (int d = 0; d < head_dim; ++d) {
        q_ref.push_back(q[d]);
        q_out.push_back(at(qkv, q_base + d));
        k_ref.push_back(k[d]);
        k_out.push_back(at(keys, row + d));
        expected_keys[row + d] = keys[row + d];                   // compared by value above
        expected_values[row + d] = qkv0[q_base + 2 * width + d];  // v is copied exactly
      }
      // The sequence's context: cached rows before pos, then this token.
      const std::size_t first = row - static_cast<std::size_t>(pos) * head_dim;
      std::vector<double> ctx_keys, ctx_values;
      for (int t = 0; t < pos; ++t) {
        for (int d = 0; d < head_dim; ++d) {
          ctx_keys.push_back(at(keys0, first + static_cast<std::size_t>(t) * head_dim + d));
          ctx_values.push_back(at(values0, first + static_cast<std::size_t>(t) * head_dim + d));
        }
      }
      for (int d = 0; d < head_dim; ++d) {
        ctx_keys.push_back(k[d]);
        ctx_values.push_back(at(qkv0, q_base + 2 * width + d));
      }
      const auto att = reference::Attention(q, ctx_keys, ctx_values, head_dim);
      // The same attention from the q and k the kernel stored (rounded to
      // the storage type), which is what it attends with.
      std::vector<double> stored_q(head_dim);
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
  return "h" + std::to_string(shape.heads) + "x" + std::to_string(shape.head_dim) + "_ctx" +
         std::to_string(shape.max_context) + "_" + kernel_test::Name(std::get<1>(info.param));
}

INSTANTIATE_TEST_SUITE_P(, AttentionTest,
                         ::testing::Combine(::testing::Range<std::size_t>(0,
                                                                          AttentionShapes().size()),
                                            ::testing::ValuesIn(kernel_test::kDTypes)),
                         AttentionName);

}  // namespace
}  // namespace baton
