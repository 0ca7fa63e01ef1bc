// The device scheduler's whole decision (scheduler/decide.cuh: retire,
// admit, plan the step's tokens, pick the bucket, including the plan's
// register shortcuts) on each graph engine against the batch policy's scalar
// reference (baton/batch_policy.h): a step program records every step's
// header and positions, the host replays the same queue with the scalar
// functions, and every step must agree (batch, rows, bucket, each position's
// item, slot, tokens so far, tokens and first row). Items read random
// inputs and then produce a few tokens each, like decoder requests, under
// budgets with and without chunk caps, in batches below and above a warp.
#include <gtest/gtest.h>

#include <chrono>
#include <cstdint>
#include <random>
#include <string>
#include <tuple>
#include <vector>

#include "baton/batch_policy.h"
#include "baton/cuda_resources.h"
#include "baton/host_batch.h"
#include "baton/runtime.h"
#include "support/gpu_test.h"
#include "support/poll.h"
#include "support/test_seed.h"
#include "token_schedule_test_kernels.h"

namespace baton {
namespace {

using test::RecordedPosition;

struct Case {
  std::uint32_t max_batch;
  TokenPolicy policy;
  std::uint32_t items;
  std::uint32_t max_input;
  const char* why;
};

const Case kCases[] = {
    {8, {64, 0}, 60, 300, "a budget of 64 over 8 items: chunks of up to 64, prompts waiting"},
    {4, {16, 5}, 40, 40, "a chunk cap of 5: several readers per step"},
    {40, {40, 1}, 100, 20, "a token per step, a batch above the warp"},
    {48, {512, 0}, 150, 1200, "long inputs, a batch above the warp, the plan loading its lanes"},
    {16, {}, 50, 10, "no budget: one token per item per step"},
};

// The schedule the scalar reference gives `items`, all queued before the
// first step: per step its header (step, batch, bucket, bucket_size, tokens)
// and positions.
struct Step {
  StepHeader header;
  std::vector<RecordedPosition> positions;
};

std::vector<Step> ReferenceSchedule(const Case& c, const std::vector<std::uint32_t>& buckets,
                                    const std::vector<WorkItem>& items) {
  HostBatch b(c.max_batch);
  const StepArgs& a = b.args();
  std::size_t next = 0;
  std::vector<Step> steps;
  while (next < items.size() || b.batch() > 0) {
    while (b.CanAdmit() && next < items.size()) b.Admit(items[next++]);
    const std::uint32_t batch = b.batch();
    Step step;
    step.header.step = steps.size();
    step.header.batch = batch;
    step.header.tokens = b.PlanTokens(c.policy);
    const int bucket = ChooseStepBucket(buckets.data(), static_cast<std::uint32_t>(buckets.size()),
                                        batch, step.header.tokens);
    step.header.bucket = static_cast<std::uint32_t>(bucket);
    step.header.bucket_size = bucket < 0 ? 0 : buckets[bucket];
    for (std::uint32_t p = 0; p < batch; ++p) {
      step.positions.push_back(
          {a.items[p].id, a.slots[p], a.item_tokens[p], a.tokens[p], a.token_offsets[p]});
      a.finished[p] =
          test::FinishesNow(a.items[p].id, InputTokens(a.items[p]), a.item_tokens[p], a.tokens[p]);
    }
    steps.push_back(std::move(step));
    b.Retire([](std::uint32_t) {});
  }
  return steps;
}

class TokenScheduleTest : public testing::GpuTest,
                          public ::testing::WithParamInterface<std::tuple<Case, Engine>> {};

TEST_P(TokenScheduleTest, EveryStepIsTheScalarReferencesStep) {
  const auto& [c, engine] = GetParam();
  SCOPED_TRACE(c.why);
  SCOPED_TRACE(testing::TestSeedNote());
  std::mt19937_64 rng(testing::TestSeed());
  std::vector<WorkItem> items;
  for (std::uint32_t i = 0; i < c.items; ++i) {
    const std::uint32_t input = std::uniform_int_distribution<std::uint32_t>(1, c.max_input)(rng);
    items.push_back(WorkItem::make(7, i, input));
  }
  std::vector<std::uint32_t> buckets;
  const std::uint32_t rows = std::max(c.max_batch, c.policy.max_tokens_per_step);
  for (std::uint32_t b = 1; b < rows; b *= 2) buckets.push_back(b);
  buckets.push_back(rows);
  const std::vector<Step> expected = ReferenceSchedule(c, buckets, items);
  const std::uint32_t max_steps = static_cast<std::uint32_t>(expected.size()) + 8;

  BATON_ASSERT_OK_AND_ASSIGN(auto headers, DeviceBuffer<StepHeader>::Create(max_steps));
  BATON_ASSERT_OK_AND_ASSIGN(
      auto positions, DeviceBuffer<RecordedPosition>::Create(std::size_t{max_steps} * c.max_batch));
  BATON_ASSERT_OK(headers.Fill(0xFF));  // poison: steps never recorded stay so
  BATON_ASSERT_OK(positions.Fill(0xFF));
  StepProgram program;
  program.name = "recording";
  program.buckets = buckets;
  program.max_batch = c.max_batch;
  program.tokens = c.policy;
  StepHeader* h = headers.data();
  RecordedPosition* r = positions.data();
  program.enqueue = [h, r, max_steps](const StepContext& ctx, cudaStream_t stream) {
    return CudaStatus(
        test::EnqueueRecordingStep(ctx.args, ctx.bucket_size, h, r, max_steps, stream),
        "recording step", __FILE__, __LINE__);
  };
  BATON_ASSERT_OK_AND_ASSIGN(auto runtime, Runtime::Create(RuntimeOptions{}));
  BATON_ASSERT_OK(runtime->RegisterStepProgram(program));
  // Everything queued before the loop starts: the device admits in queue order.
  BATON_ASSERT_OK(runtime->Submit(items));
  BATON_ASSERT_OK(runtime->Start(engine));
  testing::Polled polled;
  ASSERT_NO_FATAL_FAILURE(
      polled = testing::PollCompletions(
          *runtime, items.size(), {std::chrono::seconds(30), 256}, [](const Completion& done) {
            ASSERT_EQ(done.value, test::OutputsOf(done.id)) << "item " << done.id;
          }));
  BATON_ASSERT_OK(polled.failure);
  ASSERT_EQ(polled.completions, items.size()) << "items missing";
  BATON_ASSERT_OK(runtime->Stop().status());
  EXPECT_EQ(runtime->stats().steps, expected.size());

  std::vector<StepHeader> got_headers(max_steps);
  std::vector<RecordedPosition> got_positions(std::size_t{max_steps} * c.max_batch);
  BATON_ASSERT_OK(headers.CopyTo(absl::MakeSpan(got_headers)));
  BATON_ASSERT_OK(positions.CopyTo(absl::MakeSpan(got_positions)));
  for (std::size_t s = 0; s < expected.size(); ++s) {
    SCOPED_TRACE(::testing::Message() << "step " << s);
    const StepHeader& want = expected[s].header;
    const StepHeader& got = got_headers[s];
    ASSERT_EQ(got.step, s);
    ASSERT_EQ(got.batch, want.batch);
    ASSERT_EQ(got.tokens, want.tokens);
    ASSERT_EQ(got.bucket, want.bucket);
    ASSERT_EQ(got.bucket_size, want.bucket_size);
    for (std::uint32_t p = 0; p < want.batch; ++p) {
      const RecordedPosition& a = got_positions[s * c.max_batch + p];
      const RecordedPosition& b = expected[s].positions[p];
      ASSERT_TRUE(a.id == b.id && a.slot == b.slot && a.item_tokens == b.item_tokens &&
                  a.tokens == b.tokens && a.offset == b.offset)
          << "position " << p << ": device (id " << a.id << ", slot " << a.slot << ", ran "
          << a.item_tokens << ", tokens " << a.tokens << ", row " << a.offset << "), reference (id "
          << b.id << ", slot " << b.slot << ", ran " << b.item_tokens << ", tokens " << b.tokens
          << ", row " << b.offset << ")";
    }
  }
  EXPECT_EQ(got_headers[expected.size()].step, ~0ull) << "a step past the reference's schedule";
}

std::string CaseName(const ::testing::TestParamInfo<std::tuple<Case, Engine>>& info) {
  const Case& c = std::get<0>(info.param);
  return std::string(std::get<1>(info.param) == Engine::kTailLaunch ? "Tail" : "Conditional") +
         "_b" + std::to_string(c.max_batch) + "_budget" +
         std::to_string(c.policy.max_tokens_per_step) + "_chunk" +
         std::to_string(c.policy.max_chunk_tokens);
}

INSTANTIATE_TEST_SUITE_P(Policies, TokenScheduleTest,
                         ::testing::Combine(::testing::ValuesIn(kCases),
                                            ::testing::Values(Engine::kTailLaunch,
                                                              Engine::kConditional)),
                         CaseName);

}  // namespace
}  // namespace baton
