// Top-k / top-p token selection (ops::Select::sample_positions) against the CPU
// reference of its semantics (support/decode_reference.h), on fresh random
// logits each run (support/test_seed.h: every failure names the seed), in
// fp16 and bf16, over vocabularies served by clusters of 1, 2, 3 and 8
// blocks, with greedy, plain and filtered positions mixed in one launch.
// Tokens are poisoned (-1) before every run, so a position the kernel fails
// to write fails, and positions past the live batch must keep their poison.
//
// Where the device may honestly differ from the double reference, and only
// there, either answer is accepted and counted (printed and recorded):
// - a top-p boundary: a key group whose normalized mass above lies within
//   kMassMargin of P (the device sums fp32 weights as 2^-40 fixed point);
// - a near tie of Gumbel scores (fp32 logf on the device, double here) within
//   kScoreTolerance among the survivors.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <random>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "baton/cuda_resources.h"
#include "kernels/half_bits.h"
#include "ops/host_driver.h"
#include "support/decode_reference.h"
#include "support/gpu_test.h"
#include "support/kernel_harness.h"
#include "support/test_seed.h"

namespace baton::kernel_test {
namespace {

constexpr DecoderDType kDTypes[] = {DecoderDType::kFloat16, DecoderDType::kBFloat16};
constexpr double kMassMargin = 1e-5;
constexpr double kScoreTolerance = 1e-4;

const char* Name(DecoderDType dtype) { return dtype == DecoderDType::kFloat16 ? "fp16" : "bf16"; }

// One position's request.
struct Request {
  PositionSampling params;
  std::uint64_t sequence = 0;
  std::uint32_t step = 0;
};

PositionSampling Params(float temperature, std::uint32_t top_k, float top_p) {
  PositionSampling p;
  p.temperature = temperature;
  p.top_k = top_k;
  p.top_p = top_p;
  return p;
}

reference::TokenSampling ToReference(const Request& r) {
  return {r.params.temperature, r.params.top_k, r.params.top_p, r.params.seed, r.sequence, r.step};
}

enum class Row { kNormal, kTies, kNaNs, kPlusInf, kPeaked, kAllNaN };

// Counts of the accepted verdicts.
struct Tally {
  int greedy = 0, exact = 0, boundary = 0, near_tie = 0;
};

class SamplingTest : public testing::GpuStreamTest {
 protected:
  void SetUp() override {
    GpuStreamTest::SetUp();
    if (IsSkipped()) return;
    rng_.seed(testing::TestSeed());
    RecordProperty("rng_seed", std::to_string(testing::TestSeed()));
  }
  std::uint64_t Draw() { return rng_(); }

  std::vector<std::uint16_t> MakeRow(Row kind, int vocab, DecoderDType dtype) {
    std::normal_distribution<float> normal(0.0f, kind == Row::kPeaked ? 1.0f : 2.5f);
    std::vector<std::uint16_t> row(vocab);
    for (auto& v : row) {
      const float x = normal(rng_);
      v = FloatToHalfBits(kind == Row::kTies ? std::round(x * 2.0f) / 2.0f : x, dtype);
    }
    const std::uint16_t nan = dtype == DecoderDType::kFloat16 ? 0x7E00 : 0x7FC0;
    std::uniform_int_distribution<int> index(0, vocab - 1);
    if (kind == Row::kNaNs) {
      for (int i = 0; i < vocab / 100; ++i)
        row[index(rng_)] = static_cast<std::uint16_t>(nan | (i % 2 ? 0x8000 : 0));
    } else if (kind == Row::kPlusInf) {
      row[index(rng_)] = FloatToHalfBits(INFINITY, dtype);
      for (int i = 0; i < 5; ++i) row[index(rng_)] = FloatToHalfBits(-INFINITY, dtype);
    } else if (kind == Row::kPeaked) {
      row[index(rng_)] = FloatToHalfBits(8.0f, dtype);
    } else if (kind == Row::kAllNaN) {
      std::fill(row.begin(), row.end(), nan);
    }
    return row;
  }

