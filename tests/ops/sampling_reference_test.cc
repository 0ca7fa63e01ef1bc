// The CPU reference of top-k / top-p sampling (support/decode_reference.h),
// which the GPU test trusts, checked against a brute-force implementation
// written from the semantics directly (values compared as doubles, no keys,
// no sorting of groups, O(vocab^2)) on small random rows full of ties, NaNs
// and infinities, plus the 16-bit key over every bit pattern. No GPU.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <limits>
#include <numeric>
#include <random>
#include <vector>

#include "kernels/half_bits.h"
#include "support/decode_reference.h"
#include "support/test_seed.h"

namespace baton {
namespace {

constexpr DecoderDType kDTypes[] = {DecoderDType::kFloat16, DecoderDType::kBFloat16};
constexpr double kInf = std::numeric_limits<double>::infinity();

std::uint16_t Nan(DecoderDType dtype) { return dtype == DecoderDType::kFloat16 ? 0x7E00 : 0x7FC0; }

double Value(std::uint16_t bits, DecoderDType dtype) {
  const double v = HalfBitsToFloat(bits, dtype);
  return std::isnan(v) ? -kInf : v;
}

TEST(SamplingReferenceTest, LogitKeyOrdersEveryBitPatternByValue) {
  for (DecoderDType dtype : kDTypes) {
    SCOPED_TRACE(dtype == DecoderDType::kFloat16 ? "fp16" : "bf16");
    std::vector<std::uint16_t> all(65536);
    std::iota(all.begin(), all.end(), 0);
    std::sort(all.begin(), all.end(),
              [&](std::uint16_t a, std::uint16_t b) { return Value(a, dtype) < Value(b, dtype); });
    for (std::size_t i = 0; i < all.size(); ++i) {
      const std::uint16_t key = reference::LogitKey(all[i], dtype);
      ASSERT_EQ(reference::KeyLogit(key, dtype), Value(all[i], dtype)) << "bits " << all[i];
      if (i == 0) continue;
      const std::uint16_t previous = reference::LogitKey(all[i - 1], dtype);
      if (Value(all[i - 1], dtype) == Value(all[i], dtype)) {
        ASSERT_EQ(previous, key) << "equal values " << all[i - 1] << " " << all[i];
      } else {
        ASSERT_LT(previous, key) << "values " << all[i - 1] << " < " << all[i];
      }
    }
    EXPECT_EQ(reference::LogitKey(0x8000, dtype), reference::LogitKey(0x0000, dtype));
    EXPECT_EQ(reference::LogitKey(Nan(dtype), dtype),
              reference::LogitKey(FloatToHalfBits(-INFINITY, dtype), dtype));
  }
}

// The semantics, spelled out per token.
struct Brute {
  std::vector<bool> survives;
  int token = -1;
  bool boundary_tie = false;  // a group's mass above is within 1e-12 of P
};

Brute BruteForce(const std::vector<std::uint16_t>& bits, DecoderDType dtype,
                 const reference::TokenSampling& s) {
  const int vocab = static_cast<int>(bits.size());
  std::vector<double> v(vocab);
  for (int i = 0; i < vocab; ++i) v[i] = Value(bits[i], dtype);
  Brute out;
  out.survives.assign(vocab, true);
  if (!(s.temperature > 0.0)) {
    out.token = static_cast<int>(std::max_element(v.begin(), v.end()) - v.begin());
    return out;
  }
  if (s.top_k > 0 && s.top_k < static_cast<std::uint32_t>(vocab)) {
    for (int i = 0; i < vocab; ++i) {  // i survives iff fewer than K tokens are larger
      int larger = 0;
      for (int j = 0; j < vocab; ++j) larger += v[j] > v[i];
      out.survives[i] = larger < static_cast<int>(s.top_k);
    }
  }
  if (s.top_p < 1.0) {
    double v_max = -kInf;
    for (int i = 0; i < vocab; ++i) {
      if (out.survives[i]) v_max = std::max(v_max, v[i]);
    }
    std::vector<double> w(vocab, 0.0);
    double z = 0.0;
    for (int i = 0; i < vocab; ++i) {
      if (!out.survives[i]) continue;
      w[i] = v[i] == v_max ? 1.0 : std::exp((v[i] - v_max) / s.temperature);
      z += w[i];
    }
    std::vector<bool> kept(vocab, false);
    for (int i = 0; i < vocab; ++i) {
      if (!out.survives[i]) continue;
      double above = 0.0;
      for (int j = 0; j < vocab; ++j) {
        if (out.survives[j] && v[j] > v[i]) above += w[j];
      }
      kept[i] = v[i] == v_max || above / z < s.top_p;
      // (The top group's decision is no comparison: it always survives.)
      out.boundary_tie =
          out.boundary_tie || (v[i] != v_max && std::abs(above / z - s.top_p) < 1e-12);
    }
    out.survives = kept;
  }
  std::vector<float> f(vocab);
  for (int i = 0; i < vocab; ++i) f[i] = HalfBitsToFloat(bits[i], dtype);
  const auto scores =
      reference::SampleScores(f.data(), vocab, s.temperature, s.seed, s.sequence, s.step);
  for (int i = 0; i < vocab; ++i) {
    if (out.survives[i] && (out.token < 0 || scores[i] > scores[out.token])) out.token = i;
  }
  return out;
}

TEST(SamplingReferenceTest, MatchesBruteForceOnSmallRowsWithTies) {
  SCOPED_TRACE(testing::TestSeedNote());
  std::mt19937_64 rng(testing::TestSeed());
  // A small palette of values makes ties (key groups) common.
  const float palette[] = {-3.0f, -1.0f, -0.5f, -0.0f, 0.0f, 0.25f, 0.5f, 1.0f, 1.5f, 2.0f, 4.0f};
  const double temperatures[] = {0.0, 0.3, 0.7, 1.0, 2.5};
  const double top_ps[] = {-0.5, 0.0, 0.05, 0.3, 0.5, 0.75, 0.9, 0.99, 1.0, 2.0};
  int cases = 0, filtered = 0;
  for (int round = 0; round < 3000; ++round) {
    const DecoderDType dtype = kDTypes[round % 2];
    const int vocab = 8 * static_cast<int>(1 + rng() % 6);
    std::vector<std::uint16_t> bits(vocab);
    const int special = static_cast<int>(rng() % 8);  // some rows get NaN / infinities
    for (auto& b : bits) {
      b = FloatToHalfBits(palette[rng() % std::size(palette)], dtype);
      if (special == 1 && rng() % 4 == 0) b = Nan(dtype);
      if (special == 2 && rng() % 4 == 0) b = FloatToHalfBits(-INFINITY, dtype);
      if (special == 3 && rng() % 16 == 0) b = FloatToHalfBits(INFINITY, dtype);
      if (special == 4) b = rng() % 2 ? Nan(dtype) : FloatToHalfBits(-INFINITY, dtype);
    }
    if (special == 5) {  // a continuous row: few ties
      std::normal_distribution<float> normal(0.0f, 2.0f);
      for (auto& b : bits) b = FloatToHalfBits(normal(rng), dtype);
    }
    reference::TokenSampling s;
    s.temperature = temperatures[rng() % std::size(temperatures)];
    const std::uint32_t ks[] = {0,
                                1,
                                2,
                                3,
                                5,
                                static_cast<std::uint32_t>(vocab - 1),
                                static_cast<std::uint32_t>(vocab),
                                static_cast<std::uint32_t>(vocab + 3)};
    s.top_k = ks[rng() % std::size(ks)];
    s.top_p = top_ps[rng() % std::size(top_ps)];
    s.seed = rng();
    s.sequence = rng();
    s.step = static_cast<std::uint32_t>(rng() % 1000);
    const Brute brute = BruteForce(bits, dtype, s);
    if (brute.boundary_tie) continue;  // double rounding may decide either way
    ++cases;
    const auto thresholds = reference::SamplingFilter(bits.data(), vocab, dtype, s, 0.0);
    filtered += thresholds.exact != 0;
    EXPECT_FALSE(thresholds.ambiguous);
    for (int i = 0; i < vocab; ++i) {
      const bool survives = reference::LogitKey(bits[i], dtype) >= thresholds.exact;
      if (s.temperature > 0.0) {
        ASSERT_EQ(survives, brute.survives[i])
            << "round " << round << " token " << i << " vocab " << vocab << " T " << s.temperature
            << " K " << s.top_k << " P " << s.top_p;
      }
    }
    ASSERT_EQ(reference::SampleToken(bits.data(), vocab, dtype, s), brute.token)
        << "round " << round << " T " << s.temperature << " K " << s.top_k << " P " << s.top_p;
  }
  std::printf("  %d cases (%d filtered) agree with the brute force\n", cases, filtered);
  EXPECT_GT(cases, 2500);
  EXPECT_GT(filtered, 1000);
}

TEST(SamplingReferenceTest, HandWorkedExamples) {
  const DecoderDType dtype = DecoderDType::kBFloat16;
  const auto row = [&](std::vector<float> values) {
    std::vector<std::uint16_t> bits;
    for (float v : values) bits.push_back(FloatToHalfBits(v, dtype));
    return bits;
  };
  const auto key = [&](float v) { return reference::LogitKey(FloatToHalfBits(v, dtype), dtype); };
  reference::TokenSampling s;
  s.temperature = 1.0;
  // Top-k keeps the ties at the K-th value: K = 2 of {3, 2, 2, 1} keeps three.
  auto bits = row({1, 2, 3, 2, 0, -1, 0.5f, 1});
  s.top_k = 2;
  EXPECT_EQ(reference::SamplingFilter(bits.data(), 8, dtype, s, 0.0).exact, key(2));
  s.top_k = 1;
  EXPECT_EQ(reference::SamplingFilter(bits.data(), 8, dtype, s, 0.0).exact, key(3));
  s.top_k = 0;
  // Top-p: weights e^(x - 3) (Z = 2.1566); the masses above the groups 3 | 2
  // | 1 | 0.5 | 0 | -1 are 0 | .4637 | .8049 | .9304 | .9684 | .9915.
  s.top_p = 0.45;
  EXPECT_EQ(reference::SamplingFilter(bits.data(), 8, dtype, s, 0.0).exact, key(3));
  s.top_p = 0.5;
  EXPECT_EQ(reference::SamplingFilter(bits.data(), 8, dtype, s, 0.0).exact, key(2));
  s.top_p = 0.95;
  EXPECT_EQ(reference::SamplingFilter(bits.data(), 8, dtype, s, 0.0).exact, key(0.5f));
  s.top_p = 0.99;
  EXPECT_EQ(reference::SamplingFilter(bits.data(), 8, dtype, s, 0.0).exact, key(0));
  // The boundary .4637 within a margin of 0.01 of P = 0.47: either way.
  s.top_p = 0.47;
  const auto wide = reference::SamplingFilter(bits.data(), 8, dtype, s, 0.01);
  EXPECT_TRUE(wide.ambiguous);
  EXPECT_EQ(wide.strict, key(3));
  EXPECT_EQ(wide.exact, key(2));
  EXPECT_EQ(wide.loose, key(2));
  // P = 0 still keeps the top group. Both filters: top-k first, then top-p on
  // the kept {3, 2, 2} (masses above: 0 | 1 / 1.7358 = .5761).
  s.top_p = 0.0;
  EXPECT_EQ(reference::SamplingFilter(bits.data(), 8, dtype, s, 0.0).exact, key(3));
  s.top_k = 2;
  s.top_p = 0.55;
  EXPECT_EQ(reference::SamplingFilter(bits.data(), 8, dtype, s, 0.0).exact, key(3));
  s.top_p = 0.6;
  EXPECT_EQ(reference::SamplingFilter(bits.data(), 8, dtype, s, 0.0).exact, key(2));
  // A row of -inf: one group of weight-1 tokens, token 0 (every score -inf).
  bits =
      row({-INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY, -INFINITY});
  s.top_k = 2;
  s.top_p = 0.5;
  EXPECT_EQ(reference::SamplingFilter(bits.data(), 8, dtype, s, 0.0).exact, key(-INFINITY));
  EXPECT_EQ(reference::SampleToken(bits.data(), 8, dtype, s), 0);
  // +inf takes all the mass: top-p keeps it alone.
  bits = row({0, 1, INFINITY, 2, 3, 4, 5, 6});
  s.top_k = 0;
  s.top_p = 0.99;
  EXPECT_EQ(reference::SamplingFilter(bits.data(), 8, dtype, s, 0.0).exact, key(INFINITY));
  EXPECT_EQ(reference::SampleToken(bits.data(), 8, dtype, s), 2);
}

}  // namespace
}  // namespace baton
