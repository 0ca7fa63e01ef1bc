// The decoder model's device step (DeviceStepKind::kDecoder) on the
// dynamic-parallelism engine: the same kernel bodies as the graph path,
// launched from the device with grids sized for the actual batch.
//
//  - Continuous batching of 1000 random requests (submitted in chunks while
//    the loop runs): every request completes exactly once with the right
//    token count, and its tokens are bit-identical to the tail-launch and
//    conditional engines' with DecoderGemm::kBatonGemv, greedy and sampled.
//  - A batch larger than every bucket (which only this engine runs) matches
//    the CPU reference, teacher-forced, for fp16 and bf16, greedy and sampled,
//    and is bit-identical to a graph engine whose buckets do cover it.
//  - A model built with cuBLASLt projections still runs the GEMV on the
//    device: its tokens are the GEMV model's.
//  - A model whose FFN is wide (ffn 66560: the gate | up GEMV's 8320 row
//    blocks make SiLU * up as their output, the down GEMV's K splits) gives
//    the graph engines' tokens, and the CPU reference's.
//  - A runtime asking for another batch than the model's is refused at
//    registration with a Status naming the fix.
//
// The shapes make the split kernels split: ffn 1024 splits the down
// projection's K over 4 blocks, and a vocabulary of 8192 spreads token
// selection over 2 blocks per position.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "baton/decoder_model.h"
#include "baton/runtime.h"
#include "kernels/decode_batch.h"
#include "kernels/decoder_weights.h"
#include "support/decoder_runs.h"
#include "support/gpu_test.h"
#include "support/model_reference.h"

