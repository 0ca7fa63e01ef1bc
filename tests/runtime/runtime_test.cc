// CPU tests of the runtime's option and program checks.
#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"

#include <string>
#include <vector>

#include "baton/lockstep_group.h"
#include "baton/runtime.h"
#include "engines/engine_driver.h"

namespace baton {
namespace {

bool Contains(absl::string_view text, absl::string_view part) {
  return text.find(part) != absl::string_view::npos;
}

TEST(RuntimeOptions, DefaultsAreValid) { EXPECT_TRUE(ValidateRuntimeOptions({}).ok()); }

TEST(RuntimeOptions, OutOfRangeValuesNameTheOptionAndTheFix) {
  RuntimeOptions options;
  options.mailbox_capacity = 100;
  absl::Status status = ValidateRuntimeOptions(options);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(
      Contains(status.message(), "RuntimeOptions.mailbox_capacity 100 is not a power of two"))
      << status;

  options = {};
  options.max_batch = 70000;
  status = ValidateRuntimeOptions(options);
  EXPECT_TRUE(Contains(status.message(), "RuntimeOptions.max_batch 70000 is outside")) << status;

  options = {};
  options.max_batch = 128;
  options.mailbox_capacity = 64;
  status = ValidateRuntimeOptions(options);
  EXPECT_TRUE(Contains(status.message(), "the mailbox must hold at least max_batch")) << status;

  options = {};
  options.queue_capacity = 16;
  status = ValidateRuntimeOptions(options);
  EXPECT_TRUE(Contains(status.message(), "RuntimeOptions.queue_capacity 16 is below 32")) << status;

  options = {};
  options.queue_capacity = 1000;
  EXPECT_EQ(ValidateRuntimeOptions(options).code(), absl::StatusCode::kInvalidArgument);

  for (std::uint32_t steps : {0u, 9u}) {
    options = {};
    options.conditional_steps_per_iteration = steps;
    status = ValidateRuntimeOptions(options);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_TRUE(Contains(status.message(),
                         absl::StrCat("RuntimeOptions.conditional_steps_per_iteration is ", steps,
                                      "; it must be 1 to 8")))
        << status;
  }
  for (std::uint32_t steps : {0u, 9u}) {
    options = {};
    options.tail_steps_per_launch = steps;
    status = ValidateRuntimeOptions(options);
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_TRUE(Contains(status.message(), absl::StrCat("RuntimeOptions.tail_steps_per_launch is ",
                                                        steps, "; it must be 1 to 8")))
        << status;
  }

  options = {};
  options.stop_timeout = absl::ZeroDuration();
  EXPECT_TRUE(Contains(ValidateRuntimeOptions(options).message(), "stop_timeout"));

  // A lockstep rank needs its group (baton/lockstep_group.h).
  options = {};
  options.lockstep_rank = 1;
  status = ValidateRuntimeOptions(options);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(status.message(),
                       "RuntimeOptions.lockstep_rank is 1 without a group: set "
                       "RuntimeOptions.lockstep or leave the rank 0"))
      << status;
}

// LockstepGroup's option checks that need no GPU (they come before the
// device checks): the ranks, the record bounds, the patience.
TEST(LockstepGroupOptions, OutOfRangeValuesNameTheOptionAndTheFix) {
  LockstepGroupOptions options;
  for (const std::vector<int>& devices : {std::vector<int>{0}, std::vector<int>(9, 0)}) {
    options.devices = devices;
    const absl::Status status = LockstepGroup::Create(options).status();
    EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
    EXPECT_TRUE(
        Contains(status.message(), absl::StrCat("LockstepGroupOptions.devices names ",
                                                devices.size(), " ranks: a group has 2 to 8")))
        << status;
  }
  options.devices = {0, 1};
  options.max_batch = 64;
  options.max_tokens = 32;
  absl::Status status = LockstepGroup::Create(options).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(status.message(), "max_tokens 32")) << status;
  EXPECT_TRUE(Contains(status.message(), "max_tokens >= max_batch")) << status;
  options.max_tokens = 2048;
  options.min_page_tokens = 0;
  EXPECT_TRUE(Contains(LockstepGroup::Create(options).status().message(), "min_page_tokens 0"));
  options.min_page_tokens = 16;
  options.patience = absl::ZeroDuration();
  status = LockstepGroup::Create(options).status();
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(status.message(), "LockstepGroupOptions.patience must be positive"))
      << status;
}

TEST(StepProgram, RefusesMissingEnqueueBadBucketsAndBucketsSmallerThanMaxBatch) {
  RuntimeOptions options;
  options.max_batch = 64;
  StepProgram program;
  program.name = "decode";
  program.buckets = {1, 2, 4};
  absl::Status status = ValidateStepProgram(program, options);
  EXPECT_TRUE(Contains(status.message(), "step program 'decode' has no enqueue function"))
      << status;

  program.enqueue = [](const StepContext&, cudaStream_t) { return absl::OkStatus(); };
  status = ValidateStepProgram(program, options);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(status.message(),
                       "the largest bucket (4) is smaller than a whole step (64: max_batch): add "
                       "a bucket of at least 64"))
      << status;

  program.buckets = {4, 2, 64};
  EXPECT_EQ(ValidateStepProgram(program, options).code(), absl::StatusCode::kInvalidArgument);
  program.buckets = {};
  EXPECT_EQ(ValidateStepProgram(program, options).code(), absl::StatusCode::kInvalidArgument);
  program.buckets = {1, 8, 64};
  EXPECT_TRUE(ValidateStepProgram(program, options).ok());
}

