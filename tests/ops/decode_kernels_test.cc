// CPU-only pieces of the decode-step kernels: config validation, the
// deterministic weights, the host references' own invariants, and launcher
// refusals that happen before any device call.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "absl/strings/match.h"
#include "kernels/decoder_config_check.h"
#include "kernels/decoder_weights.h"
#include "kernels/half_bits.h"
#include "ops/host_driver.h"
#include "support/decode_reference.h"
#include "support/gpu_test.h"
#include "support/test_seed.h"

namespace baton {
namespace {

TEST(DecoderConfigTest, DefaultAndIssueShapesValidate) {
  BATON_EXPECT_OK(ValidateDecoderConfig(DecoderConfig{}));
  DecoderConfig small;  // the issue's "small model": 4 layers, d_model 1024
  small.layers = 4;
  small.d_model = 1024;
  small.heads = 16;
  small.head_dim = 64;
  small.ffn = 2816;
  small.vocab = 32000;
  small.max_context = 2048;
  small.dtype = DecoderDType::kBFloat16;
  BATON_EXPECT_OK(ValidateDecoderConfig(small));
}

// Each bad field is refused with its name, its value and the fix.
TEST(DecoderConfigTest, RefusalsNameTheFieldAndTheFix) {
  struct Case {
    void (*mutate)(DecoderConfig&);
    const char* field;
    const char* fix;
  };
  const Case cases[] = {
      {[](DecoderConfig& c) { c.layers = 0; }, "layers = 0", ">= 1"},
      {[](DecoderConfig& c) { c.heads = -2; }, "heads = -2", ">= 1"},
      {[](DecoderConfig& c) { c.head_dim = 63; }, "head_dim = 63", "must be even"},
      {[](DecoderConfig& c) { c.head_dim = 256; }, "head_dim = 256", "<= 128"},
      {[](DecoderConfig& c) { c.d_model = 260; }, "d_model = 260", "multiple of 8"},
      {[](DecoderConfig& c) { c.vocab = (1 << 18) + 8; }, "vocab = 262152", "exceeds 262144"},
      // Seven digits print whole, not as 1.23457e+06.
      {[](DecoderConfig& c) { c.vocab = 1234567; }, "vocab = 1234567", "exceeds 262144"},
      {[](DecoderConfig& c) { c.ffn = 100; }, "ffn = 100", "multiple of 8"},
      {[](DecoderConfig& c) { c.max_context = (1 << 20) + 1; }, "max_context = 1048577",
       "lower it"},
      {[](DecoderConfig& c) { c.rms_epsilon = 0.0f; }, "rms_epsilon = 0", "> 0"},
      {[](DecoderConfig& c) { c.rope.theta = NAN; }, "rope.theta = nan", "> 1"},
      {[](DecoderConfig& c) { c.kv_heads = 3; }, "kv_heads = 3", "must divide heads (4)"},
      {[](DecoderConfig& c) {
         c.rope.scaling = RopeScalingType::kLlama3;
         c.rope.factor = 32.0f;
         c.rope.low_freq_factor = 4.0f;
         c.rope.original_max_position_embeddings = 8192;
       },
       "rope.high_freq_factor = 4", "low_freq_factor < high_freq_factor"},
      {[](DecoderConfig& c) { c.dtype = static_cast<DecoderDType>(7); }, "dtype = 7",
       "kFloat16 or kBFloat16"},
  };
  for (const Case& c : cases) {
    DecoderConfig config;
    c.mutate(config);
    const absl::Status status = ValidateDecoderConfig(config);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument) << c.field;
    EXPECT_TRUE(absl::StrContains(status.message(), c.field)) << status;
    EXPECT_TRUE(absl::StrContains(status.message(), c.fix)) << status;
  }
}

TEST(DecoderWeightsTest, SameSeedSameBitsOtherSeedOtherBits) {
  DecoderConfig config;
  config.layers = 2;
  config.d_model = 64;
  config.heads = 2;
  config.head_dim = 32;
  config.ffn = 128;
  config.vocab = 256;
  BATON_ASSERT_OK_AND_ASSIGN(const DecoderHostWeights a, GenerateDecoderWeights(config, 42));
  BATON_ASSERT_OK_AND_ASSIGN(const DecoderHostWeights b, GenerateDecoderWeights(config, 42));
  BATON_ASSERT_OK_AND_ASSIGN(const DecoderHostWeights c, GenerateDecoderWeights(config, 43));
  EXPECT_EQ(a.embedding, b.embedding);
  EXPECT_EQ(a.lm_head, b.lm_head);
  for (int l = 0; l < config.layers; ++l) {
    EXPECT_EQ(a.layers[l].wqkv, b.layers[l].wqkv);
    EXPECT_EQ(a.layers[l].w_down, b.layers[l].w_down);
    EXPECT_NE(a.layers[l].wqkv, c.layers[l].wqkv);
  }
  EXPECT_NE(a.embedding, c.embedding);
  // Layers draw from different counter streams.
  EXPECT_NE(a.layers[0].wo, a.layers[1].wo);
  const std::size_t elements =
      2 * 256 * 64 + 64 + 2 * (64 + 3 * 64 * 64 + 64 * 64 + 64 + 2 * 128 * 64 + 64 * 128);
  EXPECT_EQ(a.bytes(), elements * 2);
}

// Linear weights have variance 1/fan_in (activations keep unit scale), norms
// sit near 1: the scaling the kernels' tolerances assume.
TEST(DecoderWeightsTest, ScalesKeepActivationsInRange) {
  DecoderConfig config;
  config.d_model = 512;
  config.ffn = 1024;
  config.dtype = DecoderDType::kBFloat16;
  BATON_ASSERT_OK_AND_ASSIGN(const DecoderHostWeights w, GenerateDecoderWeights(config, 7));
  const auto moments = [&](const std::vector<std::uint16_t>& bits, double& mean, double& var) {
    double sum = 0, sq = 0;
    for (std::uint16_t b : bits) {
      const double v = HalfBitsToFloat(b, config.dtype);
      sum += v;
      sq += v * v;
    }
    mean = sum / bits.size();
    var = sq / bits.size() - mean * mean;
  };
  double mean = 0, var = 0;
  moments(w.layers[0].wqkv, mean, var);
  EXPECT_NEAR(mean, 0.0, 0.01 / std::sqrt(512.0));
  EXPECT_NEAR(var * 512, 1.0, 0.03);
  moments(w.layers[0].w_down, mean, var);
  EXPECT_NEAR(var * 1024, 1.0, 0.03);
  moments(w.embedding, mean, var);
  EXPECT_NEAR(var, 1.0, 0.03);
  moments(w.final_norm, mean, var);
  EXPECT_NEAR(mean, 1.0, 0.01);
  EXPECT_LT(var, 0.01);
}

TEST(DecoderWeightsTest, RefusesAnInvalidConfig) {
  DecoderConfig config;
  config.head_dim = 3;
  const auto weights = GenerateDecoderWeights(config, 1);
  EXPECT_EQ(weights.status().code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(absl::StrContains(weights.status().message(), "head_dim")) << weights.status();
}

TEST(HalfBitsTest, RoundTripsAndRoundsToNearestEven) {
  EXPECT_EQ(FloatToHalfBits(1.0f, DecoderDType::kFloat16), 0x3C00);
  EXPECT_EQ(FloatToHalfBits(1.0f, DecoderDType::kBFloat16), 0x3F80);
  EXPECT_EQ(FloatToHalfBits(-2.0f, DecoderDType::kFloat16), 0xC000);
  // 1 + 2^-11 is halfway between fp16 1 and 1 + 2^-10: ties to even (1).
  EXPECT_EQ(FloatToHalfBits(1.0f + 0x1.0p-11f, DecoderDType::kFloat16), 0x3C00);
  SCOPED_TRACE(testing::TestSeedNote());
  std::mt19937 rng(static_cast<std::uint32_t>(testing::TestSeed()));
  for (int i = 0; i < 1000; ++i) {
    const std::uint16_t bits = static_cast<std::uint16_t>(rng() & 0x7BFF);  // finite values
    EXPECT_EQ(
        FloatToHalfBits(HalfBitsToFloat(bits, DecoderDType::kFloat16), DecoderDType::kFloat16),
        bits);
    const std::uint16_t bf = static_cast<std::uint16_t>(rng() & 0x7F7F);
    EXPECT_EQ(
        FloatToHalfBits(HalfBitsToFloat(bf, DecoderDType::kBFloat16), DecoderDType::kBFloat16), bf);
  }
}

// Random123's published known-answer vector for Philox4x32-10 (counter 0,
// key 0): proves the host re-implementation the sampling test compares
// curand against is Philox, word order included.
TEST(ReferenceTest, PhiloxMatchesTheKnownAnswerVector) {
  const std::uint32_t expected[4] = {0x6627e8d5u, 0xe169c58du, 0xbc57ac4cu, 0x9b00dbd8u};
  for (int w = 0; w < 4; ++w) EXPECT_EQ(reference::PhiloxBits(0, 0, w), expected[w]) << w;
  // Offsets past one block move the counter, subsequences its high half.
  EXPECT_NE(reference::PhiloxBits(0, 0, 4), expected[0]);
  EXPECT_NE(reference::PhiloxBits(0, 1, 0), expected[0]);
}

TEST(ReferenceTest, ArgmaxTiesGoToTheLowestIndexAndNanIsIgnored) {
  const float a[] = {1.0f, 3.0f, NAN, 3.0f, -1.0f};
  EXPECT_EQ(reference::Argmax(a, 5), 1);
  const float b[] = {NAN, NAN};
  EXPECT_EQ(reference::Argmax(b, 2), 0);
}

// Launchers refuse shapes they cannot run before touching the device.
TEST(DecodeLaunchersTest, RefuseShapesTheKernelsCannotRun) {
  DecodeBatch batch;
  static const std::uint32_t active = 1;
  batch.active = &active;  // never dereferenced: every call below is refused first
  batch.capacity = 1;
  EXPECT_EQ(ops::Enqueue(
                ops::Gemv::plain(DecoderDType::kFloat16, nullptr, 8, 12, nullptr, batch, nullptr),
                nullptr),
            cudaErrorInvalidValue);  // in_features not a multiple of 8
  alignas(16) static std::uint16_t w[16];
  EXPECT_EQ(
      ops::Enqueue(ops::Gemv::plain(DecoderDType::kFloat16, w + 1, 1, 8, w, batch, w), nullptr),
      cudaErrorInvalidValue);  // misaligned weights
  DecoderConfig odd;
  odd.head_dim = 7;
  EXPECT_EQ(ops::Enqueue(ops::Attention::decode(odd, nullptr, {}, batch, {}, nullptr), nullptr),
            cudaErrorInvalidValue);
  // A model that splits its contexts without the scratch their partials
  // need (or with too few rows of it) is refused before any launch.
  DecoderConfig long_context;
  long_context.max_context = kAttentionSplitContext + 1;
  static const std::uint32_t slots[1] = {0};
  static const std::int32_t positions[1] = {0};
  DecodeBatch rows = batch;
  rows.slots = slots;
  rows.positions = positions;
  rows.max_slots = 1;
  EXPECT_EQ(ops::Enqueue(ops::Attention::decode(long_context, w, {}, rows, {}, w), nullptr),
            cudaErrorInvalidValue);
  static float partials[1];
  static std::uint32_t arrivals[1];
  rows.capacity = 2;
  EXPECT_EQ(
      ops::Enqueue(ops::Attention::decode(long_context, w, {}, rows, {partials, arrivals, 1}, w),
                   nullptr),
      cudaErrorInvalidValue);
  // A way of attending short rows that is not one of AttentionShortRows'
  // (a model that needs no scratch, every other argument valid).
  rows.capacity = 1;
  EXPECT_EQ(ops::Enqueue(ops::Attention::decode(DecoderConfig{}, w, {w, w}, rows, {}, w,
                                                static_cast<AttentionShortRows>(2)),
                         nullptr),
            cudaErrorInvalidValue);
  DecoderConfig config;
  DecodeBatch no_active;
  no_active.capacity = 1;
  EXPECT_EQ(
      ops::Enqueue(ops::RowNorm::rms_norm(config, nullptr, nullptr, no_active, nullptr), nullptr),
      cudaErrorInvalidValue);
  alignas(16) static float hidden[8];
  EXPECT_EQ(ops::Enqueue(ops::Gemv::rms_norm(config, w, 1, nullptr, w, batch, w), nullptr),
            cudaErrorInvalidValue);  // no residual stream to normalize
  EXPECT_EQ(ops::Enqueue(ops::Gemv::rms_norm(config, w, 1, hidden, w + 1, batch, w), nullptr),
            cudaErrorInvalidValue);  // misaligned norm weight
  EXPECT_EQ(
      ops::Enqueue(ops::Gemv::embedding_rms_norm(config, w, nullptr, w, 1, w, batch, hidden, w),
                   nullptr),
      cudaErrorInvalidValue);  // no tokens
  EXPECT_EQ(ops::Enqueue(ops::Gemv::residual_add(config, w, 8, w, batch, nullptr), nullptr),
            cudaErrorInvalidValue);  // no residual stream to add to
  EXPECT_EQ(ops::Enqueue(ops::Gemv::gated_residual_add(config, w, 12, w, batch, hidden), nullptr),
            cudaErrorInvalidValue);  // in_features not a multiple of 8
  // SiLU * up of a gate | up GEMV: an odd width has no halves, no FFN has a
  // bias, and the inputs no step pairs with it are refused, as is an output
  // that is not one of GemvOutput's.
  using detail::decode::GemvInput;
  using detail::decode::GemvIo;
  using detail::decode::GemvOutput;
  const auto fused = [&](GemvInput input, GemvOutput output, int out_features, GemvIo io) {
    return ops::Enqueue(
        ops::Gemv::fused(DecoderDType::kBFloat16, input, output, w, out_features, 8, io, batch),
        nullptr);
  };
  EXPECT_EQ(fused(GemvInput::kPlain, GemvOutput::kSiluMul, 15, GemvIo::plain(w, w)),
            cudaErrorInvalidValue);
  EXPECT_EQ(fused(GemvInput::kPlain, GemvOutput::kSiluMul, 16, GemvIo::plain(w, w, w)),
            cudaErrorInvalidValue);
  EXPECT_EQ(fused(GemvInput::kPlain, GemvOutput::kSiluMul, 16, GemvIo::plain(w, nullptr)),
            cudaErrorInvalidValue);
  EXPECT_EQ(fused(GemvInput::kGated, GemvOutput::kSiluMul, 16, GemvIo::plain(w, w)),
            cudaErrorInvalidValue);
  EXPECT_EQ(fused(GemvInput::kEmbeddingRmsNorm, GemvOutput::kSiluMul, 16,
                  GemvIo::embedding_rms_norm(config, w, nullptr, hidden, w, w)),
            cudaErrorInvalidValue);
  EXPECT_EQ(fused(GemvInput::kRmsNorm, GemvOutput::kResidualAdd, 16,
                  GemvIo::rms_norm(config, hidden, w, w)),
            cudaErrorInvalidValue);
  EXPECT_EQ(fused(GemvInput::kPlain, static_cast<GemvOutput>(3), 16, GemvIo::plain(w, w)),
            cudaErrorInvalidValue);
  DecodeBatch no_slots = batch;
  EXPECT_EQ(ops::Enqueue(ops::RopeAppend::of(config, nullptr, nullptr, {}, no_slots), nullptr),
            cudaErrorInvalidValue);
}

// The split layout (kernels/attention/attention_split.h) for every context up to
// 2^20 step 97 and the edges: the units cover the context's tiles exactly
// once, in order; at most kAttentionMaxUnits; each but the last holds at
// least kAttentionUnitKeys keys; one unit up to kAttentionUnitKeys keys.
TEST(AttentionSplitTest, UnitsCoverTheTilesOnceWithinTheBounds) {
  std::vector<int> contexts = {1,   2,    255,   256,   257,   511,    512,
                               513, 1024, 32767, 32768, 32769, 131072, kDecoderMaxContext};
  for (int c = 1; c <= kDecoderMaxContext; c += 97) contexts.push_back(c);
  for (const int context : contexts) {
    SCOPED_TRACE("context " + std::to_string(context));
    const AttentionSplit s = attention_split(context);
    const int tiles = (context + kAttentionTile - 1) / kAttentionTile;
    ASSERT_GE(s.units, 1);
    ASSERT_LE(s.units, kAttentionMaxUnits);
    if (context <= kAttentionUnitKeys) ASSERT_EQ(s.units, 1);
    // Units u cover tiles [u * per, min((u + 1) * per, tiles)): contiguous,
    // none empty, the last ending at the context's last tile.
    ASSERT_LT((s.units - 1) * s.tiles_per_unit, tiles);
    ASSERT_GE(s.units * s.tiles_per_unit, tiles);
    if (s.units > 1) {
      ASSERT_GE(s.tiles_per_unit * kAttentionTile, kAttentionUnitKeys);
    }
  }
}

// Short rows group on tensor cores only when the launch asks and the model
// is one the tensor-core path takes (head_dim a multiple of 16 up to 128, a
// group of at most 16 query heads); otherwise a block per query head.
TEST(AttentionSplitTest, ShortRowsGroupOnlyForTheTensorCorePath) {
  DecoderConfig config;
  config.heads = 32;
  config.kv_heads = 8;
  config.head_dim = 64;
  EXPECT_TRUE(attention_groups_short_rows(config, AttentionShortRows::kGrouped));
  EXPECT_FALSE(attention_groups_short_rows(config, AttentionShortRows::kPerQueryHead));
  config.head_dim = 96;
  EXPECT_TRUE(attention_groups_short_rows(config, AttentionShortRows::kGrouped));
  config.head_dim = 66;  // not a multiple of 16
  EXPECT_FALSE(attention_groups_short_rows(config, AttentionShortRows::kGrouped));
  config.head_dim = 128;
  config.kv_heads = 1;  // a group of 32 query heads: more than one mma's rows
  EXPECT_FALSE(attention_groups_short_rows(config, AttentionShortRows::kGrouped));
}

// Blocks per (row, key/value head): at least 1, at most the longest
// context's units, at most kAttentionTargetBlocks in all (one wave) unless
// one each is already more.
TEST(AttentionSplitTest, BlocksPerHeadFillTheGpuWithinTheLongestContext) {
  DecoderConfig config;
  config.heads = 32;
  config.kv_heads = 8;
  config.max_context = 131072;  // 64 units: a key/value head's 4 query heads need 16 each
  // 32 query heads: 264 / 32 = 8; 256: 264 / 256 = 1 (not two waves).
  EXPECT_EQ(attention_blocks_per_head(config, 1), 8u);
  EXPECT_EQ(attention_blocks_per_head(config, 8), 1u);
  EXPECT_EQ(attention_blocks_per_head(config, 264), 1u);
  EXPECT_EQ(static_cast<int>(attention_blocks_per_head(config, 1)), kAttentionTargetBlocks / 32);
  // (9 rows' 288 query heads are past it with one block each: z stays 1.)
  for (std::uint32_t rows = 1; rows <= 8; ++rows) {
    EXPECT_LE(attention_blocks_per_head(config, rows) * rows * 32,
              static_cast<unsigned>(kAttentionTargetBlocks))
        << rows << " rows";
  }
  config.heads = 8;  // multi-head: 8 pairs would want 33, the context has 64 units
  EXPECT_EQ(attention_blocks_per_head(config, 1), 33u);
  config.kv_heads = 1;  // one key/value head: its 8 query heads split 64 units
  EXPECT_EQ(attention_blocks_per_head(config, 1), 8u);
  config.heads = 32;
  config.kv_heads = 8;
  config.max_context = 9192;  // 36 units: 9 per query head, more than 8 wanted
  EXPECT_EQ(attention_blocks_per_head(config, 1), 8u);
  config.max_context = kAttentionSplitContext + 1000;  // 5 units: 2 per query head
  EXPECT_EQ(attention_blocks_per_head(config, 1), 2u);
  config.max_context = kAttentionSplitContext + 1;  // 2 units: 1 per query head
  EXPECT_EQ(attention_blocks_per_head(config, 1), 1u);
  config.max_context = kAttentionSplitContext;  // the single-pass kernel: no split, no scratch
  EXPECT_FALSE(attention_splits(config));
  EXPECT_EQ(attention_blocks_per_head(config, 1), 1u);
  EXPECT_EQ(attention_scratch_floats(config, 8), 0u);
  EXPECT_EQ(attention_scratch_arrivals(config, 8), 0u);
  config.max_context = kAttentionSplitContext + 1;
  EXPECT_TRUE(attention_splits(config));
  EXPECT_EQ(attention_scratch_floats(config, 8),
            std::size_t{8} * 32 * kAttentionMaxUnits * (config.head_dim + 2));
  EXPECT_EQ(attention_scratch_arrivals(config, 8), std::size_t{8} * 8);
}

// The tensor-core path's shared memory (attention_mma_layout): the warps'
// states start 16-byte aligned after the ring and every state row (head_dim
// outputs, max, sum) is a multiple of 4 floats, since the combines read four
// dims at once (float4); the layout holds every warp's row for every query
// head of the group, and two blocks of the widest still fit an SM.
TEST(AttentionSplitTest, MmaLayoutAlignsEveryStateRowForFourDimReads) {
  for (int head_dim = 16; head_dim <= 128; head_dim += 16) {
    for (int group = 1; group <= kAttentionMmaRows; ++group) {
      SCOPED_TRACE("head_dim " + std::to_string(head_dim) + ", group " + std::to_string(group));
      DecoderConfig config;
      config.kv_heads = 2;
      config.heads = 2 * group;
      config.head_dim = head_dim;
      const unsigned floats = attention_mma_state_floats(head_dim);
      EXPECT_EQ(floats % 4, 0u);
      EXPECT_GE(floats, static_cast<unsigned>(head_dim) + 2);
      EXPECT_LT(floats, static_cast<unsigned>(head_dim) + 6);
      const AttentionMmaLayout l = attention_mma_layout(config);
      EXPECT_EQ(l.states % 16, 0u);
      EXPECT_EQ(l.states, l.stages * l.stage_bytes);
      EXPECT_EQ(l.bytes, l.states + kAttentionMmaWarps * group * floats * 4u);
      EXPECT_LE(2 * l.bytes, 200u * 1024u);  // room for two blocks' static memory too
    }
  }
}

}  // namespace
}  // namespace baton
