// SamplingParams' penalties and min_tokens on the GPU (baton/decoder_config.h),
// against the CPU reference teacher-forced along the device's tokens
// (support/decoder_runs.h's CheckAgainstReference restates the rules in
// double from their definitions), on the graph engines:
//
// - random presence / frequency / repetition penalties, greedy and sampled,
//   on a vocabulary of 64 (tokens repeat, so the penalties decide), with
//   requests with and without penalties sharing batch slots (a slot's counts
//   are reset for each penalized request that takes it);
// - the penalties change what is generated (a strong frequency penalty on a
//   greedy request repeats fewer tokens than the same request without it);
// - min_tokens: no stop token among the first min_tokens tokens, and the
//   request still ends at one afterwards.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <map>
#include <random>
#include <set>
#include <string>
#include <vector>

#include "baton/decoder_model.h"
#include "baton/runtime.h"
#include "support/decoder_runs.h"
#include "support/gpu_test.h"
#include "support/model_reference.h"

namespace baton::testing {
namespace {

constexpr Engine kEngines[] = {Engine::kTailLaunch, Engine::kConditional};

class DecoderPenaltiesTest : public GpuTest {};

DecoderModelOptions SmallVocabOptions() {
  DecoderModelOptions options;
  options.config = TinyDecoderConfig();
  options.config.vocab = 64;  // the same tokens come back: the penalties matter
  options.weight_seed = Rng()();
  options.max_batch = 4;  // 12 requests: every slot taken by several in turn
  options.max_requests = 12;
  options.gemm = DecoderGemm::kBatonGemv;
  return options;
}

int DistinctTokens(const std::vector<std::int32_t>& tokens) {
  return static_cast<int>(std::set<std::int32_t>(tokens.begin(), tokens.end()).size());
}

TEST_F(DecoderPenaltiesTest, PenalizedTokensMatchTheReferenceGreedyAndSampled) {
  for (float temperature : {0.0f, 0.8f}) {
    DecoderModelOptions options = SmallVocabOptions();
    BATON_ASSERT_OK_AND_ASSIGN(auto model, DecoderModel::Create(options));
    std::vector<DecodeRequest> requests = RandomKeyedRequests(options.config, 12, 1, 12, 16, 40);
    std::uniform_real_distribution<float> penalty(-2.0f, 2.0f), repetition(0.5f, 2.0f);
    for (std::size_t i = 0; i < requests.size(); ++i) {
      SamplingParams s{temperature, Rng()()};
      if (i % 3 != 2) {  // every third request without penalties, in slots the others used
        s.presence_penalty = penalty(Rng());
        s.frequency_penalty = penalty(Rng());
        s.repetition_penalty = repetition(Rng());
      }
      requests[i].sampling = s;
    }
    BATON_ASSERT_OK_AND_ASSIGN(DecoderHostWeights weights,
                               GenerateDecoderWeights(options.config, options.weight_seed));
    reference::ReferenceDecoder ref(weights);
    for (Engine engine : kEngines) {
      const auto outcomes = RunAtOnce(*model, engine, requests);
      int ties = 0, tokens = 0;
      for (std::uint32_t e = 0; e < requests.size(); ++e) {
        ASSERT_TRUE(outcomes.count(e)) << EngineName(engine) << " entry " << e;
        const Outcome& o = outcomes.at(e);
        ties += CheckAgainstReference(ref, requests[e], o.tokens, *requests[e].sampling,
                                      std::string(EngineName(engine)) + " entry " + std::to_string(e));
        tokens += static_cast<int>(o.tokens.size());
      }
      std::printf("  %s, temperature %.1f: %d tokens, %d near-ties\n", EngineName(engine),
                  temperature, tokens, ties);
      EXPECT_LE(ties, tokens / 20) << "near-ties should be rare";
    }
  }
}

TEST_F(DecoderPenaltiesTest, AFrequencyPenaltyRepeatsFewerTokens) {
  DecoderModelOptions options = SmallVocabOptions();
  BATON_ASSERT_OK_AND_ASSIGN(auto model, DecoderModel::Create(options));
  std::vector<DecodeRequest> requests = RandomKeyedRequests(options.config, 8, 1, 8, 48, 48);
  std::vector<DecodeRequest> penalized = requests;
  for (std::size_t i = 0; i < requests.size(); ++i) {
    requests[i].sampling = SamplingParams{0.0f, 0};
    requests[i].stop_tokens.clear();
    SamplingParams s{0.0f, 0};
    s.frequency_penalty = 2.0f;
    penalized[i] = requests[i];
    penalized[i].sampling = s;
  }
  const auto plain = RunAtOnce(*model, Engine::kConditional, requests);
  const auto strong = RunAtOnce(*model, Engine::kConditional, penalized);
  int plain_distinct = 0, strong_distinct = 0;
  for (std::uint32_t e = 0; e < requests.size(); ++e) {
    plain_distinct += DistinctTokens(plain.at(e).tokens);
    strong_distinct += DistinctTokens(strong.at(e).tokens);
  }
  std::printf("  distinct tokens in 8 x 48: %d without, %d with frequency_penalty 2\n",
              plain_distinct, strong_distinct);
  EXPECT_GT(strong_distinct, plain_distinct + 8 * 4);
}

TEST_F(DecoderPenaltiesTest, MinTokensKeepsTheStopTokensOutOfReachUntilThen) {
  DecoderModelOptions options = SmallVocabOptions();
  BATON_ASSERT_OK_AND_ASSIGN(auto model, DecoderModel::Create(options));
  std::vector<DecodeRequest> requests = RandomKeyedRequests(options.config, 12, 1, 12, 40, 40);
  BATON_ASSERT_OK_AND_ASSIGN(DecoderHostWeights weights,
                             GenerateDecoderWeights(options.config, options.weight_seed));
  reference::ReferenceDecoder ref(weights);
  // Each request's stop tokens: the 8 tokens it generates first without any
  // (so they would end it at once), then min_tokens 1 to 20.
  const auto free_run = RunAtOnce(*model, Engine::kTailLaunch, [&] {
    std::vector<DecodeRequest> copy = requests;
    for (DecodeRequest& r : copy) {
      r.stop_tokens.clear();
      r.sampling = SamplingParams{0.0f, 0};
    }
    return copy;
  }());
  std::uniform_int_distribution<std::uint32_t> min_tokens(1, 20);
  for (std::uint32_t e = 0; e < requests.size(); ++e) {
    const std::vector<std::int32_t>& first = free_run.at(e).tokens;
    std::set<std::int32_t> stops(first.begin(), first.begin() + 8);
    requests[e].stop_tokens.assign(stops.begin(), stops.end());
    SamplingParams s{0.0f, 0};
    s.min_tokens = min_tokens(Rng());
    requests[e].sampling = s;
  }
  for (Engine engine : kEngines) {
    const auto outcomes = RunAtOnce(*model, engine, requests);
    int ended_on_stop = 0;
    for (std::uint32_t e = 0; e < requests.size(); ++e) {
      const Outcome& o = outcomes.at(e);
      const std::set<std::int32_t> stops(requests[e].stop_tokens.begin(),
                                         requests[e].stop_tokens.end());
      const std::uint32_t masked = requests[e].sampling->min_tokens;
      ASSERT_GE(o.tokens.size(), masked) << EngineName(engine) << " entry " << e;
      for (std::uint32_t i = 0; i < masked; ++i) {
        EXPECT_FALSE(stops.count(o.tokens[i]))
            << EngineName(engine) << " entry " << e << ": stop token " << o.tokens[i]
            << " at index " << i << " before min_tokens " << masked;
      }
      if (o.value < requests[e].max_new_tokens) ++ended_on_stop;
      CheckAgainstReference(ref, requests[e], o.tokens, *requests[e].sampling,
                            std::string(EngineName(engine)) + " entry " + std::to_string(e));
    }
    std::printf("  %s: %d of 12 ended on a stop token after min_tokens\n", EngineName(engine),
                ended_on_stop);
    EXPECT_GT(ended_on_stop, 0) << "the stop tokens were never reached after min_tokens";
  }
}

}  // namespace
}  // namespace baton::testing