// The batch size comes from the program when it names one (the decoder
// model's KV cache is sized for it), from the options otherwise, 64 when
// neither does; two different ones are refused, naming both.
TEST(StepProgram, MaxBatchComesFromTheProgramOrTheOptionsNeverTwo) {
  StepProgram program;
  program.name = "decode";
  program.buckets = {1, 2, 4, 8};
  program.enqueue = [](const StepContext&, cudaStream_t) { return absl::OkStatus(); };
  RuntimeOptions options;
  EXPECT_EQ(EffectiveMaxBatch(program, options).value(), 64u);
  options.max_batch = 8;
  EXPECT_EQ(EffectiveMaxBatch(program, options).value(), 8u);
  program.max_batch = 8;
  EXPECT_EQ(EffectiveMaxBatch(program, options).value(), 8u);
  options.max_batch = 0;
  EXPECT_EQ(EffectiveMaxBatch(program, options).value(), 8u);
  EXPECT_TRUE(ValidateStepProgram(program, options).ok());
  options.max_batch = 4;
  const absl::Status status = ValidateStepProgram(program, options);
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(status.message(),
                       "step program 'decode' runs 8 items at a time (StepProgram::max_batch) but "
                       "RuntimeOptions.max_batch is 4: leave RuntimeOptions.max_batch 0"))
      << status;
  // The mailbox must hold the program's batch too.
  options.max_batch = 0;
  options.mailbox_capacity = 4;
  EXPECT_TRUE(Contains(ValidateStepProgram(program, options).message(),
                       "the mailbox must hold at least max_batch"));
}

// A token budget must hold every decoding item's token, and the largest
// bucket a whole step of it; a chunk cap needs a budget.
TEST(StepProgram, TokenBudgetHoldsTheBatchAndFitsTheLargestBucket) {
  StepProgram program;
  program.name = "decode";
  program.buckets = {1, 2, 4, 8, 16};
  program.enqueue = [](const StepContext&, cudaStream_t) { return absl::OkStatus(); };
  program.max_batch = 16;
  program.tokens.max_tokens_per_step = 8;
  absl::Status status = ValidateStepProgram(program, RuntimeOptions{});
  EXPECT_EQ(status.code(), absl::StatusCode::kInvalidArgument);
  EXPECT_TRUE(Contains(status.message(),
                       "StepProgram::tokens.max_tokens_per_step (8) is below max_batch (16)"))
      << status;
  program.tokens.max_tokens_per_step = 64;
  status = ValidateStepProgram(program, RuntimeOptions{});
  EXPECT_TRUE(Contains(status.message(),
                       "the largest bucket (16) is smaller than a whole step (64 rows: "
                       "StepProgram::tokens.max_rows()): add a bucket of at least 64"))
      << status;
  program.buckets.push_back(64);
  EXPECT_TRUE(ValidateStepProgram(program, RuntimeOptions{}).ok());
  // A step without decodes may hold more: the largest bucket holds that too.
  program.tokens.max_tokens_without_decodes = 256;
  EXPECT_TRUE(Contains(ValidateStepProgram(program, RuntimeOptions{}).message(),
                       "smaller than a whole step (256 rows"));
  program.buckets.push_back(256);
  EXPECT_TRUE(ValidateStepProgram(program, RuntimeOptions{}).ok());
  program.tokens = TokenPolicy{0, 4};
  EXPECT_TRUE(Contains(ValidateStepProgram(program, RuntimeOptions{}).message(),
                       "tokens.max_chunk_tokens is 4 without a token budget"));
  program.tokens = TokenPolicy{0, 0, 1024};
  EXPECT_TRUE(Contains(ValidateStepProgram(program, RuntimeOptions{}).message(),
                       "tokens.max_tokens_without_decodes is 1024 without a token budget"));
}

// A paged program's pages hold a power of two of tokens, its pool and table
// rows are not empty, and its page table exists.
TEST(StepProgram, PagesArePowersOfTwoWithAPoolARowAndATable) {
  StepProgram program;
  program.name = "paged";
  program.buckets = {1, 2, 4};
  program.enqueue = [](const StepContext&, cudaStream_t) { return absl::OkStatus(); };
  program.max_batch = 4;
  std::uint32_t table = 0;  // never dereferenced here
  program.pages = PagePolicy{48, 8, 2, &table};
  EXPECT_TRUE(Contains(ValidateStepProgram(program, RuntimeOptions{}).message(),
                       "StepProgram::pages.page_tokens is 48: pages hold a power of two"));
  program.pages = PagePolicy{16, 0, 2, &table};
  EXPECT_TRUE(Contains(ValidateStepProgram(program, RuntimeOptions{}).message(),
                       "StepProgram::pages.pool_pages is 0 and pages_per_slot 2"));
  program.pages = PagePolicy{16, 8, 2, nullptr};
  EXPECT_TRUE(Contains(ValidateStepProgram(program, RuntimeOptions{}).message(),
                       "StepProgram::pages.page_table is null"));
  program.pages = PagePolicy{16, 8, 2, &table};
  EXPECT_TRUE(ValidateStepProgram(program, RuntimeOptions{}).ok());
}

// The graph engines' steps per bucket graph or loop body: the option's n up
// to max_batch rows, one past it (a prompt chunk's bucket, which the next
// step leaves; its emptied steps would run cuBLASLt's GEMMs in full).
TEST(EngineSetup, BucketsPastMaxBatchHoldOneStep) {
  detail::EngineSetup setup;
  setup.max_batch = 8;
  for (const std::uint32_t n : {1u, 2u, 4u, 8u}) {
    setup.steps_per_graph = n;
    EXPECT_EQ(setup.StepsFor(1), n);
    EXPECT_EQ(setup.StepsFor(8), n);
    EXPECT_EQ(setup.StepsFor(9), 1u);
    EXPECT_EQ(setup.StepsFor(512), 1u);
  }
}

}  // namespace
}  // namespace baton