  // The requests' sampling keys (sequence, step) on the device, the live
  // count, the tokens poisoned (-1), and the batch over them.
  struct Keys {
    Keys(const std::vector<Request>& requests, std::uint32_t live) {
      std::vector<std::uint64_t> sequences;
      std::vector<std::uint32_t> host_steps;
      for (const Request& r : requests) {
        sequences.push_back(r.sequence);
        host_steps.push_back(r.step);
      }
      ids = Upload(sequences);
      steps = Upload(host_steps);
      active = Upload(std::vector<std::uint32_t>{live});
      tokens = Upload(std::vector<std::int32_t>(requests.size(), -1));
      batch.active = active.data();
      batch.capacity = static_cast<std::uint32_t>(requests.size());
    }
    DeviceBuffer<std::uint64_t> ids;
    DeviceBuffer<std::uint32_t> steps;
    DeviceBuffer<std::uint32_t> active;
    DeviceBuffer<std::int32_t> tokens;
    DecodeBatch batch;
  };

  Request Keyed(PositionSampling params) {
    Request r{params, Draw(), static_cast<std::uint32_t>(Draw())};  // offsets past 2^32 too
    r.params.seed = Draw();
    return r;
  }

  // ops::Select::sample_positions over rows [capacity, vocab]; the first `active`
  // positions are live. Returns all `capacity` tokens.
  std::vector<std::int32_t> RunPositions(const DecoderConfig& config,
                                         const std::vector<std::uint16_t>& rows,
                                         const std::vector<Request>& requests,
                                         std::uint32_t active) {
    return RunPositions(config, Upload(rows), requests, active);
  }
  std::vector<std::int32_t> RunPositions(const DecoderConfig& config,
                                         const DeviceBuffer<std::uint16_t>& d_rows,
                                         const std::vector<Request>& requests,
                                         std::uint32_t active) {
    std::vector<PositionSampling> params;
    for (const Request& r : requests) params.push_back(r.params);
    auto d_params = Upload(params);
    const Keys keys(requests, active);
    EXPECT_EQ(ops::Enqueue(ops::Select::sample_positions(config, d_rows.data(), keys.batch,
                                                         d_params.data(), keys.ids.data(),
                                                         keys.steps.data(), keys.tokens.data()),
                           stream_.get()),
              cudaSuccess);
    EXPECT_EQ(cudaStreamSynchronize(stream_.get()), cudaSuccess);
    return Download(keys.tokens);
  }

  // ops::Select::sample (one set of parameters) or, with sample = false,
  // ops::Select::argmax over the same rows and keys.
  std::vector<std::int32_t> RunUniform(const DecoderConfig& config,
                                       const std::vector<std::uint16_t>& rows,
                                       const std::vector<Request>& requests, std::uint32_t active,
                                       SamplingParams params, bool sample = true) {
    auto d_rows = Upload(rows);
    const Keys keys(requests, active);
    const cudaError_t launched =
        sample ? ops::Enqueue(
                     ops::Select::sample(config, d_rows.data(), keys.batch, params, keys.ids.data(),
                                         keys.steps.data(), keys.tokens.data()),
                     stream_.get())
               : ops::Enqueue(
                     ops::Select::argmax(config, d_rows.data(), keys.batch, keys.tokens.data()),
                     stream_.get());
    EXPECT_EQ(launched, cudaSuccess);
    EXPECT_EQ(cudaStreamSynchronize(stream_.get()), cudaSuccess);
    return Download(keys.tokens);
  }

