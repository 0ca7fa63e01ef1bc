// RoPE, KV-cache append and decode attention against the CPU reference, in
// fp16 and bf16, for sequences whose contexts differ (1 token, 2, lengths not
// a multiple of 128 or 32, one split unit exactly and one key past it, the
// full max_context up to 40,000 keys: every split layout of
// kernels/attention/attention_split.h), each at its own slot: the two kernels
// (ops::RopeAppend then ops::Attention::decode) and the fused one
// (ops::Attention::with_rope) alike, with multi-head, grouped-query (groups of
// 4, 7 and 12: one, one and two passes of query heads) and multi-query
// attention and each RoPE scaling (none, linear, llama3). The split's
// arrival counts must be zero again after every launch.
// decode_fused_kernels_gpu_test.cc checks that the fused kernel gives the two
// kernels' bits.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "kernels/rope.h"
#include "ops/host_driver.h"
#include "support/decode_reference.h"
#include "support/kernel_harness.h"

namespace baton::kernel_test {
namespace {

constexpr std::int32_t kAnyPosition = -1;  // drawn from [0, max_context)

struct AttentionShape {
  int heads, kv_heads, head_dim, max_context;
  RopeScalingType scaling;
  std::vector<std::int32_t> positions;  // one live batch position each
};

const std::vector<AttentionShape>& AttentionShapes() {
  static const std::vector<AttentionShape> shapes = {
      // The single-pass kernel (max_context within kAttentionSplitContext,
      // one unit): head_dim 64, up to the unit's last key.
      {4, 4, 64, 256, RopeScalingType::kNone, {0, 1, 129, 255, kAnyPosition}},
      // head_dim 10: even but not a multiple of 8 (4-byte loads); pairs of heads.
      {4, 2, 10, 64, RopeScalingType::kNone, {0, 63, 17}},
      // head_dim 96 (does not divide the block), four query heads per
      // key/value head.
      {8, 2, 96, 256, RopeScalingType::kLinear, {255, 17, 0, 31, kAnyPosition}},
      // The split kernel (max_context past kAttentionSplitContext): short
      // rows (one unit, per-head blocks) and split rows in one launch.
      // Just past the limit: two units at most.
      {4, 4, 64, 300, RopeScalingType::kNone, {0, 1, 129, 255, 256, 299, kAnyPosition}},
      // head_dim 96, a unit's edge (contexts 256, 257), up to 8,192.
      {8, 2, 96, 8192, RopeScalingType::kLinear, {8191, 517, 0, 255, 256, 31, kAnyPosition}},
      {8, 2, 96, 9000, RopeScalingType::kLinear, {517, 0, 255, 256, 999, 31, kAnyPosition}},
      // head_dim 128, the largest; multi-query; sequences at slots far apart.
      {3, 1, 128, 9000, RopeScalingType::kLlama3, {2047, 1500, 1}},
      // head_dim 66: 4-byte loads, 33 pieces (two value pieces per lane).
      {4, 1, 66, 9000, RopeScalingType::kNone, {699, 255, 3}},
      // Long contexts: 53 units of 3 tiles at 40,000, the split's edges.
      {8, 2, 64, 40000, RopeScalingType::kLlama3, {39999, 511, 512, 20000, kAnyPosition}},
      // Groups of 7 (one pass of 8 heads) and 12 (two passes), odd units.
      {14, 2, 64, 9000, RopeScalingType::kNone, {4999, 1000, 2}},
      {12, 1, 128, 9000, RopeScalingType::kLinear, {2999, 700, 0}},
  };
  return shapes;
}

class AttentionTest : public DecodeKernelTest,
                      public ::testing::WithParamInterface<std::tuple<std::size_t, DecoderDType>> {
 protected:
  // Runs the shape's batch (its positions live, one more position not) and
  // checks q rotated in place, the appended cache rows, every other cache
  // row unchanged bit for bit, qkv past the live batch unchanged, and the
  // attention output.
  void RunAttentionCase(bool fused, bool paged = false,
                        AttentionShortRows short_rows = AttentionShortRows::kPerQueryHead);
};

void AttentionTest::RunAttentionCase(bool fused, bool paged, AttentionShortRows short_rows) {
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
  // The cache, dense ([slot][kv head][position]) or paged: pages of 64
  // tokens handed out in reverse pool order, so that a sequence's pages are
  // neither contiguous nor in order (kv_row's layout:
  // [page][kv head][token in page]).
  constexpr std::uint32_t kPageShift = 6;
  const std::uint32_t pages_per_slot =
      (static_cast<std::uint32_t>(max_context) + (1u << kPageShift) - 1) >> kPageShift;
  const std::uint32_t pool_pages = max_slots * pages_per_slot;
  std::vector<std::uint32_t> page_table(pool_pages);
  for (std::uint32_t i = 0; i < pool_pages; ++i) page_table[i] = pool_pages - 1 - i;
  const auto row_of = [&](std::uint32_t slot, int kh, int t) -> std::size_t {
    if (!paged) {
      return ((static_cast<std::size_t>(slot) * kv_heads + kh) * max_context + t) * head_dim;
    }
    const std::size_t page =
        page_table[slot * pages_per_slot + (static_cast<std::uint32_t>(t) >> kPageShift)];
    return (((page * kv_heads + kh) << kPageShift) +
            (static_cast<std::uint32_t>(t) & ((1u << kPageShift) - 1))) *
           head_dim;
  };
  const std::size_t cache_elements =
      paged ? (static_cast<std::size_t>(pool_pages) * kv_heads << kPageShift) * head_dim
            : static_cast<std::size_t>(max_slots) * kv_heads * max_context * head_dim;
  const auto keys0 = RandomHalf(cache_elements, dtype, 1.0);
  const auto values0 = RandomHalf(cache_elements, dtype, 1.0);
  const auto qkv0 = RandomHalf(static_cast<std::size_t>(capacity) * qkv_width, dtype, 1.0);
  auto d_keys = Upload(keys0);
  auto d_values = Upload(values0);
  auto d_qkv = Upload(qkv0);
  auto d_rope = Upload(inv_freq);
  auto d_out = Poisoned<std::uint16_t>(static_cast<std::size_t>(capacity) * width);
  auto d_pages = Upload(page_table);
  KvCacheLayer cache{d_keys.data(), d_values.data()};
  if (paged) {
    cache.page_table = d_pages.data();
    cache.pages_per_slot = pages_per_slot;
    cache.page_shift = kPageShift;
    cache.pool_pages = pool_pages;
  }
  SplitScratch scratch(config, capacity);
  cudaStream_t stream = stream_.get();
  if (fused) {
    ASSERT_EQ(
        ops::Enqueue(ops::Attention::with_rope(config, d_rope.data(), d_qkv.data(), cache,
                                               batch.view, scratch.view, d_out.data(), short_rows),
                     stream),
        cudaSuccess);
  } else {
    ASSERT_EQ(
        ops::Enqueue(ops::RopeAppend::of(config, d_rope.data(), d_qkv.data(), cache, batch.view),
                     stream),
        cudaSuccess);
    ASSERT_EQ(ops::Enqueue(ops::Attention::decode(config, d_qkv.data(), cache, batch.view,
                                                  scratch.view, d_out.data(), short_rows),
                           stream),
              cudaSuccess);
  }
  Sync();
  scratch.ExpectArrivalsZero();
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
      const std::size_t row = row_of(slot, kh, pos);
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
      std::vector<double> ctx_keys, ctx_values;
      for (int t = 0; t < pos; ++t) {
        for (int d = 0; d < head_dim; ++d) {
          ctx_keys.push_back(at(keys0, row_of(slot, kh, t) + d));
          ctx_values.push_back(at(values0, row_of(slot, kh, t) + d));
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
      const std::size_t row = row_of(slot, kh, pos);
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
  const std::string kernel = std::string(fused ? "_fused" : "") + (paged ? "_paged" : "");
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

// ops::Attention::with_rope (RoPE and KV append fused into attention) against the
// same references and the same cache checks.
TEST_P(AttentionTest, RopeAttentionMatchesReference) { RunAttentionCase(true); }

// Both, reading and appending through a page table whose pages are out of
// order (the split kernel's page lookups, the single-pass kernel's kv_row).
TEST_P(AttentionTest, PagedCacheMatchesReference) {
  RunAttentionCase(false, true);
  RunAttentionCase(true, true);
}

// Rows of one unit grouped per key/value head on tensor cores (the cuBLASLt
// plan's choice; the same path as before for models the tensor-core path
// does not take): the fused kernel on a dense cache, the two kernels on a
// paged one.
TEST_P(AttentionTest, GroupedShortRowsMatchReference) {
  RunAttentionCase(true, false, AttentionShortRows::kGrouped);
  RunAttentionCase(false, true, AttentionShortRows::kGrouped);
}

class SplitAttentionTest : public DecodeKernelTest {
 protected:
  // ops::Attention::decode over `batch` into a poisoned output; returns the
  // output once the split scratch's arrival counts are back at zero.
  std::vector<std::uint16_t> Decode(const DecoderConfig& config,
                                    const std::vector<std::uint16_t>& qkv,
                                    const KvCacheLayer& cache, TestBatch& batch,
                                    AttentionShortRows short_rows) {
    const std::uint32_t capacity = batch.view.capacity;
    auto d_qkv = Upload(qkv);
    auto d_out =
        Poisoned<std::uint16_t>(static_cast<std::size_t>(capacity) * config.attention_width());
    SplitScratch scratch(config, capacity);
    EXPECT_EQ(ops::Enqueue(ops::Attention::decode(config, d_qkv.data(), cache, batch.view,
                                                  scratch.view, d_out.data(), short_rows),
                           stream_.get()),
              cudaSuccess);
    Sync();
    scratch.ExpectArrivalsZero();
    return Download(d_out);
  }
};

// A row's bits depend on its q, its context and the launch's
// AttentionShortRows alone: the same row (q, slot, position 19,999: 40
// units) alone in a launch of capacity 1 (40 blocks per key/value head) and
// at row 5 of 16 rows at other positions (8 blocks per head, so each block
// serves five units) gives the same bits, both dtypes; so does a row of one
// unit (position 200) with its short rows per query head or grouped.
TEST_F(SplitAttentionTest, ARowsBitsDoNotDependOnTheLaunch) {
  for (const DecoderDType dtype : kDTypes) {
    SCOPED_TRACE(Name(dtype));
    DecoderConfig config;
    config.dtype = dtype;
    config.heads = 8;
    config.kv_heads = 2;
    config.head_dim = 64;
    config.max_context = 20000;
    const std::size_t slot_elements =
        static_cast<std::size_t>(config.kv_heads) * config.max_context * config.head_dim;
    auto d_keys = Upload(RandomHalf(slot_elements, dtype, 1.0));
    auto d_values = Upload(RandomHalf(slot_elements, dtype, 1.0));
    const KvCacheLayer cache{d_keys.data(), d_values.data()};
    const auto run = [&](std::uint32_t capacity, std::uint32_t row,
                         const std::vector<std::uint16_t>& q, std::int32_t position,
                         AttentionShortRows short_rows) {
      std::vector<std::int32_t> positions(capacity);
      std::uniform_int_distribution<std::int32_t> any(0, config.max_context - 1);
      for (auto& pos : positions) pos = any(Rng());
      positions[row] = position;
      TestBatch batch = MakeBatch(capacity, capacity, 1, positions);
      batch.slots = Upload(std::vector<std::uint32_t>(capacity, 0));  // every row reads slot 0
      batch.view.slots = batch.slots.data();
      auto qkv = RandomHalf(static_cast<std::size_t>(capacity) * config.qkv_width(), dtype, 1.0);
      std::copy(q.begin(), q.end(), qkv.begin() + row * config.qkv_width());
      const auto out = Decode(config, qkv, cache, batch, short_rows);
      return std::vector<std::uint16_t>(out.begin() + row * config.attention_width(),
                                        out.begin() + (row + 1) * config.attention_width());
    };
    const auto q = RandomHalf(config.qkv_width(), dtype, 1.0);
    for (const auto& [position, short_rows] : {std::pair{19999, AttentionShortRows::kPerQueryHead},
                                               std::pair{200, AttentionShortRows::kPerQueryHead},
                                               std::pair{200, AttentionShortRows::kGrouped}}) {
      SCOPED_TRACE(::testing::Message()
                   << "position " << position << ", short rows " << static_cast<int>(short_rows));
      const auto alone = run(1, 0, q, position, short_rows);
      const auto among = run(16, 5, q, position, short_rows);
      EXPECT_TRUE(alone == among) << "the row's output bits changed with the launch";
      EXPECT_FALSE(std::all_of(alone.begin(), alone.end(), [](std::uint16_t b) {
        return b == 0xFFFF;
      })) << "the row was never written";
    }
  }
}

// A live row out of range (a position at max_context, or a slot past
// max_slots) gets zeros for every head and reads nothing, on every path the
// kernel variants hold: per query head (the short path's zeros), grouped at
// head_dim 64 (the three-blocks-per-SM kernel, which has no short path) and
// grouped at head_dim 128; the rows beside it are still written.
TEST_F(SplitAttentionTest, LiveRowsOutOfRangeGetZerosOnEveryPath) {
  for (const int head_dim : {64, 128}) {
    for (const AttentionShortRows short_rows :
         {AttentionShortRows::kPerQueryHead, AttentionShortRows::kGrouped}) {
      SCOPED_TRACE(::testing::Message()
                   << "head_dim " << head_dim << ", short rows " << static_cast<int>(short_rows));
      DecoderConfig config;
      config.dtype = DecoderDType::kBFloat16;
      config.heads = 8;
      config.kv_heads = 2;
      config.head_dim = head_dim;
      config.max_context = 2048;
      const std::uint32_t capacity = 4, max_slots = 2;
      const std::size_t slot_elements =
          static_cast<std::size_t>(config.kv_heads) * config.max_context * head_dim;
      auto d_keys = Upload(RandomHalf(max_slots * slot_elements, config.dtype, 1.0));
      auto d_values = Upload(RandomHalf(max_slots * slot_elements, config.dtype, 1.0));
      const KvCacheLayer cache{d_keys.data(), d_values.data()};
      // Rows 0 and 3 in range (short and split contexts), row 1 at
      // max_context, row 2 in slot max_slots.
      TestBatch batch =
          MakeBatch(capacity, capacity, max_slots, {100, config.max_context, 7, 1500});
      batch.slots = Upload(std::vector<std::uint32_t>{0, 1, max_slots, 1});
      batch.view.slots = batch.slots.data();
      const auto out = Decode(
          config,
          RandomHalf(static_cast<std::size_t>(capacity) * config.qkv_width(), config.dtype, 1.0),
          cache, batch, short_rows);
      const auto row_words = [&](std::uint32_t row) {
        return std::vector<std::uint16_t>(out.begin() + row * config.attention_width(),
                                          out.begin() + (row + 1) * config.attention_width());
      };
      for (const std::uint32_t row : {1u, 2u}) {
        const auto words = row_words(row);
        EXPECT_TRUE(std::all_of(words.begin(), words.end(), [](std::uint16_t b) { return b == 0; }))
            << "row " << row << " (out of range) is not all zeros";
      }
      for (const std::uint32_t row : {0u, 3u}) {
        const auto words = row_words(row);
        EXPECT_TRUE(
            std::none_of(words.begin(), words.end(), [](std::uint16_t b) { return b == 0xFFFF; }))
            << "row " << row << " was not written";
      }
    }
  }
}

std::string AttentionName(const ::testing::TestParamInfo<AttentionTest::ParamType>& info) {
  const AttentionShape& shape = AttentionShapes()[std::get<0>(info.param)];
  return "h" + std::to_string(shape.heads) + "kv" + std::to_string(shape.kv_heads) + "x" +
         std::to_string(shape.head_dim) + "_ctx" + std::to_string(shape.max_context) + "_" +
         Name(std::get<1>(info.param));
}

INSTANTIATE_TEST_SUITE_P(, AttentionTest,
                         ::testing::Combine(::testing::Range<std::size_t>(0,
                                                                          AttentionShapes().size()),
                                            ::testing::ValuesIn(kDTypes)),
                         AttentionName);

}  // namespace
}  // namespace baton::kernel_test
