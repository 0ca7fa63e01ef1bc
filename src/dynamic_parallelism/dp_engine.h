// Host side of the dynamic-parallelism engine, as the runtime uses it
// (internal). Also the checks that decide which engines a step program can
// start on, since a device step changes them.
#pragma once

#include <cstdint>
#include <vector>

#include "absl/status/status.h"
#include "baton/bucket_entry.h"
#include "baton/engine.h"
#include "baton/runtime.h"
#include "scheduler_params.h"

namespace baton::detail {

// Part of ValidateStepProgram: the device step, if any, is well formed and
// serves options.max_batch.
[[nodiscard]] absl::Status ValidateDeviceStep(const StepProgram& program,
                                              const RuntimeOptions& options);

// At Start: FailedPrecondition (naming what to set) when `program` cannot run
// on `engine`.
[[nodiscard]] absl::Status CheckProgramFitsEngine(const StepProgram& program,
                                                  const RuntimeOptions& options, Engine engine);

// The sizes the dynamic-parallelism scheduler chooses among: the program's
// buckets, plus max_batch when it lies above them all (a batch outside every
// bucket still runs: the grids follow the actual batch). No graph handles.
[[nodiscard]] std::vector<DeviceBucketEntry> DynamicParallelismBuckets(const StepProgram& program,
                                                                       std::uint32_t max_batch);

[[nodiscard]] absl::Status LaunchDynamicParallelismEngine(const SchedulerParams* params,
                                                          const DeviceStepProgram& step,
                                                          cudaStream_t stream);

// Adds to a device-failure Status of the dynamic-parallelism engine which
// CUDA limit a refused kernel launch ran into and what to change.
[[nodiscard]] absl::Status ExplainDynamicParallelismFailure(absl::Status why,
                                                            std::uint32_t error_word);

}  // namespace baton::detail