  std::mt19937_64 rng_;
  ::testing::ScopedTrace seed_trace_{__FILE__, __LINE__, testing::TestSeedNote()};
};

// "" when `token` is what the semantics choose for `row` and `r` (or one of
// the answers the header comment admits, counted in `tally`), else why not.
std::string CheckToken(const std::uint16_t* row, int vocab, DecoderDType dtype, const Request& r,
                       std::int32_t token, Tally& tally) {
  if (token < 0 || token >= vocab) return "token " + std::to_string(token) + " out of range";
  const std::vector<std::uint16_t> bits(row, row + vocab);
  const std::vector<float> f = reference::ToFloat(bits, dtype);
  const reference::TokenSampling s = ToReference(r);
  if (!(s.temperature > 0.0)) {
    const int expected = reference::Argmax(f.data(), vocab);
    if (token == expected) ++tally.greedy;
    return token == expected ? "" : "greedy: expected " + std::to_string(expected);
  }
  const std::vector<double> scores =
      reference::SampleScores(f.data(), vocab, s.temperature, s.seed, s.sequence, s.step);
  const reference::SamplingThresholds th =
      reference::SamplingFilter(row, vocab, dtype, s, kMassMargin);
  const std::uint16_t key = reference::LogitKey(row[token], dtype);
  if (key < th.loose) return "token " + std::to_string(token) + " is outside the allowed set";
  const int exact = reference::BestSurvivor(row, vocab, dtype, scores, th.exact);
  if (token == exact) {
    ++tally.exact;
    return "";
  }
  // The thresholds a correct device may use: every key group in [loose, strict].
  std::set<std::uint16_t> thresholds{th.exact};
  if (th.ambiguous) {
    for (std::uint16_t b : bits) {
      const std::uint16_t k = reference::LogitKey(b, dtype);
      if (k >= th.loose && k <= th.strict) thresholds.insert(k);
    }
    for (std::uint16_t theta : thresholds) {
      if (reference::BestSurvivor(row, vocab, dtype, scores, theta) == token) {
        ++tally.boundary;
        return "";
      }
    }
  }
  for (std::uint16_t theta : thresholds) {
    const int best = reference::BestSurvivor(row, vocab, dtype, scores, theta);
    if (best >= 0 && key >= theta && std::isfinite(scores[best]) &&
        scores[token] >= scores[best] - kScoreTolerance) {
      ++tally.near_tie;
      return "";
    }
  }
  return "token " + std::to_string(token) + " (score " + std::to_string(scores[token]) +
         "), expected " + std::to_string(exact) + " (score " + std::to_string(scores[exact]) +
         "); thresholds loose/exact/strict " + std::to_string(th.loose) + "/" +
         std::to_string(th.exact) + "/" + std::to_string(th.strict);
}

std::string Describe(const Request& r) {
  char text[160];
  std::snprintf(text, sizeof(text), "T=%g K=%u P=%g seed=%llu sequence=%llu step=%u",
                r.params.temperature, r.params.top_k, r.params.top_p,
                static_cast<unsigned long long>(r.params.seed),
                static_cast<unsigned long long>(r.sequence), r.step);
  return text;
}

void Report(const std::string& what, const Tally& t) {
  std::printf("  %-34s greedy %d, exact %d, top-p boundary %d, near tie %d\n", what.c_str(),
              t.greedy, t.exact, t.boundary, t.near_tie);
  ::testing::Test::RecordProperty(what + "_boundary", t.boundary);
  ::testing::Test::RecordProperty(what + "_near_tie", t.near_tie);
}

// The mixed batch every test below draws from: a row kind and parameters per position.
struct Mixed {
  Row row;
  PositionSampling params;
};
std::vector<Mixed> MixedBatch(int vocab) {
  const std::uint32_t over = static_cast<std::uint32_t>(vocab) + 5;
  return {{Row::kNormal, Params(0.0f, 0, 1.0f)},  {Row::kNormal, Params(0.8f, 0, 1.0f)},
          {Row::kNormal, Params(1.0f, 1, 1.0f)},  {Row::kNormal, Params(0.7f, 2, 1.0f)},
          {Row::kNormal, Params(1.0f, 50, 1.0f)}, {Row::kNormal, Params(1.0f, 0, 0.1f)},
          {Row::kNormal, Params(1.0f, 0, 0.9f)},  {Row::kNormal, Params(0.8f, 50, 0.9f)},
          {Row::kNormal, Params(1.5f, 2, 0.5f)},  {Row::kNormal, Params(1.2f, over, 1.0f)},
          {Row::kNormal, Params(1.0f, 0, 0.0f)},  {Row::kNormal, Params(2.0f, 1000, 0.95f)},
          {Row::kNormal, Params(-1.0f, 5, 0.5f)}, {Row::kTies, Params(0.5f, 0, 0.9f)},
          {Row::kTies, Params(1.0f, 50, 1.0f)},   {Row::kNaNs, Params(1.0f, 50, 0.9f)},
          {Row::kPlusInf, Params(1.0f, 3, 0.5f)}, {Row::kPeaked, Params(1.0f, 0, 0.7f)},
          {Row::kAllNaN, Params(1.0f, 2, 0.5f)},  {Row::kNormal, Params(1.0f, 50, 0.9f)}};
}

// Vocabularies served by clusters of 1, 2, 3 and 8 blocks.
constexpr int kVocabs[] = {1000, 5000, 12000, 32000, 128256, 151936};

TEST_F(SamplingTest, MixedPositionsMatchTheCpuReference) {
  for (DecoderDType dtype : kDTypes) {
    for (int vocab : kVocabs) {
      SCOPED_TRACE(std::string(Name(dtype)) + " vocab " + std::to_string(vocab));
      DecoderConfig config;
      config.dtype = dtype;
      config.vocab = vocab;
      Tally tally;
      for (int round = 0; round < 2; ++round) {
        const std::vector<Mixed> mixed = MixedBatch(vocab);
        const std::uint32_t capacity = static_cast<std::uint32_t>(mixed.size()),
                            active = capacity - 1;
        std::vector<std::uint16_t> rows;
        std::vector<Request> requests;
        for (const Mixed& m : mixed) {
          const auto row = MakeRow(m.row, vocab, dtype);
          rows.insert(rows.end(), row.begin(), row.end());
          requests.push_back(Keyed(m.params));
        }
        const auto tokens = RunPositions(config, rows, requests, active);
        for (std::uint32_t p = 0; p < active; ++p) {
          const std::string error = CheckToken(&rows[std::size_t{p} * vocab], vocab, dtype,
                                               requests[p], tokens[p], tally);
          EXPECT_EQ(error, "") << "position " << p << ": " << Describe(requests[p]);
        }
        EXPECT_EQ(tokens[active], -1) << "the token past the live batch was written";
        // The all-NaN row: every key is -inf's, every score -inf: token 0.
        EXPECT_EQ(tokens[18], 0);
      }
      Report(std::string("mixed_") + Name(dtype) + "_" + std::to_string(vocab), tally);
    }
  }
}

// K = 1 keeps only the largest logit: the greedy token at any temperature,
// with or without top-p; with a tie at the top, one of the tied tokens.
TEST_F(SamplingTest, TopKOneIsGreedy) {
  for (DecoderDType dtype : kDTypes) {
    for (int vocab : {1000, 32000, 151936}) {
      SCOPED_TRACE(std::string(Name(dtype)) + " vocab " + std::to_string(vocab));
      DecoderConfig config;
      config.dtype = dtype;
      config.vocab = vocab;
      const float temperatures[] = {0.2f, 1.0f, 5.0f, 50.0f};
      const float top_ps[] = {1.0f, 0.5f};
      std::vector<std::uint16_t> rows;
      std::vector<Request> requests;
      std::uniform_int_distribution<int> index(0, vocab - 1);
      for (int p = 0; p < 8; ++p) {
        auto row = MakeRow(Row::kNormal, vocab, dtype);
        row[index(rng_)] = FloatToHalfBits(30.0f, dtype);  // a unique maximum
        rows.insert(rows.end(), row.begin(), row.end());
        requests.push_back(Keyed(Params(temperatures[p % 4], 1, top_ps[p / 4])));
      }
      // Two more rows with the maximum at two indices.
      int tied[2][2];
      for (int p = 0; p < 2; ++p) {
        auto row = MakeRow(Row::kNormal, vocab, dtype);
        tied[p][0] = index(rng_);
        do tied[p][1] = index(rng_);
        while (tied[p][1] == tied[p][0]);
        row[tied[p][0]] = row[tied[p][1]] = FloatToHalfBits(30.0f, dtype);
        rows.insert(rows.end(), row.begin(), row.end());
        requests.push_back(Keyed(Params(1.0f, 1, 1.0f)));
      }
      const auto tokens = RunPositions(config, rows, requests, 10);
      const auto greedy = RunUniform(config, rows, requests, 10, {}, /*sample=*/false);
      for (int p = 0; p < 8; ++p) EXPECT_EQ(tokens[p], greedy[p]) << Describe(requests[p]);
      for (int p = 0; p < 2; ++p) {
        EXPECT_TRUE(tokens[8 + p] == tied[p][0] || tokens[8 + p] == tied[p][1])
            << "token " << tokens[8 + p] << " is not one of the tied maxima";
      }
    }
  }
}

// Plain temperature sampling through the per-position launcher is
// ops::Select::sample bit for bit; a filtered position whose plain token survives
// its filter gets that very token (the survivors' Gumbel-max is the plain
// one's restricted to them); ops::Select::sample's uniform top-k / top-p equals the
// per-position launcher with the same parameters everywhere.
TEST_F(SamplingTest, FilteredAndPlainPathsAgreeWithUniformSampling) {
  int same_as_plain = 0;
  for (DecoderDType dtype : kDTypes) {
    for (int vocab : {1000, 12000, 32000, 151936}) {
      SCOPED_TRACE(std::string(Name(dtype)) + " vocab " + std::to_string(vocab));
      DecoderConfig config;
      config.dtype = dtype;
      config.vocab = vocab;
      const std::uint32_t capacity = 16, active = 15;
      const SamplingParams uniform{0.9f, Draw()};
      std::vector<std::uint16_t> rows;
      std::vector<Request> plain;
      for (std::uint32_t p = 0; p < capacity; ++p) {
        const auto row = MakeRow(p % 5 == 4 ? Row::kTies : Row::kNormal, vocab, dtype);
        rows.insert(rows.end(), row.begin(), row.end());
        Request r = Keyed(Params(uniform.temperature, 0, 1.0f));
        r.params.seed = uniform.seed;
        plain.push_back(r);
      }
      const auto sampled = RunUniform(config, rows, plain, active, uniform);
      EXPECT_EQ(RunPositions(config, rows, plain, active), sampled);
      const std::pair<std::uint32_t, float> filters[] = {
          {1, 1.0f}, {2, 1.0f}, {50, 1.0f}, {0, 0.1f}, {0, 0.9f}, {50, 0.9f}, {2, 0.5f}, {0, 0.5f}};
      std::vector<Request> filtered = plain;
      for (std::uint32_t p = 0; p < capacity; ++p) {
        filtered[p].params.top_k = filters[p % 8].first;
        filtered[p].params.top_p = filters[p % 8].second;
      }
      const auto tokens = RunPositions(config, rows, filtered, active);
      Tally tally;
      for (std::uint32_t p = 0; p < active; ++p) {
        const std::uint16_t* row = &rows[std::size_t{p} * vocab];
        EXPECT_EQ(CheckToken(row, vocab, dtype, filtered[p], tokens[p], tally), "")
            << "position " << p << ": " << Describe(filtered[p]);
        const auto th =
            reference::SamplingFilter(row, vocab, dtype, ToReference(filtered[p]), kMassMargin);
        if (reference::LogitKey(row[sampled[p]], dtype) >= th.strict) {
          EXPECT_EQ(tokens[p], sampled[p]) << "position " << p << ": " << Describe(filtered[p]);
          ++same_as_plain;
        }
      }
      EXPECT_EQ(tokens[active], -1);
      for (const auto& [k, top_p] : {filters[5], filters[1]}) {  // K 50 and P 0.9; K 2
        SamplingParams one = uniform;
        one.top_k = k;
        one.top_p = top_p;
        std::vector<Request> same = plain;
        for (Request& r : same) r.params = {one.temperature, k, top_p, 0, 0, one.seed};
        EXPECT_EQ(RunUniform(config, rows, same, active, one),
                  RunPositions(config, rows, same, active));
      }
    }
  }
  std::printf("  %d filtered positions whose plain token survives got it\n", same_as_plain);
  EXPECT_GT(same_as_plain, 20);
}

// A request's token depends on its row, parameters and key only: the same at
// any batch position, with any neighbours and in any capacity.
TEST_F(SamplingTest, SameRequestSameTokenAtAnyPositionAndCapacity) {
  for (DecoderDType dtype : kDTypes) {
    for (int vocab : {1000, 5000, 32000, 151936}) {
      SCOPED_TRACE(std::string(Name(dtype)) + " vocab " + std::to_string(vocab));
      DecoderConfig config;
      config.dtype = dtype;
      config.vocab = vocab;
      const std::vector<Mixed> mixed = MixedBatch(vocab);
      const std::uint32_t capacity = 12;
      std::vector<std::uint16_t> rows;
      std::vector<Request> requests;
      for (std::uint32_t p = 0; p < capacity; ++p) {
        const Mixed& m = mixed[(p * 7 + 3) % mixed.size()];
        const auto row = MakeRow(m.row, vocab, dtype);
        rows.insert(rows.end(), row.begin(), row.end());
        requests.push_back(Keyed(m.params));
      }
      const auto tokens = RunPositions(config, rows, requests, capacity);
      // Reversed, in a larger capacity whose last positions are not live.
      std::vector<std::uint16_t> reversed_rows;
      std::vector<Request> reversed(requests.rbegin(), requests.rend());
      for (std::uint32_t p = capacity; p-- > 0;) {
        reversed_rows.insert(reversed_rows.end(), rows.begin() + std::size_t{p} * vocab,
                             rows.begin() + std::size_t{p + 1} * vocab);
      }
      reversed.resize(capacity + 4, requests[0]);
      reversed_rows.resize(reversed_rows.size() + 4 * static_cast<std::size_t>(vocab), 0);
      const auto moved = RunPositions(config, reversed_rows, reversed, capacity);
      for (std::uint32_t p = 0; p < capacity; ++p) {
        EXPECT_EQ(moved[capacity - 1 - p], tokens[p]) << "position " << p << " reversed";
      }
      for (std::uint32_t p = 0; p < capacity + 4; ++p) {
        if (p >= capacity) EXPECT_EQ(moved[p], -1);
      }
      for (std::uint32_t p : {0u, 5u, 11u}) {
        const std::vector<std::uint16_t> one(rows.begin() + std::size_t{p} * vocab,
                                             rows.begin() + std::size_t{p + 1} * vocab);
        EXPECT_EQ(RunPositions(config, one, {requests[p]}, 1)[0], tokens[p])
            << "position " << p << " alone: " << Describe(requests[p]);
      }
    }
  }
}

// Frequencies over many sequence ids follow the softmax of logits / T
// renormalised over the survivors, and filtered tokens never appear. The
// compact row of 16 logits runs in one block, 16384 draws per group. The same
// 16 logits spread over a 32000 row whose other tokens are -30 (weight < 1e-11
// each: no filter below keeps them, and their total is far below the
// statistical error) put some in every block of the 8-block cluster; 1024
// draws per group there (every pass reads 32000 logits per draw: kept light
// for the sanitizer runs; the exact comparisons above cover that path's
// tokens). Each frequency lies within 5 standard deviations of its
// probability (both sides), and Pearson's chi-square stays below its 1e-6
// upper quantile (Wilson-Hilferty).
TEST_F(SamplingTest, FrequenciesFollowTheRenormalisedSoftmax) {
  const float logits[16] = {2.0f,  1.5f,  1.0f,  0.5f,  0.0f,   -0.5f, 1.25f, -1.0f,
                            0.75f, 1.75f, -2.0f, 0.25f, -0.25f, 2.5f,  -1.5f, 0.625f};
  const PositionSampling groups[4] = {Params(1.3f, 3, 1.0f), Params(0.8f, 0, 0.7f),
                                      Params(1.0f, 6, 0.8f), Params(0.6f, 0, 0.95f)};
  for (DecoderDType dtype : kDTypes) {
    for (int vocab : {16, 32000}) {
      const std::uint32_t capacity = vocab == 16 ? 2048 : 512;
      const int steps = vocab == 16 ? 32 : 8;
      SCOPED_TRACE(std::string(Name(dtype)) + " vocab " + std::to_string(vocab));
      DecoderConfig config;
      config.dtype = dtype;
      config.vocab = vocab;
      const int spacing = vocab / 16;
      std::vector<std::uint16_t> row(vocab, FloatToHalfBits(-30.0f, dtype));
      for (int j = 0; j < 16; ++j)
        row[j * spacing + spacing / 2] = FloatToHalfBits(logits[j], dtype);
      std::vector<std::uint16_t> rows;
      for (std::uint32_t p = 0; p < capacity; ++p) rows.insert(rows.end(), row.begin(), row.end());
      const auto d_rows = Upload(rows);
      const std::uint64_t base = Draw(), seed = Draw();
      std::vector<std::vector<double>> counts(4, std::vector<double>(vocab, 0.0));
      for (int step = 0; step < steps; ++step) {
        std::vector<Request> requests(capacity);
        for (std::uint32_t p = 0; p < capacity; ++p) {
          requests[p] = {groups[p % 4], base + p, static_cast<std::uint32_t>(step)};
          requests[p].params.seed = seed;
        }
        const auto tokens = RunPositions(config, d_rows, requests, capacity);
        for (std::uint32_t p = 0; p < capacity; ++p) {
          ASSERT_GE(tokens[p], 0);
          ASSERT_LT(tokens[p], vocab);
          counts[p % 4][tokens[p]] += 1;
        }
      }
      for (int g = 0; g < 4; ++g) {
        Request r{groups[g], 0, 0};
        const auto th = reference::SamplingFilter(row.data(), vocab, dtype, ToReference(r), 1e-3);
        ASSERT_FALSE(th.ambiguous) << "pick logits whose top-p boundary is clear";
        double z = 0.0;
        for (int i = 0; i < vocab; ++i) {
          if (reference::LogitKey(row[i], dtype) >= th.exact)
            z += std::exp(HalfBitsToFloat(row[i], dtype) / groups[g].temperature);
        }
        const double n = capacity / 4.0 * steps;
        double chi2 = 0.0;
        int survivors = 0;
        for (int i = 0; i < vocab; ++i) {
          if (reference::LogitKey(row[i], dtype) < th.exact) {
            EXPECT_EQ(counts[g][i], 0.0) << "group " << g << ": filtered token " << i << " drawn";
            continue;
          }
          ++survivors;
          const double q = std::exp(HalfBitsToFloat(row[i], dtype) / groups[g].temperature) / z;
          const double freq = counts[g][i] / n;
          EXPECT_NEAR(freq, q, 5.0 * std::sqrt(q * (1.0 - q) / n) + 1e-9)
              << "group " << g << " token " << i;
          chi2 += (counts[g][i] - n * q) * (counts[g][i] - n * q) / (n * q);
        }
        const int df = survivors - 1;
        double bound = 0.0;  // the 1e-6 upper quantile of chi-square(df), z = 4.753
        if (df > 0) {
          const double a = 2.0 / (9.0 * df);
          bound = df * std::pow(1.0 - a + 4.753 * std::sqrt(a), 3.0);
        }
        std::printf("  %s vocab %d group %d: %d survivors, chi2 %.2f (bound %.2f, df %d)\n",
                    Name(dtype), vocab, g, survivors, chi2, bound, df);
        EXPECT_LE(chi2, bound) << "group " << g;
      }
    }
  }
}

TEST_F(SamplingTest, LauncherRejectsMissingArrays) {
  DecoderConfig config;
  config.vocab = 1000;
  auto d_active = Upload(std::vector<std::uint32_t>{1});
  auto d_params = Upload(std::vector<PositionSampling>(1, PositionSampling{0.0f, 0, 0.0f, 0, 0, 0}));
  auto d_ids = Upload(std::vector<std::uint64_t>(1));
  auto d_steps = Upload(std::vector<std::uint32_t>(1));
  auto d_logits = Upload(std::vector<std::uint16_t>(1000));
  auto d_tokens = Upload(std::vector<std::int32_t>(1, -1));
  DecodeBatch batch;
  batch.active = d_active.data();
  batch.capacity = 1;
  EXPECT_EQ(
      ops::Enqueue(ops::Select::sample_positions(config, d_logits.data(), batch, nullptr,
                                                 d_ids.data(), d_steps.data(), d_tokens.data()),
                   stream_.get()),
      cudaErrorInvalidValue);
  EXPECT_EQ(
      ops::Enqueue(ops::Select::sample_positions(config, d_logits.data(), batch, d_params.data(),
                                                 nullptr, d_steps.data(), d_tokens.data()),
                   stream_.get()),
      cudaErrorInvalidValue);
  EXPECT_EQ(
      ops::Enqueue(ops::Select::sample_positions(config, d_logits.data(), batch, d_params.data(),
                                                 d_ids.data(), nullptr, d_tokens.data()),
                   stream_.get()),
      cudaErrorInvalidValue);
  batch.capacity = 0;
  EXPECT_EQ(
      ops::Enqueue(ops::Select::sample_positions(config, d_logits.data(), batch, d_params.data(),
                                                 d_ids.data(), d_steps.data(), d_tokens.data()),
                   stream_.get()),
      cudaSuccess);
  // All-zero parameters are greedy.
  batch.capacity = 1;
  ASSERT_EQ(
      ops::Enqueue(ops::Select::sample_positions(config, d_logits.data(), batch, d_params.data(),
                                                 d_ids.data(), d_steps.data(), d_tokens.data()),
                   stream_.get()),
      cudaSuccess);
  ASSERT_EQ(cudaStreamSynchronize(stream_.get()), cudaSuccess);
  EXPECT_EQ(Download(d_tokens)[0], 0);
}

}  // namespace
}  // namespace baton::kernel_test
