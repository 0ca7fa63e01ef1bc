// Driving a DecoderModel through a Runtime in GPU tests: random requests, a
// run that submits them in chunks while the loop runs and collects every
// completion (or the same run through a host-driven loop), the rules a finished request obeys, and
// the teacher-forced comparison with the CPU reference (support/model_reference.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <map>
#include <random>
#include <string>
#include <vector>

#include "baton/decoder_model.h"
#include "baton/engine.h"
#include "baton/runtime.h"
#include "support/host_decode_loop.h"
#include "support/model_reference.h"

namespace baton::testing {

// A small model: 2 layers, d_model 128, 4 heads of 32, vocab 512, context 64.
[[nodiscard]] DecoderConfig TinyDecoderConfig(DecoderDType dtype = DecoderDType::kFloat16);
// Its grouped-query variant: context 512, 8 query heads on 2 of 64, q/k/v
// biases, llama3 RoPE.
[[nodiscard]] DecoderConfig GroupedDecoderConfig(DecoderDType dtype);
// Grouped-query attention that splits 2 and 4 ways (tensor parallelism): 8
// query heads on 4 key/value heads of 32, q/k/v and o biases, bf16, context
// 128, a vocabulary whose rows split into whole 16-byte rows.
[[nodiscard]] DecoderConfig SplitDecoderConfig();

// One generator per test binary, seeded with TestSeed() (support/test_seed.h)
// again as each test starts; a failed test prints the seed.
[[nodiscard]] std::mt19937_64& Rng();
[[nodiscard]] int Uniform(int lo, int hi);
[[nodiscard]] std::vector<std::int32_t> RandomPrompt(const DecoderConfig& config, int length);

// `count` requests: prompts of 1..16 tokens, limits of 1..40 new tokens, a
// random stop token three times in four, sequence_id = the entry.
[[nodiscard]] std::vector<DecodeRequest> RandomRequests(const DecoderConfig& config,
                                                        std::size_t count);

// `count` requests: prompts of min_prompt..max_prompt tokens, limits of
// min_new..max_new new tokens, no stop token, and a random sequence_id (the
// key of their sampling); each request's draws in that order.
[[nodiscard]] std::vector<DecodeRequest> RandomKeyedRequests(const DecoderConfig& config,
                                                             std::size_t count, int min_prompt,
                                                             int max_prompt, int min_new,
                                                             int max_new);

struct Outcome {
  std::uint32_t value = 0;
  std::uint32_t steps = 0;
  int completions = 0;
  std::vector<std::int32_t> tokens;
};

struct RunOptions {
  Engine engine = Engine::kTailLaunch;
  std::vector<std::uint32_t> buckets;
  std::size_t chunk = 1;        // requests per Submit while the loop runs
  std::uint32_t max_batch = 0;  // RuntimeOptions::max_batch; 0: the model's
  bool trace = false;           // record the device trace (max_batch_seen)
  // Submit every request before Start, so the first decision sees them all
  // and the schedule is the one a host loop replays (no arrival timing).
  bool submit_before_start = false;
};

struct RunResult {
  std::map<std::uint32_t, Outcome> outcomes;  // by entry
  std::uint32_t max_batch_seen = 0;           // the largest step batch (with trace)
  RuntimeStats stats;                         // after the run, before Stop
};

// Runs `requests` (entries 0..n-1) through a fresh runtime; fails the test
// on a missing, phantom or duplicate completion or a Status.
[[nodiscard]] RunResult RunRequests(DecoderModel& model, const std::vector<DecodeRequest>& requests,
                                    const RunOptions& options);

// RunRequests with every request submitted in one chunk on `engine`; the
// outcomes by entry.
[[nodiscard]] std::map<std::uint32_t, Outcome> RunAtOnce(
    DecoderModel& model, Engine engine, const std::vector<DecodeRequest>& requests);

// The same through a host-driven loop (support/host_decode_loop.h): the
// host decides every step.
[[nodiscard]] RunResult RunOnHostLoop(DecoderModel& model, HostDecodeLoop& loop,
                                      const std::vector<DecodeRequest>& requests);

// Records a completion of entry c.id (of `requests` entries); fails the test
// on a phantom or duplicate one or a status other than completed.
void Account(const Completion& c, std::size_t requests, std::map<std::uint32_t, Outcome>& outcomes);

// Reads each outcome's generated tokens from the model.
void ReadTokens(const DecoderModel& model, const std::vector<DecodeRequest>& requests,
                std::map<std::uint32_t, Outcome>& outcomes);

// Every request completed once, within its limit, exactly at its limit or its
// first stop token, after at least ceil(prompt / chunk) + value - 1 steps
// (its prompt read in chunks of at most `chunk` tokens, then one step per
// token; more where it waited for the step's budget), and, with
// `never_waits` (every prompt fit the first step's budget), exactly that.
// Returns how many ended on their stop token.
int CheckCompletionRules(const std::map<std::uint32_t, Outcome>& outcomes,
                         const std::vector<DecodeRequest>& requests, const std::string& label,
                         std::uint32_t chunk, bool never_waits = false);

// The steps a request that never waits for budget takes.
[[nodiscard]] std::uint32_t StepsOf(std::size_t prompt, std::uint32_t value, std::uint32_t chunk);

// Teacher-forces the reference along the device's tokens; returns the number
// of near-ties, fails on a token that is neither the reference's choice nor
// within a near-tie margin of it.
int CheckAgainstReference(reference::StepReference& ref, const DecodeRequest& request,
                          const std::vector<std::int32_t>& tokens, const SamplingParams& sampling,
                          const std::string& what);

}  // namespace baton::testing