namespace baton::testing {
namespace {

// The tiny model with a K the GEMV splits (down projection: 1024 = 32
// k-blocks over 4 blocks of 8 warps).
DecoderConfig SplitConfig(DecoderDType dtype = DecoderDType::kFloat16) {
  DecoderConfig c = TinyDecoderConfig(dtype);
  c.ffn = 1024;
  return c;
}

class DecoderDynamicParallelismTest : public GpuTest {};

TEST_F(DecoderDynamicParallelismTest, ContinuousBatchingMatchesTheGraphEngines) {
  for (float temperature : {0.0f, 1.0f}) {
    DecoderModelOptions options;
    options.config = SplitConfig();
    options.config.vocab = 64;  // random stop tokens then hit often
    options.weight_seed = Rng()();
    options.max_batch = 32;
    options.max_tokens_per_step = 32;        // every step a decode bucket (the GEMV)
    options.max_tokens_without_decodes = 0;  // steps without decodes too
    options.max_requests = 1000;
    options.gemm = DecoderGemm::kBatonGemv;
    options.sampling = SamplingParams{temperature, Rng()()};
    BATON_ASSERT_OK_AND_ASSIGN(auto model, DecoderModel::Create(options));
    const std::vector<DecodeRequest> requests = RandomRequests(options.config, 1000);
    std::vector<std::map<std::uint32_t, Outcome>> runs;
    std::vector<std::string> labels;
    for (Engine engine : {Engine::kDynamicParallelism, Engine::kTailLaunch, Engine::kConditional}) {
      RunOptions run;
      run.engine = engine;
      run.buckets = {1, 4, 8, 16, 32};
      run.chunk = 97;
      runs.push_back(RunRequests(*model, requests, run).outcomes);
      labels.push_back(EngineName(engine));
    }
    // Another mix of batches on the same engine: everything at once.
    RunOptions all_at_once;
    all_at_once.engine = Engine::kDynamicParallelism;
    all_at_once.buckets = {32};
    all_at_once.chunk = requests.size();
    runs.push_back(RunRequests(*model, requests, all_at_once).outcomes);
    labels.push_back("dynamic parallelism, all at once");
    const std::string mode = temperature > 0.0f ? "sampled" : "greedy";
    int stopped = 0;
    for (std::size_t r = 0; r < runs.size(); ++r) {
      const int stops = CheckCompletionRules(runs[r], requests, mode + ", " + labels[r], 32);
      if (r == 0) stopped = stops;
      if (r == 0 || runs[r].size() != requests.size() || runs[0].size() != requests.size()) {
        continue;
      }
      int differing = 0;
      for (std::uint32_t e = 0; e < requests.size(); ++e) {
        if (runs[r].at(e).tokens != runs[0].at(e).tokens && ++differing <= 5) {
          ADD_FAILURE() << mode << ": " << labels[r] << " differs from " << labels[0]
                        << " at entry " << e;
        }
      }
      EXPECT_EQ(differing, 0) << mode << ": " << labels[r] << " vs " << labels[0];
    }
    std::printf("  %s: 1000 requests, %d ended on their stop token\n", mode.c_str(), stopped);
    EXPECT_GT(stopped, 50) << "the stop-token path was barely exercised";
  }
}

TEST_F(DecoderDynamicParallelismTest, BatchAboveEveryBucketMatchesTheReference) {
  for (DecoderDType dtype : {DecoderDType::kFloat16, DecoderDType::kBFloat16}) {
    for (float temperature : {0.0f, 0.8f}) {
      DecoderModelOptions options;
      options.config = SplitConfig(dtype);
      options.config.vocab = 8192;  // 2 selection blocks per position
      options.weight_seed = Rng()();
      options.max_batch = 40;
      options.max_tokens_per_step = 40;
      options.max_tokens_without_decodes = 0;  // steps without decodes too
      options.max_requests = 72;
      options.gemm = DecoderGemm::kBatonGemv;
      options.sampling = SamplingParams{temperature, Rng()()};
      BATON_ASSERT_OK_AND_ASSIGN(auto model, DecoderModel::Create(options));
      const std::vector<DecodeRequest> requests =
          RandomKeyedRequests(options.config, 72, 1, 8, 4, 12);
      const std::string what = std::string(dtype == DecoderDType::kFloat16 ? "fp16" : "bf16") +
                               (temperature > 0.0f ? " sampled" : " greedy");
      // The graph engines have no graph for a batch of 40 here.
      {
        BATON_ASSERT_OK_AND_ASSIGN(auto runtime, Runtime::Create(RuntimeOptions{}));
        BATON_ASSERT_OK(runtime->RegisterStepProgram(model->MakeStepProgram({1, 2, 4, 8})));
        const absl::Status refused = runtime->Start(Engine::kTailLaunch);
        EXPECT_EQ(refused.code(), absl::StatusCode::kFailedPrecondition) << refused;
        EXPECT_NE(refused.message().find("start Engine::kDynamicParallelism"),
                  absl::string_view::npos)
            << refused;
      }
      RunOptions dp;
      dp.engine = Engine::kDynamicParallelism;
      dp.buckets = {1, 2, 4, 8};
      dp.chunk = requests.size();
      dp.trace = true;
      const RunResult device = RunRequests(*model, requests, dp);
      EXPECT_EQ(device.max_batch_seen, 40u) << what << ": the batch never filled max_batch";
      // A graph engine whose buckets cover 40 computes the same bits.
      RunOptions graph;
      graph.engine = Engine::kTailLaunch;
      graph.buckets = {8, 16, 32, 40};
      graph.chunk = requests.size();
      const RunResult graphs = RunRequests(*model, requests, graph);
      BATON_ASSERT_OK_AND_ASSIGN(DecoderHostWeights weights,
                                 GenerateDecoderWeights(options.config, options.weight_seed));
      reference::ReferenceDecoder ref(weights);
      int ties = 0, tokens = 0;
      for (std::uint32_t e = 0; e < requests.size(); ++e) {
        ASSERT_TRUE(device.outcomes.count(e)) << what << ": entry " << e;
        const Outcome& o = device.outcomes.at(e);
        EXPECT_EQ(o.completions, 1);
        EXPECT_EQ(o.value, requests[e].max_new_tokens) << "no stop token: runs to the limit";
        // 40 prompts of up to 8 tokens share the first steps' 40 rows: some wait.
        EXPECT_GE(o.steps, StepsOf(requests[e].prompt.size(), o.value, 40));
        ASSERT_EQ(o.tokens.size(), o.value);
        ties += CheckAgainstReference(ref, requests[e], o.tokens, options.sampling,
                                      what + " entry " + std::to_string(e));
        tokens += static_cast<int>(o.tokens.size());
        ASSERT_TRUE(graphs.outcomes.count(e)) << what << ": entry " << e;
        EXPECT_EQ(o.tokens, graphs.outcomes.at(e).tokens)
            << what << ": the tail-launch engine differs at entry " << e;
      }
      std::printf("  %s: batch up to %u, %d tokens, %d near-ties\n", what.c_str(),
                  device.max_batch_seen, tokens, ties);
      EXPECT_LE(ties, tokens / 20) << what << ": near-ties should be rare";
    }
  }
}

// DecoderGemm::kCublasLt shapes the graph path only: the device step always
// runs the GEMV, so its tokens are those of the GEMV model with the same weights.
TEST_F(DecoderDynamicParallelismTest, CublasLtModelRunsTheGemvOnTheDevice) {
  const std::uint64_t seed = Rng()();
  std::vector<DecodeRequest> requests(40);
  const DecoderConfig config = SplitConfig();
  for (std::size_t i = 0; i < requests.size(); ++i) {
    requests[i].prompt = RandomPrompt(config, Uniform(1, 12));
    requests[i].max_new_tokens = Uniform(4, 24);
  }
  std::vector<std::map<std::uint32_t, Outcome>> runs;
  for (DecoderGemm gemm : {DecoderGemm::kBatonGemv, DecoderGemm::kCublasLt}) {
    DecoderModelOptions options;
    options.config = config;
    options.weight_seed = seed;
    options.max_batch = 16;
    options.max_tokens_per_step = 16;        // decode buckets: the device step's GEMV plan
    options.max_tokens_without_decodes = 0;  // steps without decodes too
    options.max_requests = 40;
    options.gemm = gemm;
    BATON_ASSERT_OK_AND_ASSIGN(auto model, DecoderModel::Create(options));
    RunOptions dp;
    dp.engine = Engine::kDynamicParallelism;
    dp.buckets = {4, 16};
    dp.chunk = 7;
    runs.push_back(RunRequests(*model, requests, dp).outcomes);
    EXPECT_EQ(CheckCompletionRules(runs.back(), requests, "dynamic parallelism", 16), 0);
  }
  ASSERT_EQ(runs[0].size(), requests.size());
  ASSERT_EQ(runs[1].size(), requests.size());
  for (std::uint32_t e = 0; e < requests.size(); ++e) {
    EXPECT_EQ(runs[1].at(e).tokens, runs[0].at(e).tokens) << "entry " << e;
  }
}

TEST_F(DecoderDynamicParallelismTest, WideFfnMatchesTheGraphEnginesAndTheReference) {
  for (float temperature : {0.0f, 0.8f}) {
    DecoderModelOptions options;
    options.config = SplitConfig(DecoderDType::kBFloat16);
    options.config.ffn = 66560;  // the down GEMV's 8 row blocks x 66560 inputs
    options.weight_seed = Rng()();
    options.max_batch = 8;
    options.max_tokens_per_step = 8;
    options.max_tokens_without_decodes = 0;  // steps without decodes too
    options.max_requests = 8;
    options.gemm = DecoderGemm::kBatonGemv;
    options.sampling = SamplingParams{temperature, Rng()()};
    BATON_ASSERT_OK_AND_ASSIGN(auto model, DecoderModel::Create(options));
    const std::vector<DecodeRequest> requests = RandomKeyedRequests(options.config, 8, 1, 4, 2, 5);
    const std::string what = temperature > 0.0f ? "sampled" : "greedy";
    std::vector<RunResult> runs;
    for (Engine engine : {Engine::kDynamicParallelism, Engine::kTailLaunch}) {
      RunOptions run;
      run.engine = engine;
      run.buckets = {1, 4, 8};
      run.chunk = 3;
      runs.push_back(RunRequests(*model, requests, run));
      EXPECT_EQ(CheckCompletionRules(runs.back().outcomes, requests, what, 8), 0);
    }
    BATON_ASSERT_OK_AND_ASSIGN(DecoderHostWeights weights,
                               GenerateDecoderWeights(options.config, options.weight_seed));
    reference::ReferenceDecoder ref(weights);
    int ties = 0;
    for (std::uint32_t e = 0; e < requests.size(); ++e) {
      ASSERT_TRUE(runs[0].outcomes.count(e) && runs[1].outcomes.count(e)) << what << " " << e;
      const Outcome& device = runs[0].outcomes.at(e);
      EXPECT_EQ(device.tokens, runs[1].outcomes.at(e).tokens)
          << what << ": the tail-launch engine differs at entry " << e;
      ties += CheckAgainstReference(ref, requests[e], device.tokens, options.sampling,
                                    what + " entry " + std::to_string(e));
    }
    std::printf("  %s: %zu requests, %d near-ties\n", what.c_str(), requests.size(), ties);
  }
}

// The program carries the model's max_batch: a runtime asking for another
// is refused at registration, naming both and the fix.
TEST_F(DecoderDynamicParallelismTest, ARuntimeAskingForAnotherBatchIsRefused) {
  DecoderModelOptions options;
  options.config = TinyDecoderConfig();
  options.max_batch = 8;
  options.max_requests = 4;
  BATON_ASSERT_OK_AND_ASSIGN(auto model, DecoderModel::Create(options));
  RuntimeOptions runtime_options;
  runtime_options.max_batch = 16;
  BATON_ASSERT_OK_AND_ASSIGN(auto runtime, Runtime::Create(runtime_options));
  const absl::Status refused = runtime->RegisterStepProgram(model->MakeStepProgram());
  EXPECT_EQ(refused.code(), absl::StatusCode::kInvalidArgument) << refused;
  EXPECT_NE(refused.message().find(
                "step program 'decoder' runs 8 items at a time (StepProgram::max_batch) but "
                "RuntimeOptions.max_batch is 16: leave RuntimeOptions.max_batch 0 (the "
                "program's) or make them equal"),
            absl::string_view::npos)
      << refused;
}

}  // namespace
}  // namespace baton::testing
