// CPU tests of the runtime's option and program checks.
#include <gtest/gtest.h>

#include "absl/strings/str_cat.h"

#include <string>

#include "baton/runtime.h"

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
  options.max_batch = 0;
  status = ValidateRuntimeOptions(options);
  EXPECT_TRUE(Contains(status.message(), "RuntimeOptions.max_batch 0 is outside")) << status;

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
                       "the largest bucket (4) is smaller than "
                       "RuntimeOptions.max_batch (64): add a bucket of at "
                       "least 64"))
      << status;

  program.buckets = {4, 2, 64};
  EXPECT_EQ(ValidateStepProgram(program, options).code(), absl::StatusCode::kInvalidArgument);
  program.buckets = {};
  EXPECT_EQ(ValidateStepProgram(program, options).code(), absl::StatusCode::kInvalidArgument);
  program.buckets = {1, 8, 64};
  EXPECT_TRUE(ValidateStepProgram(program, options).ok());
}

}  // namespace
}  // namespace baton
