// The RoPE inverse-frequency table the attention kernels read, against
// independent formulas in long double.
#include <gtest/gtest.h>

#include <cmath>
#include <vector>

#include "kernels/rope.h"

namespace baton {
namespace {

// Llama-3.2-1B's rope: theta 500000, llama3 scaling factor 32, low 1, high 4,
// original 8192, head_dim 64. The reference is Meta's apply_scaling, written
// from its own description in long double.
TEST(RopeInverseFrequencies, Llama3MatchesMetasApplyScaling) {
  RopeConfig rope;
  rope.theta = 500000.0f;
  rope.scaling = RopeScalingType::kLlama3;
  rope.factor = 32.0f;
  rope.low_freq_factor = 1.0f;
  rope.high_freq_factor = 4.0f;
  rope.original_max_position_embeddings = 8192;
  const std::vector<float> got = RopeInverseFrequencies(rope, 64);
  ASSERT_EQ(got.size(), 32u);
  const long double pi = 3.14159265358979323846264338327950288L;
  int low = 0, high = 0, medium = 0;
  for (int i = 0; i < 32; ++i) {
    const long double freq = expl(-logl(500000.0L) * (2.0L * i) / 64.0L);
    const long double wavelen = 2.0L * pi / freq;
    long double want;
    if (wavelen < 8192.0L / 4.0L) {
      want = freq;
      ++high;
    } else if (wavelen > 8192.0L / 1.0L) {
      want = freq / 32.0L;
      ++low;
    } else {
      const long double smooth = (8192.0L / wavelen - 1.0L) / (4.0L - 1.0L);
      want = (1.0L - smooth) * freq / 32.0L + smooth * freq;
      ++medium;
    }
    EXPECT_FLOAT_EQ(got[i], static_cast<float>(want)) << "i=" << i;
  }
  // The test covers all three bands.
  EXPECT_GT(low, 0);
  EXPECT_GT(high, 0);
  EXPECT_GT(medium, 0);
  EXPECT_EQ(got[0], 1.0f);
}

TEST(RopeInverseFrequencies, NoneAndLinear) {
  RopeConfig rope;
  rope.theta = 10000.0f;
  std::vector<float> got = RopeInverseFrequencies(rope, 128);
  ASSERT_EQ(got.size(), 64u);
  for (int i = 0; i < 64; ++i) {
    EXPECT_FLOAT_EQ(got[i], static_cast<float>(powl(10000.0L, -(2.0L * i) / 128.0L))) << i;
  }
  rope.scaling = RopeScalingType::kLinear;
  rope.factor = 4.0f;
  got = RopeInverseFrequencies(rope, 128);
  for (int i = 0; i < 64; ++i) {
    EXPECT_FLOAT_EQ(got[i], static_cast<float>(powl(10000.0L, -(2.0L * i) / 128.0L) / 4.0L)) << i;
  }
}

}  // namespace
}  // namespace baton
