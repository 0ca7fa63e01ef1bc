// Token selection: greedy argmax (exact, its tie and NaN rules) and seeded
// Gumbel-max sampling (the CPU Philox reference, reproducibility and keying,
// temperature 0 as argmax, frequencies that follow the softmax).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <numeric>
#include <random>
#include <string>
#include <vector>

#include "kernels/half_bits.h"
#include "ops/host_driver.h"
#include "support/decode_reference.h"
#include "support/kernel_harness.h"

namespace baton::kernel_test {
namespace {

std::vector<std::int32_t> Sample(cudaStream_t stream, const DecoderConfig& config,
                                 const DeviceBuffer<std::uint16_t>& logits, const TestBatch& batch,
                                 SamplingParams params, const std::vector<std::uint64_t>& ids,
                                 const std::vector<std::uint32_t>& steps) {
  auto d_ids = Upload(ids);
  auto d_steps = Upload(steps);
  auto d_tokens = Poisoned<std::int32_t>(batch.view.capacity);
  EXPECT_EQ(ops::Enqueue(ops::Select::sample(config, logits.data(), batch.view, params,
                                             d_ids.data(), d_steps.data(), d_tokens.data()),
                         stream),
            cudaSuccess);
  EXPECT_EQ(cudaStreamSynchronize(stream), cudaSuccess);
  return Download(d_tokens);
}

// Run once per dtype.
class TokenSelectionTest : public DTypeKernelTest {
 protected:
  // The greedy tokens of `capacity` rows of logits `stride` apart (`active`
  // of them live), each checked against the CPU's argmax of its row's first
  // config.vocab logits.
  std::vector<std::int32_t> CheckedArgmax(const DecoderConfig& config,
                                          const std::vector<std::uint16_t>& logits,
                                          std::uint32_t capacity, std::uint32_t active,
                                          int stride) {
    const auto f = reference::ToFloat(logits, dtype());
    TestBatch batch = MakeBatch(capacity, active, 8);
    auto d_logits = Upload(logits);
    auto d_tokens = Poisoned<std::int32_t>(capacity);
    EXPECT_EQ(
        ops::Enqueue(ops::Select::argmax(config, d_logits.data(), batch.view, d_tokens.data()),
                     stream_.get()),
        cudaSuccess);
    Sync();
    const auto tokens = Download(d_tokens);
    for (std::uint32_t p = 0; p < active; ++p) {
      EXPECT_EQ(tokens[p], reference::Argmax(&f[p * stride], config.vocab)) << "position " << p;
    }
    return tokens;
  }
};
// Run in the default dtype (fp16): what they check does not depend on it.
class SamplingTest : public DecodeKernelTest {};

TEST_P(TokenSelectionTest, ArgmaxIsExactWithTiesToTheLowestIndex) {
  DecoderConfig config;
  config.dtype = dtype();
  config.vocab = 50000;  // not a multiple of the block
  const int vocab = config.vocab;
  const std::uint32_t capacity = 7, active = 6;
  auto logits = RandomHalf(static_cast<std::size_t>(capacity) * vocab, dtype(), 3.0);
  const std::uint16_t big = FloatToHalfBits(40.0f, dtype());
  const std::uint16_t nan = dtype() == DecoderDType::kFloat16 ? 0x7E00 : 0x7FC0;
  std::uniform_int_distribution<int> index(0, vocab - 1);
  // Row 1: a tie between two random indices.
  int a = index(Rng()), b = index(Rng());
  while (b == a) b = index(Rng());
  logits[1 * vocab + a] = logits[1 * vocab + b] = big;
  // Row 2: all equal.
  std::fill(logits.begin() + 2 * vocab, logits.begin() + 3 * vocab, big);
  // Row 3: NaNs around a maximum.
  for (int i = 0; i < 100; ++i) logits[3 * vocab + index(Rng())] = nan;
  logits[3 * vocab + 77] = big;
  // Row 4: the maximum at the last index.
  logits[4 * vocab + vocab - 1] = big;
  // Row 5: -0 and +0 tie (the comparison says equal), -0 at the lower
  // index, every other logit negative.
  const std::uint16_t negative = FloatToHalfBits(-40.0f, dtype());
  std::fill(logits.begin() + 5 * vocab, logits.begin() + 6 * vocab, negative);
  const int minus_zero = index(Rng()) / 2, plus_zero = vocab / 2 + index(Rng()) / 2;
  logits[5 * vocab + minus_zero] = 0x8000;  // -0 in both types
  logits[5 * vocab + plus_zero] = 0x0000;
  const auto tokens = CheckedArgmax(config, logits, capacity, active, vocab);
  EXPECT_EQ(tokens[1], std::min(a, b));
  EXPECT_EQ(tokens[2], 0);
  EXPECT_EQ(tokens[4], vocab - 1);
  EXPECT_EQ(tokens[5], minus_zero);
  EXPECT_EQ(tokens[active], -1) << "the token past the live batch was written";
}

// A vocabulary that is not a multiple of 8 (GPT-2's 50257) sits in rows
// padded_vocab() apart; the padding, here the largest logit of every row, is
// never chosen: not by argmax, nor by sampling (plain, top-k or top-p).
TEST_P(TokenSelectionTest, PaddingOfAnUnalignedVocabularyIsNeverChosen) {
  DecoderConfig config;
  config.dtype = dtype();
  config.vocab = 50257;
  const int vocab = config.vocab, stride = config.padded_vocab();
  ASSERT_EQ(stride, 50264);
  const std::uint32_t capacity = 8, active = 8;
  auto logits = RandomHalf(static_cast<std::size_t>(capacity) * stride, dtype(), 3.0);
  const std::uint16_t padding = FloatToHalfBits(60.0f, dtype());
  const std::uint16_t big = FloatToHalfBits(40.0f, dtype());
  for (std::uint32_t p = 0; p < capacity; ++p) {
    std::fill(logits.begin() + p * stride + vocab, logits.begin() + (p + 1) * stride, padding);
  }
  logits[1 * stride + vocab - 1] = big;  // the maximum at the last real index
  logits[2 * stride + vocab - 8] = big;  // the last vector's first element
  const auto tokens = CheckedArgmax(config, logits, capacity, active, stride);
  EXPECT_EQ(tokens[1], vocab - 1);
  EXPECT_EQ(tokens[2], vocab - 8);
  TestBatch batch = MakeBatch(capacity, active, 8);
  auto d_logits = Upload(logits);
  std::vector<std::uint64_t> ids(capacity);
  std::vector<std::uint32_t> steps(capacity);
  for (const SamplingParams params :
       {SamplingParams{1.0f, Draw()}, SamplingParams{1.5f, Draw(), 50},
        SamplingParams{1.0f, Draw(), 0, 0.95f}}) {
    for (int round = 0; round < 8; ++round) {
      for (auto& id : ids) id = Draw();
      for (auto& st : steps) st = static_cast<std::uint32_t>(Draw());
      for (const std::int32_t token :
           Sample(stream_.get(), config, d_logits, batch, params, ids, steps)) {
        EXPECT_TRUE(token >= 0 && token < vocab)
            << "token " << token << " (temperature " << params.temperature << ", top_k "
            << params.top_k << ", top_p " << params.top_p << ")";
      }
    }
  }
}

// The device's token maximizes the CPU's Gumbel scores, computed through the
// host Philox from the documented (seed, sequence, step) mapping. Scores are
// compared within 1e-3 since the device's logf differs from double log in the
// last bits; a wrong counter mapping misses by whole units.
TEST_P(TokenSelectionTest, SamplingMatchesTheCpuPhiloxReference) {
  DecoderConfig config;
  config.dtype = dtype();
  config.vocab = 1000;
  const std::uint32_t capacity = 16, active = 16;
  const auto logits = RandomHalf(capacity * 1000, dtype(), 2.0);
  const auto f = reference::ToFloat(logits, dtype());
  TestBatch batch = MakeBatch(capacity, active, 16);
  auto d_logits = Upload(logits);
  std::vector<std::uint64_t> ids(capacity);
  std::vector<std::uint32_t> steps(capacity);
  for (auto& id : ids) id = Draw();
  for (auto& s : steps) s = static_cast<std::uint32_t>(Draw());  // offsets past 2^32 too
  steps[0] = 0;
  for (float temperature : {1.0f, 0.7f}) {
    SamplingParams params{temperature, Draw()};
    const auto tokens = Sample(stream_.get(), config, d_logits, batch, params, ids, steps);
    int exact = 0;
    for (std::uint32_t p = 0; p < active; ++p) {
      const auto scores =
          reference::SampleScores(&f[p * 1000], 1000, temperature, params.seed, ids[p], steps[p]);
      const int best =
          static_cast<int>(std::max_element(scores.begin(), scores.end()) - scores.begin());
      ASSERT_GE(tokens[p], 0);
      ASSERT_LT(tokens[p], 1000);
      EXPECT_GE(scores[tokens[p]], scores[best] - 1e-3) << "position " << p;
      exact += tokens[p] == best;
    }
    std::printf("  sampling %s T=%.1f: %d/%u tokens equal the CPU Philox reference\n",
                Name(dtype()), temperature, exact, active);
    RecordProperty(
        std::string("sample_exact_") + Name(dtype()) + "_T" + std::to_string(temperature), exact);
  }
}

TEST_P(TokenSelectionTest, SamplingAtZeroTemperatureIsArgmax) {
  DecoderConfig config;
  config.dtype = dtype();
  config.vocab = 2048;
  const std::uint32_t capacity = 8, active = 8;
  // Distinct logits in the storage type: consecutive bit patterns upward of
  // 1.0 in a random order, so neighbours differ by at least one ulp of 1.0
  // (2^-10 fp16, 2^-7 bf16), which at T = 1e-5 outweighs any Gumbel
  // difference (< 20 for u inside (2^-24, 1 - 2^-24)).
  std::vector<std::uint16_t> logits(capacity * 2048);
  const std::uint16_t one = FloatToHalfBits(1.0f, dtype());
  for (std::uint32_t p = 0; p < capacity; ++p) {
    std::vector<int> order(2048);
    std::iota(order.begin(), order.end(), 0);
    std::shuffle(order.begin(), order.end(), Rng());
    for (int i = 0; i < 2048; ++i) {
      logits[p * 2048 + i] = static_cast<std::uint16_t>(one + order[i]);
    }
  }
  TestBatch batch = MakeBatch(capacity, active, 8);
  std::vector<std::uint64_t> ids(capacity);
  std::vector<std::uint32_t> steps(capacity, 5);
  for (auto& id : ids) id = Draw();
  auto d_logits = Upload(logits);
  const auto greedy = CheckedArgmax(config, logits, capacity, active, 2048);
  EXPECT_EQ(Sample(stream_.get(), config, d_logits, batch, {0.0f, Draw()}, ids, steps), greedy);
  EXPECT_EQ(Sample(stream_.get(), config, d_logits, batch, {1e-5f, Draw()}, ids, steps), greedy);
  EXPECT_EQ(Sample(stream_.get(), config, d_logits, batch, {-1.0f, Draw()}, ids, steps), greedy);
}

INSTANTIATE_TEST_SUITE_P(, TokenSelectionTest, ::testing::ValuesIn(kDTypes), DTypeParamName);

// Same (seed, sequence, step) -> same token, wherever the sequence sits in the
// batch; another seed or step -> other draws.
TEST_F(SamplingTest, IsReproducibleAndKeyedBySeedSequenceAndStep) {
  DecoderConfig config;
  config.vocab = 4096;
  const std::uint32_t capacity = 64, active = 64;
  // Flat logits: every token likely, so different keys give different draws.
  const auto logits = RandomHalf(capacity * 4096, config.dtype, 0.1);
  TestBatch batch = MakeBatch(capacity, active, 64);
  auto d_logits = Upload(logits);
  std::vector<std::uint64_t> ids(capacity);
  std::vector<std::uint32_t> steps(capacity);
  for (auto& id : ids) id = Draw();
  for (auto& s : steps) s = static_cast<std::uint32_t>(Draw() % 1000);
  const SamplingParams params{1.0f, Draw()};
  const auto first = Sample(stream_.get(), config, d_logits, batch, params, ids, steps);
  const auto second = Sample(stream_.get(), config, d_logits, batch, params, ids, steps);
  EXPECT_EQ(first, second);
  const auto differing = [&](const std::vector<std::int32_t>& other) {
    int n = 0;
    for (std::uint32_t p = 0; p < active; ++p) n += other[p] != first[p];
    return n;
  };
  const auto other_seed =
      Sample(stream_.get(), config, d_logits, batch, {1.0f, params.seed ^ 1}, ids, steps);
  EXPECT_GT(differing(other_seed), 48);
  auto next_steps = steps;
  for (auto& s : next_steps) ++s;
  EXPECT_GT(differing(Sample(stream_.get(), config, d_logits, batch, params, ids, next_steps)), 48);
  auto other_ids = ids;
  for (auto& id : other_ids) id += 1;
  EXPECT_GT(differing(Sample(stream_.get(), config, d_logits, batch, params, other_ids, steps)),
            48);
  // Reverse the batch (rows of logits with their sequences): each sequence
  // draws the same token at its new position.
  std::vector<std::uint16_t> reversed(logits.size());
  std::vector<std::uint64_t> rev_ids(ids.rbegin(), ids.rend());
  std::vector<std::uint32_t> rev_steps(steps.rbegin(), steps.rend());
  for (std::uint32_t p = 0; p < capacity; ++p) {
    std::copy(logits.begin() + p * 4096, logits.begin() + (p + 1) * 4096,
              reversed.begin() + (capacity - 1 - p) * 4096);
  }
  auto d_reversed = Upload(reversed);
  const auto moved = Sample(stream_.get(), config, d_reversed, batch, params, rev_ids, rev_steps);
  for (std::uint32_t p = 0; p < capacity; ++p) EXPECT_EQ(moved[capacity - 1 - p], first[p]);
}

// 32768 draws over a vocabulary of 8 (1024 sequences x 32 steps): each
// token's frequency is within 0.015 of softmax(logits / T) (about 5 standard
// deviations of a frequency estimated from 32768 draws).
TEST_F(SamplingTest, FrequenciesFollowSoftmax) {
  DecoderConfig config;
  config.vocab = 8;
  const float temperature = 1.3f;
  const std::uint32_t capacity = 1024;
  const float row[8] = {0.0f, 0.5f, 1.0f, -1.0f, 2.0f, 0.25f, -0.5f, 1.5f};
  std::vector<std::uint16_t> logits(capacity * 8);
  for (std::uint32_t p = 0; p < capacity; ++p) {
    for (int i = 0; i < 8; ++i) logits[p * 8 + i] = FloatToHalfBits(row[i], config.dtype);
  }
  TestBatch batch = MakeBatch(capacity, capacity, capacity);
  auto d_logits = Upload(logits);
  std::vector<std::uint64_t> ids(capacity);
  std::iota(ids.begin(), ids.end(), std::uint64_t{0});
  const SamplingParams params{temperature, Draw()};
  std::vector<double> counts(8, 0.0);
  constexpr int kSteps = 32;
  for (int s = 0; s < kSteps; ++s) {
    const auto tokens = Sample(stream_.get(), config, d_logits, batch, params, ids,
                               std::vector<std::uint32_t>(capacity, s));
    for (std::int32_t t : tokens) {
      ASSERT_GE(t, 0);
      ASSERT_LT(t, 8);
      counts[t] += 1;
    }
  }
  double z = 0;
  for (float l : row) z += std::exp(l / temperature);
  double worst = 0;
  for (int i = 0; i < 8; ++i) {
    const double expected = std::exp(row[i] / temperature) / z;
    const double got = counts[i] / (capacity * kSteps);
    worst = std::max(worst, std::abs(got - expected));
    EXPECT_NEAR(got, expected, 0.015) << "token " << i;
  }
  std::printf("  sampling frequencies: worst |freq - softmax| = %.4f over %u draws\n", worst,
              capacity * kSteps);
  RecordProperty("sample_freq_worst_abs_dev", std::to_string(worst));
}

}  // namespace
}  // namespace baton::kernel_test
