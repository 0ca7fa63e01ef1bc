// A request's tokens are the same whether a host-driven loop or an engine
// drives the decoder model (DecoderGemm::kBatonGemv), in every run, not only
// the last.
//
// The host loop (support/host_decode_loop.h) decides every step on the host:
// it admits all requests in order into the lowest free slots and runs each
// batch in the smallest bucket that holds it. Each engine (tail-launch,
// conditional, dynamic parallelism) gets the requests in chunks while its
// loop runs, so its batches, slots and buckets differ from the host loop's.
// Every driver runs the same requests kRepeats times on one model (its KV
// cache keeps the previous run's rows: a run must not read them); each run
// obeys the completion rules, and every run's tokens, every entry's, must
// equal the host loop's first run, greedy and sampled. That first run is
// itself checked against the CPU reference (teacher-forced), so a reference
// that all drivers got wrong alike fails too. WriteRequests clears the
// generated tokens before every run, so a run that wrote none fails.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstdio>
#include <map>
#include <string>
#include <vector>

#include "baton/decoder_model.h"
#include "kernels/decoder_weights.h"
#include "support/decoder_runs.h"
#include "support/gpu_test.h"
#include "support/host_decode_loop.h"
#include "support/model_reference.h"

namespace baton::testing {
namespace {

constexpr int kRepeats = 3;
constexpr std::size_t kRequests = 200;

// The drivers, the host loop first (its first run is the reference).
enum class Driver { kHost, kTailLaunch, kConditional, kDynamicParallelism };

std::string DriverName(Driver driver) {
  switch (driver) {
    case Driver::kHost:
      return "host loop";
    case Driver::kTailLaunch:
      return EngineName(Engine::kTailLaunch);
    case Driver::kConditional:
      return EngineName(Engine::kConditional);
    case Driver::kDynamicParallelism:
      return EngineName(Engine::kDynamicParallelism);
  }
  return "unknown";
}

Engine EngineOf(Driver driver) {
  return driver == Driver::kConditional          ? Engine::kConditional
         : driver == Driver::kDynamicParallelism ? Engine::kDynamicParallelism
                                                 : Engine::kTailLaunch;
}

// Entries whose tokens differ from the reference's; the first few fail by name.
int CountDiffering(const std::map<std::uint32_t, Outcome>& run,
                   const std::map<std::uint32_t, Outcome>& expected_run, const std::string& label) {
  int differing = 0;
  for (const auto& [entry, expected] : expected_run) {
    const auto it = run.find(entry);
    if (it != run.end() && it->second.tokens == expected.tokens) continue;
    if (++differing <= 5) {
      ADD_FAILURE() << label << ": entry " << entry << " differs from the host loop's first run";
    }
  }
  return differing;
}

class DecoderHostLoopTest : public GpuTest {};

TEST_F(DecoderHostLoopTest, EveryRunOfEveryEngineMatchesTheHostDrivenLoop) {
  const std::vector<std::uint32_t> buckets = {1, 2, 4, 8, 16};
  for (float temperature : {0.0f, 1.0f}) {
    const std::string mode = temperature > 0.0f ? "sampled" : "greedy";
    SCOPED_TRACE(mode);
    DecoderModelOptions options;
    options.config = TinyDecoderConfig();
    options.config.vocab = 64;  // random stop tokens then hit often
    options.weight_seed = Rng()();
    options.max_batch = buckets.back();
    options.max_tokens_per_step = buckets.back();  // decode buckets: Baton's GEMV everywhere
    options.max_tokens_without_decodes = 0;        // steps without decodes too
    options.max_requests = kRequests;
    options.gemm = DecoderGemm::kBatonGemv;
    options.sampling = SamplingParams{temperature, Rng()()};
    BATON_ASSERT_OK_AND_ASSIGN(auto model, DecoderModel::Create(options));
    const std::vector<DecodeRequest> requests = RandomRequests(options.config, kRequests);
    BATON_ASSERT_OK_AND_ASSIGN(auto host_loop,
                               HostDecodeLoop::Create(model->MakeStepProgram(buckets)));

    std::map<std::uint32_t, Outcome> first_run;  // the host loop's
    int stopped = 0;
    for (Driver driver :
         {Driver::kHost, Driver::kTailLaunch, Driver::kConditional, Driver::kDynamicParallelism}) {
      for (int repeat = 0; repeat < kRepeats; ++repeat) {
        const std::string label =
            mode + ", " + DriverName(driver) + ", run " + std::to_string(repeat + 1);
        RunResult run;
        if (driver == Driver::kHost) {
          run = RunOnHostLoop(*model, *host_loop, requests);
        } else {
          RunOptions engine;
          engine.engine = EngineOf(driver);
          engine.buckets = buckets;
          engine.chunk = 13;
          run = RunRequests(*model, requests, engine);
        }
        const int stops = CheckCompletionRules(run.outcomes, requests, label, buckets.back());
        if (first_run.empty()) {
          ASSERT_EQ(run.outcomes.size(), requests.size()) << label;
          first_run = run.outcomes;
          stopped = stops;
          continue;
        }
        EXPECT_EQ(CountDiffering(run.outcomes, first_run, label), 0) << label;
      }
    }

    // The host loop's first run against the CPU reference, teacher-forced.
    BATON_ASSERT_OK_AND_ASSIGN(DecoderHostWeights weights,
                               GenerateDecoderWeights(options.config, options.weight_seed));
    reference::ReferenceDecoder cpu(weights);
    int ties = 0, tokens = 0;
    for (const auto& [entry, outcome] : first_run) {
      ties += CheckAgainstReference(cpu, requests[entry], outcome.tokens, options.sampling,
                                    mode + " host loop entry " + std::to_string(entry));
      tokens += static_cast<int>(outcome.tokens.size());
    }
    std::printf(
        "  %s: %zu requests, %d tokens, %d ended on their stop token, %d near-ties with "
        "the CPU reference; %d runs of each of 4 drivers\n",
        mode.c_str(), requests.size(), tokens, stopped, ties, kRepeats);
    EXPECT_GT(stopped, 10) << mode << ": the stop-token path was barely exercised";
    EXPECT_LE(ties, tokens / 20) << mode << ": near-ties should be rare";
  }
}

}  // namespace
}  // namespace baton::testing
