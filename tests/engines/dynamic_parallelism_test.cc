// Which engines a step program may start on once it has a device step, and
// how the dynamic-parallelism engine's failures read. Pure host checks.
#include <gtest/gtest.h>

#include <cuda_runtime_api.h>

#include <string>

#include "baton/device_error_word.h"
#include "baton/runtime.h"
#include "engines/engine_driver.h"
#include "engines/program_checks.h"

namespace baton {
namespace {

// Any non-null device pointer and launch function will do for the checks:
// nothing runs.
const void* const kFakeParams = reinterpret_cast<const void*>(0x1000);
cudaError_t FakeLaunch(const void*, const void*, cudaStream_t) { return cudaErrorNotSupported; }

DeviceStepProgram FakeDeviceStep(std::uint32_t max_batch, const char* option = nullptr) {
  return DeviceStepProgram{FakeLaunch, kFakeParams, max_batch, option};
}

StepProgram GraphProgram(std::vector<std::uint32_t> buckets) {
  StepProgram program;
  program.name = "graph only";
  program.buckets = std::move(buckets);
  program.enqueue = [](const StepContext&, cudaStream_t) { return absl::OkStatus(); };
  return program;
}

StepProgram WithDeviceStep(StepProgram program, std::uint32_t max_batch = 0) {
  program.name = "with device step";
  program.device_step = FakeDeviceStep(max_batch);
  return program;
}

void ExpectMessage(const absl::Status& status, absl::StatusCode code, const std::string& text) {
  EXPECT_EQ(status.code(), code) << status;
  EXPECT_NE(status.message().find(text), absl::string_view::npos)
      << "expected '" << text << "' in: " << status;
}

TEST(DynamicParallelismValidation, DeviceStepProgramNeedsNoGraphs) {
  RuntimeOptions options;
  options.max_batch = 64;
  StepProgram program;
  program.device_step = FakeDeviceStep(64);
  EXPECT_TRUE(ValidateStepProgram(program, options).ok());
  // Without a device step the same empty program is refused as before.
  ExpectMessage(ValidateStepProgram(StepProgram{}, options), absl::StatusCode::kInvalidArgument,
                "has no enqueue function");
}

TEST(DynamicParallelismValidation, DeviceStepAllowsMaxBatchAboveEveryBucket) {
  RuntimeOptions options;
  options.max_batch = 100;
  ExpectMessage(ValidateStepProgram(GraphProgram({8, 32}), options),
                absl::StatusCode::kInvalidArgument, "add a bucket of at least 100");
  EXPECT_TRUE(ValidateStepProgram(WithDeviceStep(GraphProgram({8, 32})), options).ok());
  // The buckets it has must still be well formed.
  ExpectMessage(ValidateStepProgram(WithDeviceStep(GraphProgram({32, 8})), options),
                absl::StatusCode::kInvalidArgument, "must increase strictly");
}

TEST(DynamicParallelismValidation, MalformedDeviceStepIsRefused) {
  RuntimeOptions options;
  options.max_batch = 64;
  StepProgram program = WithDeviceStep(GraphProgram({64}));
  program.device_step.launch = nullptr;
  ExpectMessage(ValidateStepProgram(program, options), absl::StatusCode::kInvalidArgument,
                "device_step.launch is null: take the whole DeviceStepProgram from the library "
                "that provides the device step");
  program = WithDeviceStep(GraphProgram({64}));
  program.device_step.params = nullptr;
  ExpectMessage(ValidateStepProgram(program, options), absl::StatusCode::kInvalidArgument,
                "device_step.params is null");
  program = WithDeviceStep(GraphProgram({64}), /*max_batch=*/32);
  ExpectMessage(ValidateStepProgram(program, options), absl::StatusCode::kInvalidArgument,
                "its device step serves batches up to 32 but RuntimeOptions.max_batch is 64");
}

// The decoder model's device step is sized for DecoderModelOptions::max_batch:
// a runtime that may batch more is refused, naming the model's option.
TEST(DynamicParallelismValidation, DecoderDeviceStepMustServeTheRuntimesMaxBatch) {
  RuntimeOptions options;
  options.max_batch = 64;
  StepProgram program = GraphProgram({8, 32});
  program.name = "decoder";
  program.device_step = FakeDeviceStep(32, "DecoderModelOptions::max_batch");
  ExpectMessage(ValidateStepProgram(program, options), absl::StatusCode::kInvalidArgument,
                "step program 'decoder': its device step serves batches up to 32 but "
                "RuntimeOptions.max_batch is 64: set DecoderModelOptions::max_batch = 64 or lower "
                "RuntimeOptions.max_batch");
  // A model built for more than the runtime batches is fine, above every bucket too.
  program.device_step.max_batch = 100;
  EXPECT_TRUE(ValidateStepProgram(program, options).ok());
  EXPECT_TRUE(
      detail::CheckProgramFitsEngine(program, options.max_batch, Engine::kDynamicParallelism).ok());
}

TEST(DynamicParallelismValidation, EachEngineSaysWhatTheProgramLacks) {
  RuntimeOptions options;
  options.max_batch = 100;
  ExpectMessage(
      detail::CheckProgramFitsEngine(GraphProgram({128}), options.max_batch,
                                     Engine::kDynamicParallelism),
      absl::StatusCode::kFailedPrecondition,
      "Start(Engine::kDynamicParallelism): step program 'graph only' has no device step: set "
      "StepProgram::device_step");
  EXPECT_TRUE(detail::CheckProgramFitsEngine(WithDeviceStep(GraphProgram({8})), options.max_batch,
                                             Engine::kDynamicParallelism)
                  .ok());
  for (Engine engine : {Engine::kTailLaunch, Engine::kConditional}) {
    ExpectMessage(detail::CheckProgramFitsEngine(WithDeviceStep(GraphProgram({8, 32})),
                                                 options.max_batch, engine),
                  absl::StatusCode::kFailedPrecondition,
                  "the largest bucket (32) is smaller than a whole step (100: "
                  "RuntimeOptions.max_batch), so some steps fit no graph: add a bucket of at "
                  "least 100 or start Engine::kDynamicParallelism");
    ExpectMessage(
        detail::CheckProgramFitsEngine(WithDeviceStep(StepProgram{}), options.max_batch, engine),
        absl::StatusCode::kFailedPrecondition, "has no enqueue function or no buckets");
    EXPECT_TRUE(
        detail::CheckProgramFitsEngine(GraphProgram({8, 128}), options.max_batch, engine).ok());
  }
}

TEST(DynamicParallelismValidation, SchedulerSizesCoverMaxBatch) {
  auto sizes = [](const std::vector<DeviceBucketEntry>& entries) {
    std::vector<std::uint32_t> out;
    for (const DeviceBucketEntry& e : entries) {
      EXPECT_EQ(e.exec, nullptr);
      out.push_back(e.bucket_size);
    }
    return out;
  };
  EXPECT_EQ(sizes(detail::DynamicParallelismSizes(GraphProgram({8, 32}), 100)),
            (std::vector<std::uint32_t>{8, 32, 100}));
  EXPECT_EQ(sizes(detail::DynamicParallelismSizes(GraphProgram({8, 32}), 32)),
            (std::vector<std::uint32_t>{8, 32}));
  EXPECT_EQ(sizes(detail::DynamicParallelismSizes(StepProgram{}, 5)),
            (std::vector<std::uint32_t>{5}));
}

TEST(DynamicParallelismValidation, RefusedKernelLaunchNamesTheLimit) {
  const auto engine = detail::CreateEngineDriver(Engine::kDynamicParallelism);
  const absl::Status base = absl::InvalidArgumentError("dynamic-parallelism engine: failed");
  const absl::Status tail = engine->ExplainFailure(
      base, PackDeviceError(DeviceErrorSite::kKernelLaunch, cudaErrorInvalidValue));
  ExpectMessage(tail, absl::StatusCode::kInvalidArgument,
                "dynamic-parallelism engine: failed; CUDA refused a launch into "
                "cudaStreamTailLaunch");
  const absl::Status pending = engine->ExplainFailure(
      base, PackDeviceError(DeviceErrorSite::kKernelLaunch, cudaErrorLaunchPendingCountExceeded));
  ExpectMessage(pending, absl::StatusCode::kInvalidArgument,
                "cudaLimitDevRuntimePendingLaunchCount");
  const absl::Status other =
      engine->ExplainFailure(base, PackDeviceError(DeviceErrorSite::kQueueWait, 1));
  EXPECT_EQ(other, base);
}

}  // namespace
}  // namespace baton
